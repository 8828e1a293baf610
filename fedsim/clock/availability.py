"""Per-client availability as a timeline of on/off toggles, and per-client compute rates.

A timeline is a pure description: ``initial`` (online at t=0?) and ``toggles()``, a fresh iterator
of strictly increasing times at which the state flips. Offline periods are half-open ``[start,
end)``: a client whose outage starts at t is offline at t; one whose outage ends at t is online at
t. Calling ``toggles()`` twice gives the same times (Markov sojourns are keyed draws), so nothing about availability depends on the round policy, selection or the algorithm.

A rate turns time into local steps for one client: ``fit(t0, t1, slow)`` is the number of whole
steps that fit in [t0, t1]; ``finish(t0, steps, slow)`` is when ``steps`` steps started at t0
end. Step duration is ``slow / speed``.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator, Sequence

import numpy as np

from .draws import whole_steps
from .keyed import keyed_exponential, keyed_uniform

__all__ = ["AlwaysOnline", "OfflineIntervals", "MarkovTimeline", "MarkovStates", "ConstantRate", "cycle_times"]

INF = math.inf


class AlwaysOnline:
    """Online all the time."""

    initial = True
    changes = False

    def toggles(self) -> Iterator[float]:
        return iter(())


class OfflineIntervals:
    """Explicit offline intervals ``[start, end)`` (overlapping or touching ones are merged)."""

    changes = True

    def __init__(self, intervals: Sequence[tuple[float, float]]):
        merged: list[list[float]] = []
        for s, e in sorted((float(s), float(e)) for s, e in intervals):
            if not 0 <= s < e:
                raise ValueError(f"offline interval [{s}, {e}) needs 0 <= start < end")
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.intervals = [tuple(x) for x in merged]
        self.initial = not (merged and merged[0][0] == 0.0)
        self.changes = bool(merged)

    def toggles(self) -> Iterator[float]:
        for s, e in self.intervals:
            if s > 0.0:
                yield s
            yield e


class MarkovTimeline:
    """Two-state Markov availability of one client: exponential online/offline sojourns.

    Keyed draws ``u(seed, "availability", client, k)`` (:mod:`fedsim.clock.keyed`): k = 0 sets the
    initial state (online iff u < mean_online / (mean_online + mean_offline), the stationary
    probability); sojourn k >= 1 is ``-mean * log(u_k)`` with the mean of the state it is spent in.
    :class:`MarkovStates` walks the same draws for every client at once.
    """

    changes = True

    def __init__(self, mean_online: float, mean_offline: float, seed: int, client: int):
        self.means = np.array([mean_offline, mean_online], dtype=np.float64)  # indexed by the state
        self.seed, self.client = seed, client
        p_online = mean_online / (mean_online + mean_offline)
        self.initial = bool(keyed_uniform(seed, "availability", client, 0)[0] < p_online)

    def toggles(self) -> Iterator[float]:
        online, t = self.initial, 0.0
        for k in itertools.count(1):
            t = float(np.float64(t) + keyed_exponential(self.means[int(online)], self.seed, "availability", self.client, k)[0])
            online = not online
            yield t


class MarkovStates:
    """Every client's Markov availability as arrays (the draws of :class:`MarkovTimeline`):
    ``online[c]``, and ``next[c]``, the time of client c's next toggle. :meth:`advance` applies
    every toggle at or before t (an outage starting at t means offline at t)."""

    def __init__(self, mean_online: float, mean_offline: float, seed: int, num_clients: int):
        self.means = np.array([mean_offline, mean_online], dtype=np.float64)
        self.seed = seed
        everyone = np.arange(num_clients, dtype=np.int64)
        p_online = mean_online / (mean_online + mean_offline)
        self.online = keyed_uniform(seed, "availability", everyone, 0) < p_online
        self.k = np.ones(num_clients, dtype=np.int64)
        self.next = keyed_exponential(self.means[self.online.astype(np.int64)], seed, "availability", everyone, 1)

    def advance(self, t: float) -> None:
        while True:
            idx = np.flatnonzero(self.next <= t)
            if not len(idx):
                return
            self.online[idx] = ~self.online[idx]
            self.k[idx] += 1
            mean = self.means[self.online[idx].astype(np.int64)]
            self.next[idx] = self.next[idx] + keyed_exponential(mean, self.seed, "availability", idx, self.k[idx])


class ConstantRate:
    """A client with one speed for all time (steps per simulated second)."""

    def __init__(self, speed: float):
        self.speed = float(speed)

    def fit(self, t0: float, t1: float, slow: float) -> int:
        """Whole steps of duration ``slow / speed`` in [t0, t1]: floor((t1 - t0) * speed / slow)."""
        return whole_steps((t1 - t0) * self.speed / slow)

    def finish(self, t0: float, steps: int, slow: float) -> float:
        """``t0 + steps * slow / speed``."""
        return t0 + steps * slow / self.speed


def cycle_times(period: float, inner: Sequence[float], wrap: bool) -> Iterator[float]:
    """``inner`` toggle times repeated every ``period``, plus one at each multiple of the period
    when ``wrap`` (the state at the end of a period differs from the state at its start)."""
    if not inner and not wrap:
        return
    for k in itertools.count():
        base = k * period
        if k > 0 and wrap:
            yield base
        for b in inner:
            yield base + b
