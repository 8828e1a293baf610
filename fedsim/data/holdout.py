"""Per-client held-out test data (``eval.per_client.holdout``; docs/client-accuracy.md).

For data without per-client test parts, client k's training examples are split: ``h_k =
floor(share * n_k)`` of them (at most n_k - 1, so every client keeps one to train on) become its
test part, chosen by a permutation from the stream ``(seed, "holdout", k)`` (the data seed) and
kept in their original order; the rest stay its training data (so n_k, p_k and the clock's
sizes shrink accordingly). A partitioned :class:`~fedsim.data.Dataset` keeps its arrays and
loses index entries; a :class:`~fedsim.data.FederatedData` gets ``client_test`` and smaller sizes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..rng import stream

__all__ = ["held_out", "split_rows", "hold_out"]


def held_out(n: int, share: float) -> int:
    """h = min(floor(share * n), n - 1): how many of n examples are held out."""
    return max(0, min(int(np.floor(share * n)), n - 1))


def split_rows(n: int, share: float, seed: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(training positions, held-out positions) of client k's n examples, each sorted."""
    h = held_out(n, share)
    order = stream(seed, "holdout", k).permutation(n)
    return np.sort(order[h:]), np.sort(order[:h])


def hold_out(data, share: float, seed: int):
    """``(data with its held-out rows removed from training, held)``: for a Dataset, ``held[k]``
    are indices into its ``x_train``; for a FederatedData, None (its ``client_test`` gives them)."""
    from .dataset import Dataset
    from .federated import FederatedData

    if isinstance(data, Dataset):
        train, held = [], []
        for k, ix in enumerate(data.client_indices):
            a, b = split_rows(len(ix), share, seed, k)
            train.append(np.asarray(ix)[a])
            held.append(np.asarray(ix)[b])
        return replace(data, client_indices=tuple(train)), tuple(held)
    if isinstance(data, FederatedData):
        sizes = data.sizes
        get = data.client_data

        def part(k: int, test: bool):
            x, y = get(k)
            a, b = split_rows(int(sizes[k]), share, seed, k)
            rows = b if test else a
            return x[rows], y[rows]

        new_sizes = np.array([n - held_out(int(n), share) for n in sizes], dtype=np.int64)
        return replace(data, sizes=new_sizes, client_data=lambda k: part(k, False),
                       client_test=lambda k: part(k, True)), None
    raise TypeError(f"eval.per_client.holdout: cannot hold out rows of {type(data).__name__}")
