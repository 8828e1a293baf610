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
from .model import Always, Constant, Diurnal, Intervals, Markov, Traced, Uniform

__all__ = ["AlwaysOnline", "OfflineIntervals", "MarkovTimeline", "MarkovStates", "DiurnalStates", "DiurnalTimeline", "ToggleStates",
    "timelines", "availability_states", "diurnal_phases", "ConstantRate", "cycle_times"]

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
        # as a non-repeating toggle list (ToggleStates)
        self.inner = list(self.toggles())
        self.wrap, self.repeat, self.period = False, "last", merged[-1][1] if merged else 0.0

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


class _ToggleArrays:
    """Shared by the vectorised availability states: ``online[c]``, ``next[c]`` (client c's next
    toggle time) and :meth:`advance`, which applies every toggle at or before t (an outage
    starting at t means offline at t); subclasses say in ``_toggled(idx)`` when the toggled
    clients toggle next."""

    online: np.ndarray
    next: np.ndarray

    def advance(self, t: float) -> None:
        while True:
            idx = np.flatnonzero(self.next <= t)
            if not len(idx):
                return
            self.online[idx] = ~self.online[idx]
            self._toggled(idx)

    def _toggled(self, idx: np.ndarray) -> None:
        raise NotImplementedError


class MarkovStates(_ToggleArrays):
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

    def _toggled(self, idx: np.ndarray) -> None:
        self.k[idx] += 1
        mean = self.means[self.online[idx].astype(np.int64)]
        self.next[idx] = self.next[idx] + keyed_exponential(mean, self.seed, "availability", idx, self.k[idx])

    def peek(self, idx: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(online, next toggle) of clients ``idx`` at t >= the last :meth:`advance`, the same
        draws as advancing, without changing the state (lazy evaluation: only these clients)."""
        online, nxt, k = self.online[idx], self.next[idx].copy(), self.k[idx].copy()
        while True:
            sel = np.flatnonzero(nxt <= t)
            if not len(sel):
                return online, nxt
            online[sel] = ~online[sel]
            k[sel] += 1
            mean = self.means[online[sel].astype(np.int64)]
            nxt[sel] = nxt[sel] + keyed_exponential(mean, self.seed, "availability", idx[sel], k[sel])


class DiurnalStates(_ToggleArrays):
    """Diurnal availability (:class:`fedsim.clock.model.Diurnal`) of ``clients`` as arrays.

    The chain's toggle rates vary with time, so toggles are found by thinning (Lewis and Shedler,
    "Simulation of nonhomogeneous Poisson processes by thinning", 1979): candidates at the constant
    rate max(peak, 1 - trough) / mean_sojourn, each accepted with probability (its state's rate at
    that time) / (that bound). Keyed draws ``("availability", client, k)``: k = 0 the initial state,
    k = 2j and 2j + 1 (j >= 1) candidate j's gap and acceptance. The initial state is online with
    the periodic regime's probability at t = 0 (below), so the process is in its long-run cycle
    from the start: with tau = mean_sojourn and w = 2 pi / period, p(t) = P(online at t) solves
    p' = (pi(t) - p) / tau, whose periodic solution is
    p(t) = a + b cos(w (t - phase) - atan(w tau)) / sqrt(1 + (w tau)^2), a = (peak + trough) / 2,
    b = (peak - trough) / 2; its mean over a period (the long-run online share) is a.
    ``online`` and ``next`` (the next toggle of each client) as in :class:`MarkovStates`.
    """

    def __init__(self, d, seed: int, clients: np.ndarray, phase: np.ndarray):
        self.seed, self.clients, self.phase = seed, clients, phase
        self.a, self.b = (d.peak + d.trough) / 2, (d.peak - d.trough) / 2
        self.w, self.tau = 2 * math.pi / d.period, float(d.mean_sojourn)
        self.bound = max(d.peak, 1 - d.trough) / self.tau
        wt = self.w * self.tau
        p0 = self.a + self.b * np.cos(self.w * (0.0 - phase) - math.atan(wt)) / math.sqrt(1 + wt * wt)
        self.online = keyed_uniform(seed, "availability", clients, 0) < p0
        n = len(clients)
        self.j = np.zeros(n, dtype=np.int64)  # candidates drawn
        self.t = np.zeros(n)  # time of the last candidate
        self.next = np.full(n, INF)
        if d.trough < 1:  # trough == peak == 1: always online (p0 = 1), no toggle to find
            self._find(np.arange(n, dtype=np.int64))

    def pi(self, idx: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Target online probability of clients ``idx`` (positions) at times t."""
        return self.a + self.b * np.cos(self.w * (t - self.phase[idx]))

    def _find(self, idx: np.ndarray) -> None:
        """Set ``next`` of clients ``idx`` to their next accepted candidate."""
        while len(idx):
            self.j[idx] += 1
            c, j = self.clients[idx], self.j[idx]
            t = self.t[idx] + keyed_exponential(1.0 / self.bound, self.seed, "availability", c, 2 * j)
            u = keyed_uniform(self.seed, "availability", c, 2 * j + 1)
            self.t[idx] = t
            pi = self.pi(idx, t)
            rate = np.where(self.online[idx], 1.0 - pi, pi) / self.tau
            accept = u * self.bound < rate
            self.next[idx[accept]] = t[accept]
            idx = idx[~accept]

    def _toggled(self, idx: np.ndarray) -> None:
        self.next[idx] = INF
        self._find(idx)

    def peek(self, idx: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(online, next toggle) of clients ``idx`` (positions) at t >= the last :meth:`advance`,
        without changing the state (see :meth:`MarkovStates.peek`)."""
        sub = object.__new__(DiurnalStates)
        sub.__dict__.update(self.__dict__)
        sub.clients, sub.phase = self.clients[idx], self.phase[idx]
        sub.online, sub.j, sub.t, sub.next = (a[idx].copy() for a in (self.online, self.j, self.t, self.next))
        sub.advance(t)
        return sub.online, sub.next


class DiurnalTimeline:
    """One client's diurnal availability as a timeline (the draws of :class:`DiurnalStates`)."""

    changes = True

    def __init__(self, d, seed: int, client: int, phase: float):
        self.args = (d, seed, np.array([client], dtype=np.int64), np.array([phase], dtype=np.float64))
        self.initial = bool(DiurnalStates(*self.args).online[0])
        self.changes = d.trough < 1  # trough == 1: always online

    def toggles(self) -> Iterator[float]:
        st = DiurnalStates(*self.args)
        while True:
            t = float(st.next[0])
            if t == INF:
                return
            st.advance(t)
            yield t


class ToggleStates(_ToggleArrays):
    """Availability of clients with fixed toggle times (traces, explicit offline intervals) as
    arrays, replaying their timelines' ``toggles()`` exactly (same float expressions):
    ``online[c]`` and ``next[c]``, the time of client c's next toggle (inf when there is none).
    :meth:`advance` applies every toggle at or before t. A timeline gives ``initial``, ``inner``
    (toggle times within its first period), ``wrap``, ``period`` and ``repeat`` (``cycle``:
    :func:`cycle_times` of those)."""

    def __init__(self, timelines: list):
        m = len(timelines)
        self.online = np.array([tl.initial for tl in timelines], dtype=bool)
        self.n_inner = np.array([len(tl.inner) for tl in timelines], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(self.n_inner)[:-1]]).astype(np.int64)
        self.inner = np.array([b for tl in timelines for b in tl.inner] + [0.0], dtype=np.float64)
        self.wrap = np.array([tl.wrap for tl in timelines], dtype=bool)
        self.cycle = np.array([tl.repeat == "cycle" and tl.changes for tl in timelines], dtype=bool)
        self.period = np.array([tl.period for tl in timelines], dtype=np.float64)
        self.j = np.zeros(m, dtype=np.int64)
        self.next = self._time(np.arange(m, dtype=np.int64), self.j)

    def _time(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Time of toggle number j of clients c (``cycle_times``: inner offsets in period 0, then
        per period k >= 1 the wrap toggle k * P (if any) and k * P + each inner offset)."""
        n, wrap = self.n_inner[c], self.wrap[c]
        first = j < n
        later = j - n
        per = n + wrap
        safe = np.maximum(per, 1)
        k = 1 + later // safe
        i = later % safe
        base = k * self.period[c]
        at_wrap = wrap & (i == 0)
        inner_i = np.where(first, j, i - wrap)
        b = self.inner[np.where((first | ~at_wrap) & (inner_i < n), self.offset[c] + np.minimum(inner_i, np.maximum(n - 1, 0)), -1)]
        t = np.where(first, b, np.where(at_wrap, base, base + b))
        return np.where(first | (self.cycle[c] & (per > 0)), t, np.inf)

    def _toggled(self, idx: np.ndarray) -> None:
        self.j[idx] += 1
        self.next[idx] = self._time(idx, self.j[idx])

    def peek(self, idx: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(online, next toggle) of clients ``idx`` at t >= the last :meth:`advance`, without
        changing the state (see :meth:`MarkovStates.peek`)."""
        online, nxt, j = self.online[idx], self.next[idx].copy(), self.j[idx].copy()
        while True:
            sel = np.flatnonzero(nxt <= t)
            if not len(sel):
                return online, nxt
            online[sel] = ~online[sel]
            j[sel] += 1
            nxt[sel] = self._time(idx[sel], j[sel])


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


def diurnal_phases(phase, m: int, seed: int) -> np.ndarray:
    """Per-client phases (seconds) of a diurnal cycle: a number, one per client, or uniform draws
    ``low + (high - low) * u(seed, "phase", client, 0)`` (keyed, so a million cost one vector)."""
    if isinstance(phase, Uniform):
        return phase.low + (phase.high - phase.low) * keyed_uniform(seed, "phase", np.arange(m), 0)
    if isinstance(phase, Constant):
        return np.full(m, float(phase.value))
    if isinstance(phase, tuple):
        if len(phase) != m:
            raise ValueError(f"need one phase per client ({m}), got {len(phase)}")
        return np.asarray(phase, dtype=np.float64)
    return np.full(m, float(phase))


def timelines(availability: Always | Markov | Diurnal | Intervals, m: int, seed: int) -> list:
    """One timeline per client (the SimPy path's availability processes walk them)."""
    if isinstance(availability, Always):
        return [AlwaysOnline() for _ in range(m)]
    if isinstance(availability, Markov):
        return [MarkovTimeline(availability.mean_online, availability.mean_offline, seed, c) for c in range(m)]
    if isinstance(availability, Diurnal):
        phases = diurnal_phases(availability.phase, m, seed)
        return [DiurnalTimeline(availability, seed, c, float(phases[c])) for c in range(m)]
    if len(availability.offline) != m:
        raise ValueError(f"system.availability: needs one interval list per client ({m})")
    return [OfflineIntervals(iv) for iv in availability.offline]


def availability_states(availability, m: int, seed: int, timelines_of) -> MarkovStates | DiurnalStates | ToggleStates | None:
    """Every client's availability as numpy state for the vectorised path (None: always online);
    ``timelines_of()`` gives the per-client timelines that fixed toggle times are read from."""
    if isinstance(availability, Markov):
        return MarkovStates(availability.mean_online, availability.mean_offline, seed, m)
    if isinstance(availability, Diurnal):
        return DiurnalStates(availability, seed, np.arange(m, dtype=np.int64), diurnal_phases(availability.phase, m, seed))
    if isinstance(availability, (Intervals, Traced)):
        return ToggleStates(timelines_of())
    return None
