"""The heap-based path behind :meth:`fedsim.clock.Clock.tables` for the ``async`` policy.

A job's fate is known when it starts: the client is online then, so its next availability toggle
is an outage, and the job fails at that toggle iff it comes strictly before the upload ends. The
server's instants are then the jobs' resolution times (a heap) plus, only while it cannot fill its
slots, the next time a client comes online. Availability is evaluated lazily: the clients a pick
draws and the jobs' own clients are looked at (``peek``) from the keyed streams; the population's
arrays are advanced only at server updates (to count the clients online when jobs started) and
when the server runs out of candidates. With the ``checkin`` pick rule
(:mod:`fedsim.clock.checkin`) no step costs O(population) in the common case. It computes exactly
what ``Simulation._settle`` / ``_async_update`` compute (the tests compare every field).
"""

from __future__ import annotations

import heapq
import math
from typing import Iterator

import numpy as np

from .model import Traced
from .jobs import RUNNING, Machine
from .plan import JOB_COLUMNS, STATUSES, RoundTable
from .sim import ClockError, declined_error, idle_bound, idle_error

__all__ = ["async_tables"]

INF = math.inf
_COMPLETED, _DROPPED, _FAILED = (STATUSES.index(s) for s in ("completed", "dropped", "failed"))


class _Job:
    """One async job, its fate decided at its start."""

    __slots__ = ("client", "key", "version", "start", "end", "tau", "status", "download", "upload", "available",
                 "resumed", "cut")

    def __init__(self, client, key, version, start, end, tau, status, download, upload):
        self.client, self.key, self.version, self.start, self.end = client, key, version, start, end
        self.tau, self.status, self.download, self.upload = tau, status, download, upload
        self.available = -1  # clients online at its start, once counted (``_Population.advance``)
        self.resumed = self.cut = 0


class _ClosedJobs:
    """Jobs whose fate is a closed form of their start (``_start``): a heap of resolution times."""

    def __init__(self, clock, pop: "_Population"):
        self.clock, self.pop = clock, pop
        self.traced = isinstance(clock.system.availability, Traced)
        self.no_slowdown = clock.system.slowdown is None
        self.heap: list[tuple[float, int]] = []  # (resolution time, key)
        self.by_key: dict[int, _Job] = {}

    def start(self, pick: np.ndarray, keys: np.ndarray, now: float) -> list[_Job]:
        _, nxt = self.pop.peek(pick, now)
        jobs = _start(self.clock, pick, keys, now, nxt, self.traced, self.no_slowdown)
        for j in jobs:
            self.by_key[j.key] = j
            heapq.heappush(self.heap, (j.end, j.key))
        return jobs

    def next_time(self) -> float:
        return self.heap[0][0] if self.heap else INF

    def resolve(self, t: float) -> list[_Job]:
        out = []
        while self.heap and self.heap[0][0] == t:
            out.append(self.by_key.pop(heapq.heappop(self.heap)[1]))
        return out


class _EventJobs:
    """Jobs run event by event (:class:`~fedsim.clock.jobs.Machine`): a shared server link,
    resume after outages, async time budgets."""

    def __init__(self, clock, pop: "_Population"):
        self.budget = clock.rule.local_time

        cursors, since = {}, [pop.G]  # a cursor per client, valid while the arrays stay at ``since``

        def peek(c: int, t: float) -> tuple[bool, float]:
            if pop.states is None:
                return True, INF
            if pop.G != since[0]:
                cursors.clear()
                since[0] = pop.G
            cursor = cursors.get(c)
            if cursor is None:
                cursor = cursors[c] = pop.states.cursor(np.array([c], dtype=np.int64))
            online, nxt = cursor.at(t)
            return bool(online[0]), float(nxt[0])

        self.machine = Machine(clock, peek, resume=clock.system.on_outage == "resume")
        self.pop = pop
        self.now = 0.0

    def start(self, pick: np.ndarray, keys: np.ndarray, now: float) -> list:
        self.now = now
        _, nxt = self.pop.peek(pick, now)
        return self.machine.start_many(pick, keys, now, budget=self.budget, next_toggles=nxt)

    def next_time(self) -> float:
        return self.now if self.machine.resolved else self.machine.next_time()

    def resolve(self, t: float) -> list:
        self.now = t
        if self.machine.next_time() == t:
            self.machine.run_instant(t)
        return self.machine.take()


class _Population:
    """The availability of every client: arrays advanced lazily, counts of online clients at
    past instants, and per-client peeks at the current time."""

    def __init__(self, clock):
        m = self.m = clock.num_clients
        self.states = clock.availability_states()
        self.G = 0.0  # the arrays hold the state at time G (toggles <= G applied)
        if self.states is not None:
            self.states.advance(0.0)
            self.count = int(self.states.online.sum())
        else:
            self.count = m
        self.waiting: list[_Job] = []  # jobs whose ``available`` is still to be counted

    def advance(self, t: float) -> None:
        """Apply every toggle <= t, and count the clients online at each waiting job's start."""
        st = self.states
        times, deltas = [], []
        if st is not None:
            for at, came_online in st.advance(t):
                times.append(at)
                deltas.append(np.where(came_online, 1, -1))
        if self.waiting:
            if times:
                tt, dd = np.concatenate(times), np.concatenate(deltas)
                order = np.argsort(tt, kind="stable")
                tt, cum = tt[order], np.cumsum(dd[order])
                at = np.searchsorted(tt, [j.start for j in self.waiting], side="right")
                for j, n in zip(self.waiting, at.tolist()):
                    j.available = self.count + (int(cum[n - 1]) if n else 0)
            else:
                for j in self.waiting:
                    j.available = self.count
            self.waiting = []
        if times:
            self.count += int(sum(int(d.sum()) for d in deltas))
        self.G = t

    def peek(self, clients: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(online at t, next toggle after t) of ``clients``."""
        if self.states is None:
            return np.ones(len(clients), dtype=bool), np.full(len(clients), INF)
        if t == self.G:
            return self.states.online[clients], self.states.next[clients]
        return self.states.peek(clients, t)

    def online_now(self, t: float) -> np.ndarray:
        """Every online client at t (sorted); advances the arrays to t."""
        self.advance(t)
        if self.states is None:
            return np.arange(self.m, dtype=np.int64)
        return np.flatnonzero(self.states.online)

    def next_online(self, t: float) -> float:
        """When the first client offline at t comes online (inf: never); advances the arrays to t."""
        self.advance(t)
        st = self.states
        if st is None:
            return INF
        off = ~st.online
        return float(st.next[off].min()) if off.any() else INF


def async_tables(clock, selector) -> Iterator[RoundTable]:
    """The plans of ``clock`` (policy async) as tables, server update after server update.

    Slots are filled (picks through ``selector``) at an instant only after the plans made at that
    instant were yielded, so the runner has observed them (``Simulation`` does the same)."""
    policy, m = clock.rule.policy, clock.num_clients
    C, K = policy.concurrency, policy.buffer
    pop = _Population(clock)
    backend = _EventJobs(clock, pop) if clock.general else _ClosedJobs(clock, pop)
    events = clock.general  # jobs' steps may be known only later: no ``started`` list (no prefetch)
    p = clock.p
    busy = np.zeros(m, dtype=bool)
    in_flight: dict[int, object] = {}  # by key
    pending: list = []
    started: list[tuple[int, int, int]] = []
    version, seq, arrivals, last_update, zero_streak = 0, 0, 0, 0.0, 0
    emitted: list[RoundTable] = []
    # the server's aggregation time: version v is published (handed to starting jobs) at its time
    published, busy_until, publishing = 0, 0.0, []  # publishing: [(time, version)] not yet reached
    # general jobs: a client whose job fits no step is not asked again at the same instant
    declined, declined_at = np.zeros(0, dtype=np.int64), -1.0

    def update(now: float) -> None:
        nonlocal version, arrivals, last_update, pending, started, busy_until
        u = version
        first = min(pending, key=lambda j: (j.start, j.key))
        if first.available < 0:
            pop.advance(now)
        version += 1
        close = now
        if clock.paced:
            close = max(now, busy_until) + clock.aggregation_seconds(arrivals)
            busy_until = close
            publishing.append((close, version))
        live = [j.version for j in in_flight.values() if j.status in (RUNNING, _COMPLETED) or j.end > now]
        newest = published_at(now)
        emitted.append(_table(u, last_update, close, pending, min(live + [newest]), first.available, tuple(started), p))
        pending, arrivals, last_update, started = [], 0, close, []

    def published_at(t: float) -> int:
        """The model version a job starting at ``t`` downloads."""
        nonlocal published
        if not clock.paced:
            return version
        while publishing and publishing[0][0] <= t:
            published = publishing.pop(0)[1]
        return published

    def fill(now: float) -> bool:
        """Start jobs in the free slots; True when candidates ran out with slots still free."""
        nonlocal seq, zero_streak, declined, declined_at
        free = C - len(in_flight)
        if free <= 0:
            return False
        if declined_at != now:
            declined, declined_at = declined[:0], now
        if clock.checkin:
            def candidates():
                on = pop.online_now(now)
                on = on[~busy[on]]
                return on[~np.isin(on, declined)] if len(declined) else on

            def is_candidate(cs):
                ok = pop.peek(cs, now)[0] & ~busy[cs]
                return ok & ~np.isin(cs, declined) if len(declined) else ok
        else:
            on = pop.online_now(now)
            cand = on[~busy[on]]
            if len(declined):
                cand = cand[~np.isin(cand, declined)]
            if not len(cand):
                return True

            def candidates():
                return cand

            is_candidate = None
        pick = selector.pick(seq, now, free, candidates, is_candidate, is_async=True).clients
        if not len(pick):
            return True
        keys = np.arange(seq, seq + len(pick), dtype=np.int64)
        seq += len(pick)
        v = published_at(now)
        for j in backend.start(pick, keys, now):
            j.version = v
            in_flight[j.key] = j
            busy[j.client] = True
            pop.waiting.append(j)
            if (j.status == _DROPPED) if events else (j.tau == 0):  # no room for one step: dropped at its start
                if events:
                    declined = np.append(declined, j.client)
                zero_streak += 1
                if zero_streak > 1000 * m:
                    raise ClockError("policy async: no client gets any local steps (tau = 0 for every job)")
            else:
                zero_streak = 0
                if not events:
                    started.append((j.client, j.key, j.tau))
        return len(pick) < free

    idle, most_idle = [0, 0], idle_bound(m)  # jobs in a row without an upload: dropped, failed

    def settle(now: float, batch: list[_Job]) -> None:
        nonlocal arrivals, idle
        for j in sorted(batch, key=lambda j: j.key):
            del in_flight[j.key]
            busy[j.client] = False
            pending.append(j)
            if j.status == _COMPLETED:
                idle = [0, 0]
                arrivals += 1
                if arrivals == K:
                    update(now)
            else:
                idle[j.status == _FAILED] += 1
                if sum(idle) > most_idle:
                    raise idle_error(now, *idle)

    starved = fill(0.0)
    last_seen = 0.0
    while True:
        wake = pop.next_online(last_seen) if starved else INF  # starved: the next client to come online
        t = min(backend.next_time(), wake)
        if t == INF:
            if len(declined) and declined_at == last_seen and pop.online_now(last_seen).size:
                raise declined_error(last_seen)
            raise ClockError(f"the clock stops at t={last_seen:g}: no client is online and none ever comes online again")
        while True:  # every settle of instant t (a job can start and resolve within it)
            batch = backend.resolve(t)
            if not batch and t != wake:  # events of jobs in flight that resolve none: no server decision
                break
            settle(t, batch)
            while emitted:  # observed by the runner before the slots are filled
                yield emitted.pop(0)
            starved = fill(t)
            wake = INF
            if backend.next_time() != t:
                break
        last_seen = t


def _start(clock, pick: np.ndarray, keys: np.ndarray, now: float, nxt: np.ndarray, traced: bool,
           no_slowdown: bool) -> list[_Job]:
    """Jobs (pick[i], keys[i]) started at ``now``: ``Simulation._start`` for every one, with
    its fate decided by the client's next toggle ``nxt[i]`` (an outage)."""
    n = len(pick)
    down, up = clock.transfers_of(pick)
    if clock.fixed_work is not None:
        tau = clock.fixed_work[pick].astype(np.int64)
    else:
        tau = np.array([clock.work_cap(int(c), int(k)) for c, k in zip(pick, keys)], dtype=np.int64)
    slow = 1.0 if no_slowdown else np.array([clock.slowdown(int(c), int(k)) for c, k in zip(pick, keys)])
    t_d = now + down
    if traced:
        slows = np.broadcast_to(slow, (n,))
        t_c = np.array([clock.rates[c].finish(float(t_d[i]), int(tau[i]), float(slows[i]))
                        for i, c in enumerate(pick.tolist())])
    else:
        t_c = t_d + tau * slow / clock.speed_of(pick)
    t_u = t_c + up
    started = tau > 0
    failed = started & (nxt < t_u)
    status = np.where(failed, _FAILED, np.where(started, _COMPLETED, _DROPPED))
    end = np.where(failed, nxt, np.where(started, t_u, now))
    d = np.where(started & (~failed | (t_d < nxt)), down, 0.0)
    u = np.where(started & ~failed, up, 0.0)
    return [_Job(c, k, 0, now, e, t, s, dd, uu) for c, k, e, t, s, dd, uu in
            zip(pick.tolist(), keys.tolist(), end.tolist(), tau.tolist(), status.tolist(), d.tolist(), u.tolist())]


def _table(u: int, open_: float, close: float, jobs: list[_Job], min_live: int, available: int, started: tuple,
           p: np.ndarray) -> RoundTable:
    n = len(jobs)
    client = np.fromiter((j.client for j in jobs), dtype=np.int64, count=n)
    status = np.fromiter((j.status for j in jobs), dtype=np.int8, count=n)
    version = np.fromiter((j.version for j in jobs), dtype=np.int64, count=n)
    cols = {
        "round": np.full(n, u, dtype=np.int64),
        "client": client,
        "status": status,
        "steps": np.where(status == _COMPLETED, np.fromiter((j.tau for j in jobs), dtype=np.int64, count=n), 0),
        "start": np.fromiter((j.start for j in jobs), dtype=np.float64, count=n),
        "end": np.fromiter((j.end for j in jobs), dtype=np.float64, count=n),
        "key": np.fromiter((j.key for j in jobs), dtype=np.int64, count=n),
        "version": version,
        "staleness": u - version,
        "weight": p[client].astype(np.float64),
        "count": np.ones(n, dtype=np.int64),
        "download": np.fromiter((j.download for j in jobs), dtype=np.float64, count=n),
        "upload": np.fromiter((j.upload for j in jobs), dtype=np.float64, count=n),
        "resumed": np.fromiter((j.resumed for j in jobs), dtype=np.int64, count=n),
        "cut": np.fromiter((j.cut for j in jobs), dtype=np.int64, count=n),
    }
    assert tuple(cols) == JOB_COLUMNS
    return RoundTable(u, open_, close, min_live, cols, available, started)
