"""scikit-learn's bundled 8x8 handwritten digits (UCI optdigits test set; offline, 1797 images)."""

from __future__ import annotations

import numpy as np

from fedsim.rng import stream
from fedsim.data.dataset import Dataset, from_arrays
from fedsim.data.partition import PartitionSpec


def digits_arrays(seed: int, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load ``sklearn.datasets.load_digits`` and split it per class.

    Features are divided by 16 (range [0, 1]) and shaped ``(N, 1, 8, 8)``. From every class a
    seeded ``round(test_fraction * n_c)`` samples go to the test set (stratified split).

    Returns:
        ``x_train, y_train, x_test, y_test`` (float32 / int64).
    """
    from sklearn.datasets import load_digits

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"digits: test_fraction must be in (0, 1), got {test_fraction}")
    bunch = load_digits()
    x = (np.asarray(bunch.data, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = np.asarray(bunch.target, dtype=np.int64)
    rng = stream(seed, "digits-split")
    test = []
    for c in np.unique(y):
        idx_c = rng.permutation(np.flatnonzero(y == c))
        test.append(idx_c[: int(round(test_fraction * len(idx_c)))])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test)] = True
    return x[~is_test], y[~is_test], x[is_test], y[is_test]


def digits(clients: int, partition: PartitionSpec, seed: int, test_fraction: float = 0.2) -> Dataset:
    """Digits split across clients.

    Args:
        clients: Number of clients.
        partition: How to split the training set.
        seed: Scenario seed.
        test_fraction: Share of every class held out for testing.

    Returns:
        Dataset ``digits``: ``(N, 1, 8, 8)`` in [0, 1], 10 classes, no normalization or augmentation.
    """
    x_tr, y_tr, x_te, y_te = digits_arrays(seed, test_fraction)
    return from_arrays("digits", x_tr, y_tr, x_te, y_te, 10, clients=clients, spec=partition, seed=seed)
