"""Jobs event by event: the fast paths' general case.

A job's fate is a closed form of its start (``vectorised.py``, ``vectorised_wait.py``,
``heap.py``) only while nothing outside it moves its times. Three of the straggler levers do:
a shared server link (a transfer's speed depends on the others in flight), ``on_outage: resume``
(a job sits out its client's outages) and the cut-offs that follow them (a window's or a
partial deadline's last useful instant, an async time budget). :class:`Machine` runs the jobs of a
round (or of a whole async run) as a small discrete-event simulation over plain values, the same
decisions in the same order as the SimPy path (``sim.py``), which the tests compare field by field.

A job (start t0, client online then):

1. download: alone it ends at t0 + (L + b_d / c_d); on a shared link its bits enter the link at
   t0 + L and it ends when they are through (:mod:`fedsim.clock.link`).
2. compute from the download's end t_d: with a last useful instant ``stop`` (window: close - up;
   ``on_deadline: partial``: deadline - up, with ``up`` the client's upload alone; async
   ``local_time`` S: t_d + S, moved on by any outage it sits out) it does tau = min(cap,
   fit(t_d, stop)) whole steps and ends at min(finish(t_d, tau), stop) (a time budget: at stop,
   the budget spent whole); else tau = cap. A job that fits no step is dropped (when the download
   is alone that is known at the start: it never downloads).
3. upload from the compute's end: alone it ends at t_c + (L + b_u / c_u) (at most the round's
   fixed close or the partial deadline); shared: as the download.

An outage (the client's next toggle, strictly inside the job) fails it (``fail``); with
``resume`` the job pauses: completed steps are kept (the step in progress is lost), an interrupted
transfer starts again, and the job goes on when its client is back online (failed at the outage
if it never is, or if its round closes first). At one instant phase ends come before toggles,
which come before the server's decisions (the caller's).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable

import numpy as np

from .draws import ConstantRate
from .link import SharedLink
from .plan import STATUSES
from .sim import MAX_STALLS, stalled

__all__ = ["Machine", "JobRun", "INF", "RUNNING"]

INF = math.inf
#: ``JobRun.status``: RUNNING until resolved, then a code of :data:`fedsim.clock.plan.STATUSES`
RUNNING = -1
_COMPLETED, _DROPPED, _FAILED = (STATUSES.index(s) for s in ("completed", "dropped", "failed"))
#: event orders at one instant: phase ends and link finishes, then availability toggles
_PHASE, _TOGGLE = 0, 1
_DOWN, _COMPUTE, _UP = 0, 1, 2


class JobRun:
    """One job's state and, once resolved, its row (status, steps, end, transfers, resumed, cut)."""

    __slots__ = ("id", "client", "key", "start", "slow", "rate", "cap", "stop", "budget", "left", "give_up", "close",
                 "partial", "phase", "t_cs", "t_ce", "done", "tau", "status", "end", "down_s", "up_s", "download",
                 "upload", "resumed", "cut", "t_off", "gen", "on_link", "version", "weight", "count", "available", "stalls")

    def __init__(self, id_: int, client: int, key: int, start: float):
        self.id, self.client, self.key, self.start = id_, client, key, start
        self.status = RUNNING
        self.end = math.nan
        self.phase = _DOWN
        self.done = 0  # steps completed before the compute phase now planned
        self.tau = 0  # steps the job will have done at the end of the compute phase now planned
        self.t_cs = self.t_ce = math.nan  # compute phase: start and end
        self.stop = None  # last useful instant of the compute (None: none)
        self.left = None  # budget jobs sitting out an outage: compute seconds left
        self.download = self.upload = 0.0
        self.resumed = self.cut = 0
        self.stalls = 0  # outages in a row without a finished step or transfer (MAX_STALLS)
        self.gen = 0  # bumped when an outage interrupts: events of an earlier generation are stale
        self.t_off = math.nan
        self.on_link = None  # (direction, transfer start) while the job's bits are on a link
        self.version = 0
        self.weight = 0.0
        self.count = 1
        self.available = -1  # clients online at its start, once an async path has counted them


class Machine:
    """Jobs in flight of one clock, event by event.

    Args:
        clock: the :class:`~fedsim.clock.Clock` (rates, work caps, slowdowns, transfers).
        peek: ``peek(client, t) -> (online at t, next toggle after t)`` (t never before the last
            time asked of the availability state; next = inf when it never toggles).
        resume: ``system.on_outage: resume``.

    Each machine has its own server links (a synchronous path makes one per round: no transfer
    outlives its round).
    """

    def __init__(self, clock, peek: Callable[[int, float], tuple[bool, float]], *, resume: bool):
        self.clock, self.peek, self.resume = clock, peek, resume
        tr = clock.transfers
        self.transfers = tr
        self.links = [None if tr.down_capacity is None else SharedLink(tr.down_capacity),
                      None if tr.up_capacity is None else SharedLink(tr.up_capacity)]
        self._heap: list = []
        self._seq = 0
        self._link_gen = [0, 0]
        self.jobs: dict[int, JobRun] = {}  # in flight, by id (start order)
        self.resolved: list[JobRun] = []  # resolved since the caller last took them

    # ------------------------------------------------------------------ driving
    def next_time(self) -> float:
        """When the next event happens (inf: none pending)."""
        while self._heap and self._stale(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else INF

    def run_until(self, t: float) -> None:
        """Process every event at or before ``t``, instant by instant."""
        while self.next_time() <= t:
            self.run_instant(self.next_time())

    def run_instant(self, t: float) -> None:
        """Process every event at instant ``t``: phase ends and link finishes first, then
        toggles; events they make at ``t`` itself are processed in the same pass, in (order,
        sequence) order, as SimPy orders (time, priority, insertion)."""
        while self._heap and self._heap[0][0] == t:
            ev = heapq.heappop(self._heap)
            if not self._stale(ev):
                self._handle(ev)

    def take(self) -> list[JobRun]:
        """The jobs resolved since the last call, in resolution order."""
        out, self.resolved = self.resolved, []
        return out

    def _push(self, t: float, order: int, job: JobRun, kind: str, arg=None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, order, self._seq, kind, job, job.gen, arg))

    def _stale(self, ev) -> bool:
        kind, job, gen, arg = ev[3], ev[4], ev[5], ev[6]
        if kind == "link":
            return arg[1] != self._link_gen[arg[0]]
        return job.gen != gen or job.status != RUNNING

    # ------------------------------------------------------------------ jobs
    def start(self, client: int, key: int, t: float, *, fixed_close: float | None = None, give_up: float = INF,
              partial: bool = False, budget: float | None = None) -> JobRun:
        """Start job (client, key) at ``t`` (its client online then). ``fixed_close``: a window's
        close (the compute stops at close - up); ``give_up``: when the server stops waiting;
        ``partial``: the compute stops at give_up - up; ``budget``: async seconds of compute."""
        return self.start_many(np.array([client], dtype=np.int64), np.array([key], dtype=np.int64), t,
                               fixed_close=fixed_close, give_up=give_up, partial=partial, budget=budget)[0]

    def start_many(self, clients: np.ndarray, keys: np.ndarray, t: float, *, fixed_close: float | None = None,
                   give_up: float = INF, partial: bool = False, budget: float | None = None,
                   next_toggles: np.ndarray | None = None) -> list[JobRun]:
        """:meth:`start` for jobs (clients[i], keys[i]), in order, with the clients' transfers,
        speeds and next toggles (``next_toggles``, else :attr:`peek`) read as arrays."""
        clock = self.clock
        down, up = clock.transfers_of(clients)
        if next_toggles is None:
            next_toggles = np.array([self.peek(int(c), t)[1] for c in clients.tolist()])
        speeds = clock.speed_of(clients) if clock._rates is None else None
        jobs = []
        for i, (client, key) in enumerate(zip(clients.tolist(), keys.tolist())):
            job = JobRun(self._seq, client, key, t)
            self._seq += 1
            job.down_s, job.up_s = float(down[i]), float(up[i])
            job.slow = clock.slowdown(client, key)
            job.rate = clock.rate_of(client) if speeds is None else ConstantRate(float(speeds[i]))
            job.cap = clock.work_cap(client, key)
            job.give_up, job.close, job.partial, job.budget = give_up, fixed_close, partial, budget
            if fixed_close is not None:
                job.stop = fixed_close - job.up_s
            elif partial:
                job.stop = give_up - job.up_s
            self.jobs[job.id] = job
            jobs.append(job)
            if next_toggles[i] < INF:
                self._push(float(next_toggles[i]), _TOGGLE, job, "outage")
            if self.links[0] is None and not self._plan(job, t + job.down_s):  # alone: no room, no download
                self._resolve(job, _DROPPED, t)
                continue
            self._transfer(job, _DOWN, t)
        return jobs

    def cancel(self, job: JobRun, t: float) -> None:
        """The server stops waiting for ``job`` at ``t`` (its round closed): ``dropped`` (end t),
        or ``failed`` at its outage if it was sitting one out."""
        if job.status != RUNNING:
            return
        self._leave_link(job, t)
        if job.phase < 0:  # paused by an outage
            self._resolve(job, _FAILED, job.t_off)
        else:
            self._resolve(job, _DROPPED, t)

    def _plan(self, job: JobRun, t: float) -> bool:
        """Plan the compute phase starting at ``t``: its steps and end (False: nothing to do)."""
        rate, slow = job.rate, job.slow
        left = None if job.cap is None else job.cap - job.done
        if job.budget is not None:  # async on a time budget: compute seconds, minus any already used
            job.stop = t + (job.budget if job.left is None else job.left)
        if job.stop is not None:
            fit = rate.fit(t, job.stop, slow)
            more = fit if left is None else min(fit, left)
            end = job.stop if job.budget is not None else min(rate.finish(t, more, slow), job.stop)
            job.t_ce = max(t, end)  # a time budget is spent whole; a window's compute ends with its last step
        else:
            more = left
            job.t_ce = rate.finish(t, more, slow)
        job.t_cs, job.tau = t, job.done + more
        return job.tau > 0

    def _transfer(self, job: JobRun, phase: int, t: float) -> None:
        """Start the download or upload at ``t``: alone, or onto the link after the latency."""
        job.phase = phase
        link = self.links[0 if phase == _DOWN else 1]
        if link is not None:
            self._push(t + self.transfers.latency, _PHASE, job, "enter", t)
            return
        if phase == _DOWN:
            self._push(t + job.down_s, _PHASE, job, "transfer_end", t)
            return
        end = t + job.up_s
        bound = job.close if job.close is not None else job.give_up if job.partial else None
        if bound is not None and t <= job.stop:  # planned to end by the close: no ulp past it
            end = min(end, bound)
        self._push(end, _PHASE, job, "transfer_end", t)

    def _handle(self, ev) -> None:
        t, kind, job, arg = ev[0], ev[3], ev[4], ev[6]
        if kind == "link":
            self._link_finished(arg[0], t)
        elif kind == "enter":
            d = 0 if job.phase == _DOWN else 1
            caps = self.transfers.caps(np.array([job.client]))
            bits = self.transfers.down_bits if d == 0 else self.transfers.up_bits
            self.links[d].add(job.id, t, bits, float(caps[d][0]))
            job.on_link = (d, arg)
            self._link_changed(d)
        elif kind == "transfer_end":
            self._transfer_done(job, arg, t)
        elif kind == "compute_end":
            job.stalls = 0
            self._transfer(job, _UP, t)
        elif kind == "outage":
            self._outage(job, t)
        elif kind == "back":
            self._back(job, t)

    def _transfer_done(self, job: JobRun, t_start: float, t: float) -> None:
        if job.phase == _DOWN:
            job.download = t - t_start if self.links[0] is not None else job.down_s
            if self.links[0] is not None and not self._plan(job, t):  # shared: planned when it ends
                self._resolve(job, _DROPPED, t)
                return
            job.phase, job.stalls = _COMPUTE, 0
            self._push(job.t_ce, _PHASE, job, "compute_end")
            return
        job.upload = t - t_start if self.links[1] is not None else job.up_s
        if job.partial and job.cap is not None and job.tau < job.cap:
            job.cut = 1
        self._resolve(job, _COMPLETED, t)

    # ------------------------------------------------------------------ the link
    def _link_changed(self, d: int) -> None:
        self._link_gen[d] += 1
        nxt = self.links[d].next_finish()
        if nxt < INF:
            self._seq += 1
            heapq.heappush(self._heap, (nxt, _PHASE, self._seq, "link", None, 0, (d, self._link_gen[d])))

    def _link_finished(self, d: int, t: float) -> None:
        for jid in self.links[d].pop_finished(t):
            job = self.jobs[jid]
            t_start = job.on_link[1]
            job.on_link = None
            self._transfer_done(job, t_start, t)
        self._link_changed(d)

    def _leave_link(self, job: JobRun, t: float) -> None:
        if job.on_link is not None:
            d = job.on_link[0]
            self.links[d].remove(job.id, t)
            job.on_link = None
            self._link_changed(d)

    # ------------------------------------------------------------------ availability
    def _outage(self, job: JobRun, t: float) -> None:
        """The job's client goes offline at ``t`` (strictly inside the job; an outage at or after
        the server's limit does not touch it: the caller closes it there)."""
        if t >= job.give_up:
            return
        self._leave_link(job, t)
        if not self.resume:
            if job.phase == _COMPUTE and t == job.t_cs and job.download:  # a download must end before it
                job.download = 0.0
            self._resolve(job, _FAILED, t)
            return
        gained = 0
        if job.phase == _COMPUTE:  # completed steps are kept; the step in progress is lost
            gained = min(job.rate.fit(job.t_cs, t, job.slow), job.tau - job.done)
            job.done += gained
            if job.budget is not None:
                job.left = job.stop - t
        job.stalls = 0 if gained else job.stalls + 1
        job.gen += 1  # the phase's pending end is stale now
        job.t_off = t
        _, back = self.peek(job.client, t)
        if back == INF:
            self._resolve(job, _FAILED, t)
            return
        if job.stalls >= MAX_STALLS:
            raise stalled(t, job.client, job.key)
        job.phase = -1 - job.phase  # paused: -1 download, -2 compute, -3 upload
        self._push(back, _TOGGLE, job, "back")

    def _back(self, job: JobRun, t: float) -> None:
        """The job's client is online again at ``t``: the job goes on (if its round is still open)."""
        if t >= job.give_up:
            return
        phase = -1 - job.phase
        job.resumed += 1
        _, nxt = self.peek(job.client, t)
        if nxt < INF:
            self._push(nxt, _TOGGLE, job, "outage")
        if phase == _COMPUTE:
            if not self._plan(job, t):
                self._resolve(job, _DROPPED, t)
                return
            job.phase = _COMPUTE
            self._push(job.t_ce, _PHASE, job, "compute_end")
            return
        if phase == _DOWN and self.links[0] is None and not self._plan(job, t + job.down_s):
            self._resolve(job, _DROPPED, t)
            return
        self._transfer(job, phase, t)

    def _resolve(self, job: JobRun, status: int, t: float) -> None:
        job.status, job.end = status, t
        if status != _COMPLETED:
            job.tau = 0
        self.jobs.pop(job.id, None)
        self.resolved.append(job)
