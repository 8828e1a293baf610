"""Per-client availability as a timeline of on/off toggles, and per-client compute rates.

A timeline is a pure description: ``initial`` (online at t=0?) and ``toggles()``, a fresh iterator
of strictly increasing times at which the state flips. Offline periods are half-open ``[start,
end)``: a client whose outage starts at t is offline at t; one whose outage ends at t is online at
t. Calling ``toggles()`` twice gives the same times (Markov sojourns are redrawn from the same
stream), so nothing about availability depends on the round policy, selection or the algorithm.

A rate turns time into local steps for one client: ``fit(t0, t1, slow)`` is the number of whole
steps that fit in [t0, t1]; ``finish(t0, steps, slow)`` is when ``steps`` steps started at t0
end. Step duration is ``slow / speed``.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator, Sequence

import numpy as np

from fedsim.rng import stream

from .draws import whole_steps

__all__ = ["AlwaysOnline", "OfflineIntervals", "MarkovTimeline", "ConstantRate", "cycle_times"]

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
    """Two-state Markov availability: exponential online/offline sojourns with the given means.

    Stream ``("availability", client)``: the first uniform draw sets the initial state (online
    with probability mean_online / (mean_online + mean_offline), the stationary probability), then
    each sojourn is one exponential draw with the current state's mean.
    """

    changes = True

    def __init__(self, mean_online: float, mean_offline: float, seed: int, client: int):
        self.means = (float(mean_offline), float(mean_online))  # indexed by the state (False, True)
        self.p_online = mean_online / (mean_online + mean_offline)
        self.seed, self.client = seed, client
        self.initial = self._start()[1]

    def _start(self) -> tuple[np.random.Generator, bool]:
        rng = stream(self.seed, "availability", self.client)
        return rng, bool(rng.random() < self.p_online)

    def toggles(self) -> Iterator[float]:
        rng, online = self._start()
        t = 0.0
        while True:
            d = 0.0
            while not d > 0.0:  # an exact 0 (probability ~2^-53) would make an empty sojourn
                d = float(rng.exponential(self.means[online]))
            t += d
            online = not online
            yield t


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
