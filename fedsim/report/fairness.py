"""Participation fairness of one run, from its clients table.

A client is *heard* in a job that reached the server with work in it: ``status == completed`` and
``steps > 0``. Over the whole population of m clients (ids 0 .. m - 1, those the clock never
touched included):

* ``never_heard``: the share of the m clients never heard, in [0, 1];
* ``gini_jobs``: the Gini coefficient of the per-client counts of heard jobs x_0 .. x_{m-1}
  (zeros included), G = sum_i sum_j |x_i - x_j| / (2 m^2 mean(x)), in [0, 1 - 1/m]; 0 when
  nobody was heard (every count equal).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["participation_fairness", "heard_counts", "gini", "FAIRNESS_METRICS"]

#: The keys :func:`participation_fairness` returns, in order.
FAIRNESS_METRICS = ("never_heard", "gini_jobs")


def heard_counts(clients: pd.DataFrame, num_clients: int) -> np.ndarray:
    """Heard jobs per client 0 .. m - 1 (int64) from a table with columns client, status, steps."""
    m = int(num_clients)
    if m < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    missing = [c for c in ("client", "status", "steps") if c not in clients.columns]
    if missing:
        raise ValueError(f"clients table lacks column(s) {', '.join(missing)}")
    heard = (clients["status"].astype(str).to_numpy() == "completed") & (clients["steps"].to_numpy() > 0)
    ids = clients["client"].to_numpy()[heard]
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"client ids must be integers, got dtype {ids.dtype}")
    bad = ids[(ids < 0) | (ids >= m)]
    if bad.size:
        raise ValueError(f"client {int(bad[0])} is not an id in 0 .. {m - 1}")
    return np.bincount(ids.astype(np.int64), minlength=m)


def gini(x: np.ndarray) -> float:
    """Gini coefficient of non-negative values (0 when they sum to 0): with x sorted ascending and
    i = 1 .. n, G = sum_i (2 i - n - 1) x_(i) / (n sum x), the mean absolute difference form above
    (exact for integer counts below 2^53)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    n, total = len(x), float(x.sum())
    if n == 0 or total == 0:
        return 0.0
    if x[0] < 0 or not np.isfinite(total):
        raise ValueError("gini needs finite values >= 0")
    coef = 2.0 * np.arange(1, n + 1, dtype=np.float64) - (n + 1)
    return float(np.dot(coef, x) / (n * total))


def participation_fairness(clients: pd.DataFrame, num_clients: int) -> dict[str, float]:
    """``{never_heard, gini_jobs}`` of a clients table over all ``num_clients`` clients."""
    counts = heard_counts(clients, num_clients)
    return {"never_heard": float(np.mean(counts == 0)), "gini_jobs": gini(counts)}
