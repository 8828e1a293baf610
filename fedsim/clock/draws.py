"""The clock's random draws and integer step counts.

Every draw comes from :func:`fedsim.rng.stream` keyed by a purpose and integers that never involve
the algorithm (common random numbers):

=============  ==========================  =================================================
purpose        keys                        what
=============  ==========================  =================================================
``speed``      client                      base speed, drawn once
``slowdown``   client, key                 multiplicative factor on step time for one job
``work``       client, key                 prescribed ``local_steps`` / ``local_epochs`` draw
``select``     round (async: job seq)      whom ``uniform`` / ``weighted`` pick (``selection.py``)
``availability`` client                    Markov on/off sojourns (see ``availability.py``)
``flops``      client                      device FLOP/s (``system.compute``), drawn once
``down``       client                      download bandwidth (``system.network``), drawn once
``up``         client                      upload bandwidth (``system.network``), drawn once
``coupling``   (none)                      ``system.coupling``: one normal per client, once
                                           (:mod:`fedsim.clock.coupling`; not at strength 0 or 1)
=============  ==========================  =================================================

``key`` is the round index for synchronous policies and the job sequence number for ``async``.
With ``system.coupling`` the per-client draws above (``speed``, ``flops``, ``down``, ``up``,
``availability``) are keyed by the client's device ``devices[c]``; ``slowdown`` and ``work`` stay
keyed by the client.
"""

from __future__ import annotations

import math

import numpy as np

from fedsim.rng import stream

from .model import MAX_STEPS, Constant, PerClient

__all__ = ["STEP_GUARD", "MAX_STEPS", "whole_steps", "ConstantRate", "per_client", "PerClientDraws", "SLOWDOWN_FLOOR"]

#: ``whole_steps(x) = floor(x * STEP_GUARD)``. A step count that is mathematically an integer can
#: land a few ulps below it in floating point (``(10 - 1) * 0.3 / 0.1``); the relative guard of
#: 1e-12 counts it as whole. It can grant a step that needs up to 1e-12 (relative) more time than
#: the window has; the clock then clamps the finish time to the window (see ``sim.py``).
STEP_GUARD = 1.0 + 1e-12

#: Slowdown draws at or below zero (possible only for ``exponential``) are raised to this.
SLOWDOWN_FLOOR = 1e-9


def whole_steps(x):
    """``floor(x * (1 + 1e-12))`` for a float or a numpy array, within [0, MAX_STEPS] (see
    STEP_GUARD); NaN (0 steps' worth of time over 0 speed) counts as 0."""
    if isinstance(x, np.ndarray):
        y = np.nan_to_num(np.floor(x * STEP_GUARD), nan=0.0)
        return np.clip(y, 0, MAX_STEPS).astype(np.int64)
    y = x * STEP_GUARD
    return int(math.floor(min(y, MAX_STEPS))) if y > 0 else 0


class ConstantRate:
    """A client with one speed for all time (steps per simulated second): ``fit(t0, t1, slow)`` is
    the number of whole steps of duration ``slow / speed`` in [t0, t1], ``finish(t0, steps, slow)``
    when ``steps`` steps started at t0 end (a trace's :class:`~fedsim.clock.trace.TraceRate` has
    the same two methods)."""

    def __init__(self, speed: float):
        self.speed = float(speed)

    def fit(self, t0: float, t1: float, slow: float) -> int:
        """floor((t1 - t0) * speed / slow)."""
        return whole_steps((t1 - t0) * self.speed / slow)

    def finish(self, t0: float, steps: int, slow: float) -> float:
        """``t0 + steps * slow / speed``."""
        return t0 + steps * slow / self.speed


def per_client(spec: PerClient, num_clients: int, seed: int, purpose: str) -> np.ndarray:
    """One float per client: a number for all, a tuple with one per client, or a distribution
    drawn once per client from stream ``(purpose, client)``."""
    if isinstance(spec, (int, float)):
        return np.full(num_clients, float(spec))
    if isinstance(spec, tuple):
        if len(spec) != num_clients:
            raise ValueError(f"need one value per client ({num_clients}), got {len(spec)}")
        return np.asarray(spec, dtype=np.float64)
    if isinstance(spec, Constant):
        return np.full(num_clients, float(spec.value))
    return np.array([float(spec.sample(stream(seed, purpose, c))) for c in range(num_clients)])


class PerClientDraws:
    """The values of :func:`per_client`, drawn only for the clients asked for (and kept): a
    population of a million clients pays for the few that are ever selected."""

    def __init__(self, spec: PerClient, num_clients: int, seed: int, purpose: str, devices: np.ndarray | None = None):
        self.spec, self.seed, self.purpose = spec, seed, purpose
        self.lazy = not isinstance(spec, (int, float, tuple, Constant))
        #: client c's value is device ``devices[c]``'s (system.coupling, fedsim.clock.coupling); None: its own
        self.devices = None if devices is None else np.asarray(devices, dtype=np.int64)
        self.values = np.full(num_clients, np.nan) if self.lazy else per_client(spec, num_clients, seed, purpose)
        if not self.lazy and self.devices is not None:
            self.values = self.values[self.devices]

    def take(self, clients: np.ndarray) -> np.ndarray:
        """Values of ``clients`` (an integer array)."""
        if self.lazy:
            v = self.values[clients]
            for i in np.flatnonzero(np.isnan(v)):
                c = int(clients[i])
                d = c if self.devices is None else int(self.devices[c])
                v[i] = self.values[c] = float(self.spec.sample(stream(self.seed, self.purpose, d)))
            return v
        return self.values[clients]
