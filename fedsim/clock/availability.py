"""What the clock asks of an availability model, and the models it owns (always, offline intervals).

An availability model is a frozen value the clock only calls (:class:`AvailabilityModel`):

* ``timelines(m, seed)``: one timeline per client, walked by the SimPy path. A timeline is a pure
  description: ``initial`` (online at t=0?), ``changes`` (does it ever toggle?) and ``toggles()``,
  a fresh iterator of strictly increasing times at which the state flips. Calling ``toggles()``
  twice gives the same times (draws are keyed, :mod:`fedsim.clock.keyed`), so nothing about
  availability depends on the round policy, selection or the algorithm.
* ``states(m, seed)``: every client's state as arrays for the vectorised paths
  (:class:`ToggleArrays`: ``online``, ``next``, ``advance(t)``, ``peek(idx, t)``), the same toggle
  times as the timelines; None when every client is always online. The default walks the
  timelines (:class:`TimelineStates`); a model with many clients overrides it with arrays.
* ``time_scales()``: its shortest time scales in seconds, by scenario key (``{"mean_online": 600}``);
  the clock refuses any below ``MIN_SOJOURN`` of the shortest round.

Offline periods are half-open ``[start, end)``: a client whose outage starts at t is offline at
t; one whose outage ends at t is online at t. The models a scenario names (``{model: markov}``)
are modules of :mod:`fedsim.availability`, registered in ``fedsim.registries.AVAILABILITY``;
a trace (:mod:`fedsim.clock.trace`) gives both speed and availability and is read by the clock.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from fedsim.errors import ScenarioError

__all__ = ["AvailabilityModel", "Always", "Intervals", "AlwaysOnline", "OfflineIntervals", "ToggleArrays",
           "ToggleStates", "TimelineStates", "Cursor", "checked_timelines", "cycle_times"]

INF = math.inf


class AvailabilityModel:
    """Base of availability values (see the module docstring for the protocol)."""

    def timelines(self, m: int, seed: int) -> list:
        raise NotImplementedError

    def states(self, m: int, seed: int) -> "ToggleArrays | None":
        return TimelineStates(checked_timelines(self, m, seed))

    def time_scales(self) -> dict[str, float]:
        return {}


@dataclass(frozen=True)
class Always(AvailabilityModel):
    """Online all the time."""

    def timelines(self, m: int, seed: int) -> list:
        return [AlwaysOnline() for _ in range(m)]

    def states(self, m: int, seed: int) -> None:
        return None


@dataclass(frozen=True)
class Intervals(AvailabilityModel):
    """Explicit offline intervals ``[start, end)``: one tuple of ``(start, end)`` per client."""

    offline: tuple

    def timelines(self, m: int, seed: int) -> list:
        if len(self.offline) != m:
            raise ValueError(f"system.availability: needs one interval list per client ({m})")
        return [OfflineIntervals(iv) for iv in self.offline]

    def states(self, m: int, seed: int) -> "ToggleStates":
        return ToggleStates(self.timelines(m, seed))


def checked_timelines(model: AvailabilityModel, m: int, seed: int) -> list:
    """``model.timelines(m, seed)``, one per client (else ScenarioError), each checked as it is
    walked: toggle times finite, > 0 and strictly increasing, none when ``changes`` is false."""
    name = type(model).__name__
    timelines = list(model.timelines(m, seed))
    if len(timelines) != m:
        raise ScenarioError(f"system.availability: {name}.timelines gave {len(timelines)} timelines for {m} clients")
    return [_Checked(tl, c, name) for c, tl in enumerate(timelines)]


class _Checked:
    """A timeline whose toggles are checked as they are drawn (:func:`checked_timelines`)."""

    def __init__(self, timeline, client: int, name: str):
        self._tl, self._client, self._name = timeline, client, name
        self.initial, self.changes = bool(timeline.initial), bool(timeline.changes)

    def __getattr__(self, key):  # inner, wrap, period, repeat of fixed toggle lists
        return getattr(self._tl, key)

    def toggles(self) -> Iterator[float]:
        if not self.changes:
            return
        prev = 0.0
        for t in self._tl.toggles():
            t = float(t)
            if not (t > prev and math.isfinite(t)):
                raise ScenarioError(f"system.availability: {self._name}: client {self._client}'s toggle at {t!r} "
                                    f"follows {prev!r} (toggle times must be finite, > 0 and increasing)")
            prev = t
            yield t


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


class ToggleArrays:
    """Every client's availability as arrays: ``online[c]`` and ``next[c]`` (client c's next toggle
    time, inf when none). :meth:`advance` applies every toggle at or before t (an outage starting
    at t means offline at t) and returns them; a subclass says in ``toggled(idx)`` when the toggled
    clients toggle next, and lists in ``PER_CLIENT`` every per-client array: :meth:`peek` copies
    those for the clients it looks at and shares the rest, so an array missing there would be
    written by it."""

    online: np.ndarray
    next: np.ndarray
    PER_CLIENT: tuple[str, ...] = ("online", "next")

    def advance(self, t: float, record: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
        """Apply every toggle at or before ``t``; returns them, one ``(times, came_online)`` pair
        of arrays per sweep (a client toggling twice appears in two sweeps), or nothing when not
        ``record``."""
        applied = []
        idx = np.flatnonzero(self.next <= t)
        while len(idx):
            flipped = ~self.online[idx]
            if record:
                applied.append((self.next[idx], flipped))  # a copy: fancy indexing
            self.online[idx] = flipped
            self.toggled(idx)
            idx = idx[self.next[idx] <= t]  # only a client that just toggled can be due again
        return applied

    def toggled(self, idx: np.ndarray) -> None:
        """Set ``next`` of clients ``idx``, which just toggled (``online`` already flipped)."""
        raise NotImplementedError

    def peek(self, idx: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(online, next toggle) of clients ``idx`` (positions) at t >= the last :meth:`advance`,
        the same draws as advancing, without changing the state (only these clients are walked)."""
        sub = object.__new__(type(self))
        sub.__dict__.update(self.__dict__)
        for name in self.PER_CLIENT:
            setattr(sub, name, getattr(self, name)[idx].copy())
        sub.advance(t, record=False)
        return sub.online, sub.next

    def cursor(self, idx: np.ndarray) -> "Cursor":
        """A :class:`Cursor` over clients ``idx`` from the state now: ``at(t)`` for increasing t
        gives what :meth:`peek` gives, each toggle walked once (a job sitting out many outages
        asks at each; peeking from the state now every time would walk them all again). Valid
        until the next :meth:`advance`. A subclass with its own :meth:`peek` gets a cursor that
        asks it."""
        if type(self).peek is not ToggleArrays.peek:
            return _PeekCursor(self, idx)
        return _CopyCursor(self, idx)


class Cursor:
    """(online, next toggle) of some clients at times that never decrease (:meth:`ToggleArrays.cursor`)."""

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


class _CopyCursor(Cursor):
    """The clients' per-client arrays copied once (as :meth:`ToggleArrays.peek` does) and advanced
    as t grows: the same draws in the same order as one peek at t."""

    def __init__(self, states: ToggleArrays, idx: np.ndarray):
        sub = object.__new__(type(states))
        sub.__dict__.update(states.__dict__)
        for name in states.PER_CLIENT:
            setattr(sub, name, getattr(states, name)[idx].copy())
        self.sub = sub

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        self.sub.advance(t, record=False)
        return self.sub.online, self.sub.next


class _PeekCursor(Cursor):
    def __init__(self, states: ToggleArrays, idx: np.ndarray):
        self.states, self.idx = states, idx

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        return self.states.peek(self.idx, t)


class ToggleStates(ToggleArrays):
    """Availability of clients with fixed toggle times (traces, explicit offline intervals) as
    arrays, replaying their timelines' ``toggles()`` exactly (same float expressions). A timeline
    gives ``initial``, ``inner`` (toggle times within its first period), ``wrap``, ``period`` and
    ``repeat`` (``cycle``: :func:`cycle_times` of those)."""

    PER_CLIENT = ("online", "next", "j", "n_inner", "offset", "wrap", "cycle", "period")

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

    def toggled(self, idx: np.ndarray) -> None:
        self.j[idx] += 1
        self.next[idx] = self._time(idx, self.j[idx])


class TimelineStates(ToggleArrays):
    """Arrays over any timelines (the default ``states`` of a model): each client's toggles are
    drawn from its own ``toggles()`` iterator, one Python call per toggle; times drawn ahead by
    :meth:`peek` are kept for the next :meth:`advance`."""

    def __init__(self, timelines: list):
        self.online = np.array([tl.initial for tl in timelines], dtype=bool)
        self._its = [tl.toggles() for tl in timelines]
        self._ahead: list[list[float]] = [[] for _ in timelines]  # drawn, not yet applied
        self.next = np.array([self._draw(c, 0) for c in range(len(timelines))], dtype=np.float64)

    def _draw(self, c: int, i: int) -> float:
        """Client c's i-th toggle after its current ``next`` (i = 0: ``next`` itself)."""
        ahead = self._ahead[c]
        while len(ahead) <= i:
            ahead.append(float(next(self._its[c], INF)))
            if ahead[-1] == INF:
                break
        return ahead[min(i, len(ahead) - 1)]

    def toggled(self, idx: np.ndarray) -> None:
        for c in idx.tolist():
            self._ahead[c].pop(0)
            self.next[c] = self._draw(c, 0)

    def peek(self, idx: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        return self.cursor(idx).at(t)

    def cursor(self, idx: np.ndarray) -> "_TimelineCursor":
        return _TimelineCursor(self, idx)


class _TimelineCursor(Cursor):
    """:meth:`TimelineStates.peek` walked on from where it was last asked: the times drawn ahead
    stay in the states' lists (which :meth:`TimelineStates.advance` consumes, so a cursor is valid
    until then)."""

    def __init__(self, states: TimelineStates, idx: np.ndarray):
        self.states, self.clients = states, idx.tolist()
        self.online, self.next = states.online[idx].copy(), states.next[idx].copy()
        self.flips = [0] * len(self.clients)

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        online, nxt, flips = self.online, self.next, self.flips
        for i, c in enumerate(self.clients):
            before = flips[i]
            while nxt[i] <= t:
                flips[i] += 1
                nxt[i] = self.states._draw(c, flips[i])
            online[i] ^= bool((flips[i] - before) % 2)
        return online.copy(), nxt.copy()


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
