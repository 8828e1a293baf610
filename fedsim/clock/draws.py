"""The clock's random draws and integer step counts.

Every draw comes from :func:`fedsim.rng.stream` keyed by a purpose and integers that never involve
the algorithm (common random numbers):

=============  ==========================  =================================================
purpose        keys                        what
=============  ==========================  =================================================
``speed``      client                      base speed, drawn once
``slowdown``   client, key                 multiplicative factor on step time for one job
``work``       client, key                 prescribed ``local_steps`` / ``local_epochs`` draw
``select``     round (async: job seq)      which clients the server picks
``availability`` client                    Markov on/off sojourns (see ``availability.py``)
=============  ==========================  =================================================

``key`` is the round index for synchronous policies and the job sequence number for ``async``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedsim.rng import stream
from fedsim.scenario import Constant, Exponential, LogNormal, RandInt, Uniform

__all__ = ["STEP_GUARD", "whole_steps", "draw", "base_speeds", "select", "SLOWDOWN_FLOOR"]

#: ``whole_steps(x) = floor(x * STEP_GUARD)``. A step count that is mathematically an integer can
#: land a few ulps below it in floating point (``(10 - 1) * 0.3 / 0.1``); the relative guard of
#: 1e-12 counts it as whole. It can grant a step that needs up to 1e-12 (relative) more time than
#: the window has; the clock then clamps the finish time to the window (see ``sim.py``).
STEP_GUARD = 1.0 + 1e-12

#: Slowdown draws at or below zero (possible only for ``exponential``) are raised to this.
SLOWDOWN_FLOOR = 1e-9


def whole_steps(x):
    """``floor(x * (1 + 1e-12))`` for a float or a numpy array, never below 0 (see STEP_GUARD)."""
    if isinstance(x, np.ndarray):
        return np.maximum(np.floor(x * STEP_GUARD), 0).astype(np.int64)
    return max(int(math.floor(x * STEP_GUARD)), 0)


def draw(dist: Any, rng: np.random.Generator) -> float | int:
    """One value of a scenario distribution (``randint`` bounds inclusive)."""
    if isinstance(dist, Uniform):
        return float(rng.uniform(dist.low, dist.high))
    if isinstance(dist, LogNormal):
        return float(dist.median * math.exp(dist.sigma * rng.standard_normal()))
    if isinstance(dist, RandInt):
        return int(rng.integers(dist.low, dist.high + 1))
    if isinstance(dist, Constant):
        return dist.value
    if isinstance(dist, Exponential):
        return float(rng.exponential(dist.mean))
    raise TypeError(f"not a distribution: {dist!r}")


def base_speeds(speed: Any, num_clients: int, seed: int) -> np.ndarray:
    """Per-client base speed (steps per simulated second): a number, one per client, or a
    distribution drawn once per client from stream ``("speed", client)``."""
    if isinstance(speed, (int, float)):
        return np.full(num_clients, float(speed))
    if isinstance(speed, (tuple, list)):
        if len(speed) != num_clients:
            raise ValueError(f"system.speed: needs one speed per client ({num_clients})")
        return np.asarray(speed, dtype=np.float64)
    if isinstance(speed, Constant):
        return np.full(num_clients, float(speed.value))
    return np.array([float(draw(speed, stream(seed, "speed", c))) for c in range(num_clients)])


def select(
    available: np.ndarray,
    clients_per_round: int | None,
    sampling: str,
    p: np.ndarray,
    seed: int,
    key: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pick the round's clients among ``available`` (sorted client indices).

    Returns ``(clients, counts, weights)``, clients sorted. FedNova paper, ALGORITHMS.md section 1:

    * ``clients_per_round`` None: everybody available, weight p_i / P_avail (full participation).
    * uniform: q = min(clients_per_round, m) without replacement, m = len(available); the first q
      of one permutation of ``available`` from stream ``("select", key)`` (so the picks are nested
      in q); weight p_i * m / (q P_avail).
    P_avail = sum of p_i over the available clients (1 when all are online: no rescaling).
    * weighted: q = min(clients_per_round, m) draws with replacement, probability proportional to
      p_i among the available (uniform if those p_i are all 0); a client drawn k times is one job
      with count k and weight k / q.
    """
    m = len(available)
    ones = np.ones(m, dtype=np.int64)
    # Offline clients cannot be sampled: weights target the available population's objective,
    # sum_{i available} p_i F_i / P_avail (P_avail = 1, no rescaling, when everyone is online).
    p_avail = float(p[available].sum()) if m else 0.0
    scale = 1.0 if (m == len(p) or p_avail <= 0) else 1.0 / p_avail
    if m == 0 or clients_per_round is None:
        return available, ones, p[available].astype(np.float64) * scale
    q = min(clients_per_round, m)
    rng = stream(seed, "select", key)
    if sampling == "uniform":
        chosen = np.sort(available[rng.permutation(m)[:q]])
        return chosen, ones[:q], p[chosen] * m / q * scale
    if sampling != "weighted":
        raise ValueError(f"round.sampling: unknown scheme {sampling!r}")
    pa = p[available].astype(np.float64)
    total = pa.sum()
    probs = pa / total if total > 0 else np.full(m, 1.0 / m)
    counts = np.bincount(rng.choice(m, size=q, replace=True, p=probs), minlength=m)
    idx = np.flatnonzero(counts)
    return available[idx], counts[idx], counts[idx] / q
