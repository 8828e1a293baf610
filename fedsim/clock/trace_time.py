"""A parsed trace (:mod:`fedsim.clock.trace`) replayed over time, per client: its availability
timeline (:class:`TraceTimeline`), its piecewise-constant speed integrated into whole steps
(:class:`TraceRate`) and FedScale's stateful online test (:class:`SessionIndex`)."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import replace
from typing import Iterator

import numpy as np

from .availability import cycle_times
from .draws import ConstantRate, whole_steps
from .trace import ClientTrace, Trace

__all__ = ["SessionIndex", "TraceTimeline", "TraceRate", "traced"]

#: the per-client replays of the last traces built (a trace object and its settings -> parts)
_BUILT: OrderedDict[tuple, tuple] = OrderedDict()
KEEP_BUILT = 2


def traced(trace: Trace, repeat: str, samples: int | None, fedscale: bool) -> tuple:
    """``(clients, rates, timelines, mean speeds)`` of ``trace``: its clients (speeds divided by
    ``samples`` per step for a device trace), a :class:`TraceRate` each (FedScale semantics: a
    ConstantRate at the session speed), a :class:`TraceTimeline` each and their mean speeds.
    All read-only, so the clocks of one process built from the same loaded trace (the runs of a
    stacked comparison) share them: the last :data:`KEEP_BUILT` are kept."""
    key = (id(trace), repeat, samples, fedscale)
    hit = _BUILT.get(key)
    if hit is not None and hit[0] is trace:
        _BUILT.move_to_end(key)
        return hit[1]
    clients = trace.clients
    if samples:  # samples per second -> local steps per second
        clients = tuple(replace(t, speed=t.speed / samples, sessions=tuple((a, b, sp / samples) for a, b, sp in t.sessions))
                        for t in clients)
    rates = tuple(ConstantRate(t.session_speed) if fedscale else TraceRate(t, repeat) for t in clients)
    parts = (clients, rates, tuple(TraceTimeline(t, repeat) for t in clients), tuple(t.mean_speed for t in clients))
    _BUILT[key] = (trace, parts)
    while len(_BUILT) > KEEP_BUILT:
        _BUILT.popitem(last=False)
    return parts


class SessionIndex:
    """FedScale's stateful online test for one client (``system.trace_semantics: fedscale``).

    The index k starts at 0. ``online(t)``: with x = t mod P, if x > inactive[k] move k to
    (k + 1) mod n (at most once per call), then answer active[k] <= x <= inactive[k]. The answer
    depends on the earlier calls, so the clock calls it exactly where FedScale does: once per
    client at each round's open, and once per selected client at its job's completion time."""

    __slots__ = ("active", "inactive", "period", "k")

    def __init__(self, trace: ClientTrace):
        self.active = [a for a, _, _ in trace.sessions]
        self.inactive = [b for _, b, _ in trace.sessions]
        self.period = trace.period
        self.k = 0

    def online(self, t: float) -> bool:
        if not self.active:
            return False
        x = t % self.period
        if x > self.inactive[self.k]:
            self.k += 1
        self.k %= len(self.active)
        return self.active[self.k] <= x <= self.inactive[self.k]


class TraceTimeline:
    """Availability of one traced client (see ``availability.py`` for the timeline protocol)."""

    def __init__(self, trace: ClientTrace, repeat: str):
        on = trace.online
        self.period = trace.period
        self.initial = bool(on[0])
        self.inner = [float(trace.bp[j]) for j in range(1, len(on)) if on[j] != on[j - 1]]
        self.wrap = repeat == "cycle" and bool(on[-1] != on[0])
        self.repeat = repeat
        self.changes = bool(self.inner) or self.wrap

    def toggles(self) -> Iterator[float]:
        if self.repeat == "last":
            return iter(self.inner)
        return cycle_times(self.period, self.inner, self.wrap)


class TraceRate:
    """Piecewise-constant speed of one traced client: steps accrue at ``speed`` while online,
    0 while offline. Work done by time t is W(t); ``fit`` and ``finish`` integrate it."""

    def __init__(self, trace: ClientTrace, repeat: str):
        self.bp = trace.bp
        self.rate = np.where(trace.online, trace.speed, 0.0)
        self.cum = np.concatenate([[0.0], np.cumsum(self.rate * np.diff(self.bp))])
        self.period = trace.period
        self.work_period = float(self.cum[-1])
        self.cycle = repeat == "cycle"
        self.last_rate = float(self.rate[-1])
        self.n = len(self.rate)

    def _locate(self, t: float) -> tuple[int, int, float]:
        """(k, j, x): t = k * P + x with x in segment j of the period."""
        P = self.period
        k = math.floor(t / P)
        x = t - k * P
        if x >= P:
            k, x = k + 1, x - P
        elif x < 0:
            k, x = k - 1, x + P
        j = min(max(int(np.searchsorted(self.bp, x, side="right")) - 1, 0), self.n - 1)
        return k, j, x

    def work(self, t: float) -> float:
        """Steps' worth of work (at slowdown 1) accrued from 0 to t."""
        if not self.cycle and t >= self.period:
            return self.work_period + self.last_rate * (t - self.period)
        k, j, x = self._locate(t)
        return k * self.work_period + float(self.cum[j]) + float(self.rate[j]) * (x - float(self.bp[j]))

    def fit(self, t0: float, t1: float, slow: float) -> int:
        return whole_steps((self.work(t1) - self.work(t0)) / slow)

    def finish(self, t0: float, steps: int, slow: float) -> float:
        w = steps * slow
        if w <= 0:
            return t0
        P, n = self.period, self.n
        if not self.cycle and t0 >= P:
            return t0 + w / self.last_rate if self.last_rate > 0 else math.inf
        k, j, _ = self._locate(t0)
        t = t0
        while True:
            seg_end = k * P + float(self.bp[j + 1])
            r = float(self.rate[j])
            if r > 0:
                cap = r * (seg_end - t)
                if cap >= w:
                    return t + w / r
                w -= cap
            t, j = seg_end, j + 1
            if j == n:  # end of a period
                if not self.cycle:
                    return t + w / self.last_rate if self.last_rate > 0 else math.inf
                if self.work_period <= 0:
                    return math.inf
                k, j = k + 1, 0
                skip = math.floor(w / self.work_period) - 1  # whole periods, keeping one to walk
                if skip > 0:
                    k += skip
                    w -= skip * self.work_period
                t = k * P
