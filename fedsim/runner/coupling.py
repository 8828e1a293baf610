"""The data side of ``system.coupling``: one score per client, computed from the data, and the
permutation of devices the clock is built with (:mod:`fedsim.clock.coupling`).

Scores (``system.coupling.to``), from each client's training data:

* ``dominant_label``: its most frequent label (ties: the lowest);
* ``label_axis``: its mean label (a position on the label axis);
* ``size``: n_i, its number of training examples;
* ``feature_shift``: the mean of its inputs over all examples and features.

Labels need class labels (``num_classes``); the quadratic problem has ``size`` only. Every client
is read once (a generated population generates every client once).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ..errors import ScenarioError

__all__ = ["data_scores", "coupling_devices", "score_of"]


def score_of(to: str, x: Any, y: Any) -> float:
    """The score ``to`` of one client's training data ``(x, y)``."""
    if to == "size":
        return float(len(y))
    if to == "feature_shift":
        return float(np.asarray(x, dtype=np.float64).mean())
    labels = np.asarray(y).astype(np.int64).ravel()
    if to == "label_axis":
        return float(labels.mean())
    if to == "dominant_label":
        return float(np.argmax(np.bincount(labels)))
    raise ValueError(f"system.coupling.to: unknown {to!r}")


def _clients(data) -> tuple[int, Callable[[int], tuple[Any, Any]], bool]:
    """(clients, k -> (x, y) training data, labelled) of any data fedsim builds."""
    from ..data import Dataset, FederatedData, SyntheticPopulation
    from ..data.quadratic import QuadraticProblem

    if isinstance(data, FederatedData):
        return data.num_clients, data.client_data, data.num_classes is not None
    if isinstance(data, Dataset):
        return len(data.client_indices), lambda k: (data.x_train[data.client_indices[k]],
                                                    data.y_train[data.client_indices[k]]), True
    if isinstance(data, SyntheticPopulation):
        def client(k: int):
            c = data.client(k)
            return c.x[c.train], c.y[c.train]

        return data.clients, client, True
    if isinstance(data, QuadraticProblem):
        return len(data.client_sizes), lambda k: (data.centers[k:k + 1], np.zeros(1)), False
    raise ScenarioError(f"system.coupling: cannot read the clients of {type(data).__name__}")


def data_scores(to: str, data) -> np.ndarray:
    """One score ``to`` per client of ``data`` (see the module docstring)."""
    from ..data import FederatedData

    if to == "size":
        sizes = data.sizes if isinstance(data, FederatedData) else data.client_sizes
        return np.asarray(sizes, dtype=np.float64)
    m, get, labelled = _clients(data)
    if to in ("dominant_label", "label_axis") and not labelled:
        raise ScenarioError(f"system.coupling.to: {to} needs class labels; this data has none (use size)")
    return np.array([score_of(to, *get(k)) for k in range(m)], dtype=np.float64)


def coupling_devices(scenario, clock, data) -> np.ndarray | None:
    """The permutation ``devices`` (client c runs on device ``devices[c]``) that
    ``scenario.system.coupling`` asks of ``clock`` (built uncoupled) and ``data``; None when there
    is no coupling or its strength is 0 (the clock then draws exactly what it draws without it)."""
    from ..clock.coupling import coupled_devices, device_scores

    c = scenario.system.coupling
    if c is None or c.strength == 0:
        return None
    if data is None:
        raise ScenarioError("system.coupling: needs the data to score clients (none given)")
    try:
        dev = device_scores(clock, c.by)
    except ValueError as err:
        raise ScenarioError(str(err)) from None
    scores = data_scores(c.to, data)
    if len(scores) != len(dev):
        raise ScenarioError(f"system.coupling: {len(scores)} clients' data for {len(dev)} devices")
    if not np.isfinite(scores).all():
        raise ScenarioError(f"system.coupling.to: {c.to} is not finite for client {int(np.flatnonzero(~np.isfinite(scores))[0])}")
    return coupled_devices(scores, dev, c.strength, scenario.seed, c.direction)
