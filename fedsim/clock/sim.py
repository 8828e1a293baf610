"""The SimPy simulation behind :meth:`Clock.plans`.

Processes (plain generator functions, SimPy ``machine_shop`` style):

* one ``_availability`` process per client whose availability changes: it walks the client's
  toggle times and, when the client goes offline, ``interrupt()``\\ s the client's running job;
* one ``_work`` process per job: download, local steps, upload; an ``Interrupt`` is an outage and
  the job's work is lost (``failed``, end = outage time);
* the server: ``_sync_rounds`` (window / wait / deadline / overcommit) or ``_settle`` callbacks
  (async).

Ordering at one instant is explicit. Every event carries an absolute time (``Environment.at``) so no
``now + (t - now)`` rounding can reorder ties. State changes (availability toggles, job phases,
interrupts) run at SimPy's priorities; the server's decisions (close a round and open the next,
process async arrivals and fill free slots) run at priority ``LATE``, after every state change of
that instant. Tie rules that follow:

* a client whose outage starts at the round's open (or an async settle) is offline then; one whose
  outage ends at that instant is online;
* an outage exactly when a job resolves (upload done, or the deadline) does not fail it: a job
  fails only for an outage at t with start < t < resolution;
* async events of one instant are processed in increasing job key.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections import deque
from heapq import heappush

import numpy as np
import simpy
from simpy.core import NORMAL

from .plan import Job, RoundPlan
from .link import SharedLink
from .trace_time import SessionIndex

__all__ = ["ClockError", "Simulation", "LATE", "MAX_STALLS", "stalled", "idle_bound", "idle_error", "declined_error"]

#: Priority of availability toggles: after the phase ends of the same instant (a job whose upload
#: ends when its client goes offline has uploaded).
TOGGLE = NORMAL + 1
#: Priority of the server's decisions: after every state change at the same instant.
LATE = NORMAL + 2
INF = math.inf
#: Interrupt cause of a job the server stops waiting for (``overcommit``: its round closed).
CANCEL = "cancel"


class ClockError(RuntimeError):
    """The schedule cannot continue (e.g. no client ever comes online again)."""


# ---------------------------------------------------------------------------- progress guards
#: A job (``system.on_outage: resume``) that sits out this many outages in a row without finishing
#: a local step or a transfer stops the run: its client's online periods are shorter than what
#: it has to do, and it would walk them without end (both paths, :func:`stalled`).
MAX_STALLS = 10_000


def stalled(t: float, client: int, key: int) -> ClockError:
    """The error of a job that reached :data:`MAX_STALLS` outages in a row without progress."""
    return ClockError(
        f"the clock stops at t={t:g}: client {client}'s job {key} sat out {MAX_STALLS:,} outages in a row "
        "without finishing a local step or a transfer (system.on_outage: resume): its online periods are "
        "shorter than one step or transfer"
    )


def idle_bound(num_clients: int) -> int:
    """Async: the most jobs in a row that may end without an upload (dropped or failed) before the
    run stops (:func:`idle_error`): the server would never update."""
    return max(1000 * num_clients, 10_000)


def idle_error(t: float, dropped: int, failed: int) -> ClockError:
    return ClockError(
        f"the clock stops at t={t:g}: policy async: the last {dropped + failed:,} jobs ended without an upload "
        f"({dropped:,} dropped: no local step fit; {failed:,} failed: an outage), so the server never updates"
    )


def declined_error(t: float) -> ClockError:
    """Async: every online client not in flight was asked at t and its job fit no local step, and
    nothing else happens after t (no job in flight, no client's availability changes)."""
    return ClockError(
        f"the clock stops at t={t:g}: every online client's job fits no local step now and nothing else "
        "ever happens (no job in flight, no client comes online)"
    )


class Environment(simpy.Environment):
    """SimPy's environment with events at absolute times.

    :meth:`at` queues an event at t itself (``Environment.schedule`` queues at ``now + delay``):
    some times cannot be written now + d for any float d (the sum rounds past them, e.g. now =
    0.855..., t = 14.475875232711433), and an event must not drift by an ulp from the time it
    stands for. SimPy has no public call for this; :meth:`schedule_at` is the one place that
    writes its queue.
    """

    def schedule_at(self, event: simpy.events.Event, t: float, priority: int = NORMAL) -> None:
        """Queue ``event`` (already triggered) at absolute time ``t``, ties by (priority, order)."""
        if t < self.now:
            raise RuntimeError(f"cannot schedule at {t!r} before now {self.now!r}")
        heappush(self._queue, (t, priority, next(self._eid), event))

    def at(self, t: float, priority: int = NORMAL) -> simpy.events.Event:
        """A succeeded event processed at absolute time ``t`` with ``priority``."""
        event = simpy.events.Event(self)
        event._ok, event._value = True, None  # succeed() without its schedule at now
        self.schedule_at(event, t, priority)
        return event


class _Run:
    """One job in progress (mutable; becomes a :class:`Job` row when reported)."""

    __slots__ = (
        "client", "key", "round", "version", "start", "give_up", "t_download", "t_compute",
        "t_upload", "tau", "weight", "count", "status", "end", "process", "down", "up", "available",
        "phase", "general", "id", "slow", "rate", "cap", "stop", "budget", "left", "close", "partial", "done",
        "t_cs", "t_ce", "download", "upload", "resumed", "cut", "t_off", "paused", "on_link", "stalls",
    )

    def __init__(self, **kw):
        self.general = False
        for k, v in kw.items():
            setattr(self, k, v)
        self.status = "running"
        self.end = math.nan
        self.process = None
        self.phase = 0  # phases finished, of download, compute, upload
        self.download = self.upload = 0.0
        self.resumed = self.cut = self.done = 0
        self.stalls = 0  # outages in a row without a finished step or transfer (MAX_STALLS)
        self.paused, self.on_link, self.left = False, None, None

    def transfers(self) -> tuple[float, float]:
        """(download, upload) seconds of the transfers the job finished (0 for one it did not)."""
        if self.general:
            return self.download, self.upload
        downloaded = self.phase >= 1 and (self.status != "failed" or self.t_download < self.end)  # strictly before an outage
        return (self.down if downloaded else 0.0), (self.up if self.phase >= 3 else 0.0)

    @property
    def resolve_by(self) -> float:
        """When the job resolves unless an outage strikes first."""
        return min(self.t_upload, self.give_up)


class _Link:
    """A :class:`~fedsim.clock.link.SharedLink` driven by SimPy: :meth:`transfer` returns the event
    of a transfer's end; the link wakes at its earliest predicted finish (rescheduled whenever a
    transfer enters or leaves)."""

    def __init__(self, env: Environment, capacity: float):
        self.env, self.link = env, SharedLink(capacity)
        self.events: dict[int, simpy.events.Event] = {}
        self.gen = 0

    def transfer(self, jid: int, bits: float, cap: float) -> simpy.events.Event:
        ev = self.env.event()
        self.link.add(jid, self.env.now, bits, cap)
        self.events[jid] = ev
        self._changed()
        return ev

    def remove(self, jid: int) -> None:
        self.link.remove(jid, self.env.now)
        self.events.pop(jid, None)
        self._changed()

    def _changed(self) -> None:
        self.gen += 1
        gen, nxt = self.gen, self.link.next_finish()
        if nxt < INF:
            self.env.at(nxt).callbacks.append(lambda _e: self._finished(gen, nxt))

    def _finished(self, gen: int, t: float) -> None:
        if gen != self.gen:
            return
        for jid in self.link.pop_finished(t):
            self.events.pop(jid).succeed()
        self._changed()


class Simulation:
    """One run of a :class:`~fedsim.clock.Clock` from t = 0; ``next_plan()`` advances it to the
    next plan, :meth:`observed` says the server has learned the last one (its selection rule has
    seen it). Reads the clock's ``rule``, ``seed``, ``p``, ``num_clients``, ``timelines``,
    ``rates``, ``transfers_of()``, ``slowdown()`` and ``work_cap()``; picks through ``selector``
    (:class:`fedsim.clock.feedback.Selector`).

    Feedback timing: a synchronous round r + 1 opens only after plan r was observed; an async
    server fills its free slots at an instant only after every plan of that instant was observed
    (a pick at t sees every plan that closed at or before t).
    """

    def __init__(self, clock, selector, log: list | None = None):
        self.clock = clock
        self.selector = selector
        self.rule = clock.rule
        self.policy = clock.rule.policy
        self.log = log
        self.env = Environment(initial_time=0.0)  # float times in every row
        self.m = clock.num_clients
        self.online = [tl.initial for tl in clock.timelines]
        self.busy: list[_Run | None] = [None] * self.m
        self.queue: deque[RoundPlan] = deque()
        self.unobserved = 0  # plans emitted and not yet observed
        self.wait_observed = None  # sync: the event round r + 1 waits on
        self.fill_pending = False  # async: slots to fill once this instant's plans are observed
        self.came_online = self.env.event()
        self.is_async = self.policy.is_async
        self.kth = None  # overcommit: the event of the round's K-th upload, and the count so far
        self.kth_count = 0
        # system.trace_semantics fedscale: FedScale's stateful online test, one index per client
        self.sessions = None if clock.sessions is None else [SessionIndex(t) for t in clock.sessions]
        # the levers whose jobs need events (clock.general): the server's links, resume, partial work
        self.general = clock.general
        self.resume = clock.system.on_outage == "resume"
        self.partial = clock.rule.on_deadline == "partial"
        tr = clock.transfers
        self.links = [None if tr.down_capacity is None else _Link(self.env, tr.down_capacity),
                      None if tr.up_capacity is None else _Link(self.env, tr.up_capacity)]
        self.returns = [True] * self.m  # the client comes online again after its current outage
        self.back: dict[int, simpy.events.Event] = {}  # a paused job's client -> its return
        self.job_ids = 0
        self.busy_until, self.publishing, self.published = 0.0, [], 0  # async: the server's aggregation
        self.declined, self.declined_at = set(), -1.0
        for c, tl in enumerate(clock.timelines):
            if tl.changes:
                self.env.process(self._availability(c, tl))
        if self.is_async:
            self.version = 0  # server model version (number of updates applied)
            self.seq = 0  # next job sequence number
            self.in_flight: dict[int, _Run] = {}
            self.resolved: list[_Run] = []  # resolved at this instant, not yet processed
            self.pending: list[_Run] = []  # processed, waiting for the next plan
            self.arrivals = 0  # completed jobs in ``pending``
            self.last_update = 0.0
            self.settle_scheduled = False
            self.zero_work_streak = 0
            self.idle, self.idle_bound = [0, 0], idle_bound(self.m)  # jobs in a row without an upload: dropped, failed
            self.started: list[tuple[int, int, int]] = []  # (client, key, steps) from this version
            self._request_settle()
        else:
            self.env.process(self._sync_rounds())

    # ------------------------------------------------------------------ driving
    def next_plan(self) -> RoundPlan:
        env = self.env
        while not self.queue:
            if env.peek() == INF:  # SimPy's empty schedule: nothing can ever happen again
                if self.is_async and self.declined and self.declined_at == env.now and any(self.online):
                    raise declined_error(env.now)
                raise ClockError(
                    f"the clock stops at t={env.now:g}: no client is online and none ever comes online again"
                )
            env.step()
        return self.queue.popleft()

    def _emit(self, plan: RoundPlan) -> None:
        self.queue.append(plan)
        self.unobserved += 1

    def observed(self) -> None:
        """The server has learned the oldest plan not yet observed: its selection may go on."""
        self.unobserved -= 1
        if self.unobserved:
            return
        if self.wait_observed is not None:
            self.wait_observed.succeed()
            self.wait_observed = None
        if self.fill_pending:
            self.fill_pending = False
            self.env.at(self.env.now, LATE).callbacks.append(lambda _event: self._fill())

    def _observation(self):
        """Sync: the event the next round waits on (already triggered when nothing is unobserved)."""
        ev = self.env.event()
        if self.unobserved:
            self.wait_observed = ev
        else:
            ev.succeed()
        return ev

    def _note(self, t: float, what: str, client: int, key: int | None = None) -> None:
        if self.log is not None:
            self.log.append((t, what, client, key))

    # ------------------------------------------------------------------ processes
    def _availability(self, c: int, timeline):
        """Flip client c's state at each toggle; an outage interrupts its running job (after the
        phase ends of the same instant), and a return resumes a job sitting one out."""
        online = timeline.initial
        toggles = timeline.toggles()
        nxt = next(toggles, None)
        while nxt is not None:
            t = nxt
            yield self.env.at(t, TOGGLE)
            nxt = next(toggles, None)
            online = not online
            self.online[c] = online
            self._note(t, "online" if online else "offline", c)
            run = self.busy[c]
            if online:
                back = self.back.pop(c, None)
                if back is not None and run is not None and t < run.give_up:
                    back.succeed()
                if not self.came_online.triggered:
                    self.came_online.succeed()
                if self.is_async:
                    self._request_settle()
            else:
                self.returns[c] = nxt is not None
                if run is None or self.sessions is not None or run.process is None:
                    continue
                if run.general:
                    if run.status == "running" and not run.paused and run.start < t < run.give_up:
                        run.process.interrupt(t)
                elif run.start < t < run.resolve_by:
                    run.process.interrupt(t)

    def _work(self, run: _Run):
        """Download, local steps, upload (each phase ends at a precomputed time); give up at the
        deadline; an Interrupt is an outage and loses the work."""
        self.busy[run.client] = run
        try:
            for phase, t in (("download", run.t_download), ("compute", run.t_compute), ("upload", run.t_upload)):
                if t > run.give_up:
                    yield self.env.at(run.give_up)
                    run.status, run.end = "dropped", run.give_up
                    self._note(run.give_up, "dropped", run.client, run.key)
                    break
                yield self.env.at(t)
                run.phase += 1
                self._note(t, phase, run.client, run.key)
            else:
                run.status, run.end = "completed", run.t_upload
                if self.kth is not None:
                    self.kth_count += 1
                    if self.kth_count == self.rule.clients_per_round:
                        self.kth.succeed()
        except simpy.Interrupt as outage:
            if outage.cause == CANCEL:  # the round closed without it (status set by the server)
                return
            run.status, run.end = "failed", outage.cause
            self._note(outage.cause, "failed", run.client, run.key)
        if self.busy[run.client] is run:
            self.busy[run.client] = None
        if self.is_async:
            self.resolved.append(run)
            self._request_settle()

    def _plan(self, run: _Run, t: float) -> bool:
        """Plan the compute phase starting at ``t`` (``Machine._plan``): False when it has nothing to do."""
        rate, slow = run.rate, run.slow
        left = None if run.cap is None else run.cap - run.done
        if run.budget is not None:
            run.stop = t + (run.budget if run.left is None else run.left)
        if run.stop is not None:
            fit = rate.fit(t, run.stop, slow)
            more = fit if left is None else min(fit, left)
            end = run.stop if run.budget is not None else min(rate.finish(t, more, slow), run.stop)
            run.t_ce = max(t, end)  # a time budget is spent whole; a window's compute ends with its last step
        else:
            more = left
            run.t_ce = rate.finish(t, more, slow)
        run.t_cs, run.tau = t, run.done + more
        return run.tau > 0

    def _resolve(self, run: _Run, status: str, t: float) -> None:
        """A general job ends (``completed``, ``dropped`` or ``failed`` at ``t``)."""
        run.status, run.end = status, t
        if status != "completed":
            run.tau = 0
        self._note(t, status if status != "completed" else "upload", run.client, run.key)
        if self.busy[run.client] is run:
            self.busy[run.client] = None
        if status == "completed" and self.kth is not None:
            self.kth_count += 1
            if self.kth_count == self.rule.clients_per_round:
                self.kth.succeed()
        if self.is_async:
            self.resolved.append(run)
            self._request_settle()

    def _general_work(self, run: _Run):
        """A job with the levers (``Machine`` event by event, the same decisions): download (alone,
        or on the server's link after the latency), compute to its planned end, upload; an outage
        fails it, or with ``resume`` pauses it until its client is back (completed steps kept,
        interrupted transfers started again)."""
        env, c, tr = self.env, run.client, self.clock.transfers
        phase = 0
        while True:
            try:
                if phase == 0:
                    t0 = env.now
                    link = self.links[0]
                    if link is not None:
                        yield env.at(t0 + tr.latency)
                        run.on_link = 0
                        yield link.transfer(run.id, tr.down_bits, float(tr.caps(np.array([c]))[0][0]))
                        run.on_link = None
                        run.download = env.now - t0
                        if not self._plan(run, env.now):
                            self._resolve(run, "dropped", env.now)
                            return
                    else:
                        yield env.at(run.t_download)
                        run.download = run.down
                    self._note(env.now, "download", c, run.key)
                    phase, run.stalls = 1, 0
                if phase == 1:
                    yield env.at(run.t_ce)
                    self._note(env.now, "compute", c, run.key)
                    phase, run.stalls = 2, 0
                t0 = env.now
                link = self.links[1]
                if link is not None:
                    yield env.at(t0 + tr.latency)
                    run.on_link = 1
                    yield link.transfer(run.id, tr.up_bits, float(tr.caps(np.array([c]))[1][0]))
                    run.on_link = None
                    run.upload = env.now - t0
                else:
                    end = t0 + run.up
                    bound = run.close if run.close is not None else run.give_up if run.partial else None
                    if bound is not None and t0 <= run.stop:  # planned to end by the close: no ulp past it
                        end = min(end, bound)
                    yield env.at(end)
                    run.upload = run.up
                if run.partial and run.cap is not None and run.tau < run.cap:
                    run.cut = 1
                self._resolve(run, "completed", env.now)
                return
            except simpy.Interrupt as outage:
                if outage.cause == CANCEL:  # the round closed without it (status set by the server)
                    return
                t_off = outage.cause
                if run.on_link is not None:
                    self.links[run.on_link].remove(run.id)
                    run.on_link = None
                if not self.resume:
                    if phase == 1 and t_off == run.t_cs and run.download:  # a download must end before it
                        run.download = 0.0
                    self._resolve(run, "failed", t_off)
                    return
                gained = 0
                if phase == 1:  # completed steps are kept; the step in progress is lost
                    gained = min(run.rate.fit(run.t_cs, t_off, run.slow), run.tau - run.done)
                    run.done += gained
                    if run.budget is not None:
                        run.left = run.stop - t_off
                run.stalls = 0 if gained else run.stalls + 1
                run.t_off = t_off
                self._note(t_off, "paused", c, run.key)
                if not self.returns[c]:
                    self._resolve(run, "failed", t_off)
                    return
                if run.stalls >= MAX_STALLS:
                    raise stalled(t_off, c, run.key)
                run.paused = True
                self.back[c] = back = env.event()
                try:
                    yield back
                except simpy.Interrupt:  # the round closed while it sat the outage out
                    self.back.pop(c, None)
                    return
                run.paused = False
                run.resumed += 1
                t = env.now
                self._note(t, "resumed", c, run.key)
                if phase == 1:
                    if not self._plan(run, t):
                        self._resolve(run, "dropped", t)
                        return
                elif phase == 0 and self.links[0] is None:
                    if not self._plan(run, t + run.down):
                        self._resolve(run, "dropped", t)
                        return
                    run.t_download = t + run.down

    def _start_general(self, c: int, key: int, round_: int, version: int, start: float, window_close: float | None,
                       give_up: float, weight: float, count: int, available: int) -> _Run:
        """Start a job with the levers (:meth:`_general_work`)."""
        clock = self.clock
        down, up = (float(x[0]) for x in clock.transfers_of(np.array([c])))
        run = _Run(client=c, key=key, round=round_, version=version, start=start, give_up=give_up, t_download=start + down,
                   t_compute=math.nan, t_upload=math.nan, tau=0, weight=weight, count=count, down=down, up=up,
                   available=available, general=True, id=self.job_ids, slow=clock.slowdown(c, key),
                   rate=clock.rates[c], cap=clock.work_cap(c, key), close=window_close, partial=self.partial,
                   budget=self.rule.local_time, t_cs=math.nan, t_ce=math.nan, t_off=math.nan)
        self.job_ids += 1
        run.stop = (window_close - up) if window_close is not None else (give_up - up) if self.partial else None
        self._note(start, "start", c, key)
        self.busy[c] = run
        if self.links[0] is None and not self._plan(run, start + down):  # no room for a step: never downloads
            run.status, run.end = "dropped", start
            self.busy[c] = None
            if self.is_async:
                self.resolved.append(run)
                self._request_settle()
            return run
        run.process = self.env.process(self._general_work(run))
        return run

    def _start(self, c: int, key: int, round_: int, version: int, start: float, window_close: float | None,
               give_up: float, weight: float, count: int, available: int) -> _Run:
        """Plan job (c, key) started at ``start`` and, if it has work, launch its process."""
        if self.general:
            return self._start_general(c, key, round_, version, start, window_close, give_up, weight, count, available)
        clock = self.clock
        down, up = (float(x[0]) for x in clock.transfers_of(np.array([c])))
        slow = clock.slowdown(c, key)
        rate = clock.rates[c]
        cap = clock.work_cap(c, key)
        t_d = start + down
        if window_close is not None:  # window: the whole steps that fit before the last upload start
            t_to = window_close - up
            fit = rate.fit(t_d, t_to, slow)
            tau = fit if cap is None else min(fit, cap)
            t_c = min(rate.finish(t_d, tau, slow), t_to)
            t_u = min(t_c + up, window_close)
        else:
            tau = cap
            t_c = rate.finish(t_d, tau, slow)
            t_u = t_c + up
        run = _Run(client=c, key=key, round=round_, version=version, start=start, give_up=give_up,
                   t_download=t_d, t_compute=t_c, t_upload=t_u, tau=tau, weight=weight, count=count,
                   down=down, up=up, available=available)
        self._note(start, "start", c, key)
        if self.sessions is not None and tau != 0 and t_u <= give_up and not self.sessions[c].online(t_u):
            # FedScale: decided when the job starts, by the stateful test at its completion time
            run.status, run.end, run.phase = "failed", t_u, 1
            self._note(t_u, "failed", c, key)
        elif tau == 0:  # nothing to do: dropped at once, no download, cannot fail
            run.status, run.end = "dropped", start
            if self.is_async:
                self.resolved.append(run)
                self._request_settle()
        else:
            run.process = self.env.process(self._work(run))
        return run

    # ------------------------------------------------------------------ synchronous rounds
    def _sync_rounds(self):
        env, rule, clock, policy = self.env, self.rule, self.clock, self.policy
        r, t_open = 0, 0.0
        paced = clock.paced  # the server's aggregation time: each round opens when the last one closed
        while True:
            if paced:
                window_close = None if policy.fixed_close(r) is None else t_open + policy.span()[0]
            else:
                t_open = policy.open_at(r, t_open)
                window_close = policy.fixed_close(r)
            give_up = policy.give_up(t_open, window_close)
            was_online = list(self.online) if self.sessions is None else [s.online(t_open) for s in self.sessions]
            online = np.flatnonzero(was_online)
            q = policy.request_size(rule.clients_per_round)
            picked = self.selector.pick(r, t_open, q, lambda: online,
                                        lambda cs: np.asarray(was_online, dtype=bool)[cs])
            chosen, counts, weights = picked.clients, picked.counts, picked.weights
            runs = [
                self._start(int(c), r, r, r, t_open, window_close, give_up, float(w), int(k), len(online))
                for c, k, w in zip(chosen, counts, weights)
            ]
            procs = [run.process for run in runs if run.process is not None]
            stopped = False  # general jobs: the server stopped some at its limit (the round closes there)
            if self.general:
                close, stopped = yield from self._general_round(runs, procs, give_up)
                if close is not None:  # the K-th upload
                    plan = self._overcommit_plan(r, t_open, close, runs, was_online)
                    if paced:
                        plan = replace(plan, close=close + self._aggregation(runs))
                        yield env.at(plan.close, LATE)
                    close = plan.close
                    self._emit(plan)
                    r, t_open = r + 1, close
                    yield self._observation()
                    continue
            elif procs and policy.keeps_first:
                self.kth, self.kth_count = env.event(), 0
                yield simpy.AnyOf(env, [simpy.AllOf(env, procs), self.kth])
                kth, self.kth = self.kth, None
                if kth.triggered:  # K uploads: the round closes now, after this instant's state changes
                    yield env.at(env.now, LATE)
                    self._emit(self._overcommit_plan(r, t_open, env.now, runs, was_online))
                    r, t_open = r + 1, env.now
                    yield self._observation()
                    continue
            elif procs:
                yield simpy.AllOf(env, procs)
            if window_close is not None:
                close = window_close
            elif stopped:
                close = give_up
            elif runs:
                ends = [run.end for run in runs if self.sessions is None or run.status != "failed"]
                close = max(ends or [run.end for run in runs])  # deadline: dropped runs end at the deadline
            else:  # nobody online: wait for the first client to come online (deadline: at most D)
                self.came_online = env.event()
                if give_up < INF:
                    yield simpy.AnyOf(env, [self.came_online, env.at(give_up, LATE)])
                else:
                    yield self.came_online
                close = env.now
            yield env.at(close, LATE)
            base, close = close, close + self._aggregation(runs) if paced else close
            if close > base:
                yield env.at(close, LATE)
            self._emit(self._sync_plan(r, t_open, base, runs, was_online, close))
            r, t_open = r + 1, close
            yield self._observation()

    def _aggregation(self, runs: list[_Run]) -> float:
        """The server's aggregation time for the round's kept updates (0 without one)."""
        return self.clock.aggregation_seconds(sum(1 for run in runs if run.status == "completed" and run.tau > 0))

    def _general_round(self, runs: list[_Run], procs: list, give_up: float):
        """Wait for a round of general jobs: every job resolved, the K-th upload (after this
        instant's state changes) or the server's limit (the jobs still going then are stopped:
        dropped, or failed at their outage if sitting one out). Returns (the K-th upload's time or
        None, whether jobs were stopped at the limit)."""
        env, policy = self.env, self.policy
        if not procs:
            return None, False
        waits = [simpy.AllOf(env, procs)]
        if policy.keeps_first:
            self.kth, self.kth_count = env.event(), 0
            waits.append(self.kth)
        if give_up < INF:
            waits.append(env.at(give_up, LATE))
        yield simpy.AnyOf(env, waits)
        kth, self.kth = self.kth, None
        if kth is not None and kth.triggered:
            yield env.at(env.now, LATE)
            return env.now, False
        going = sorted((run for run in runs if run.status == "running"), key=lambda run: run.client)
        for run in going:
            self._stop(run, give_up)
        return None, bool(going)

    def _stop(self, run: _Run, t: float) -> None:
        """The server stops waiting for a general job at ``t``: dropped, or failed at its outage."""
        if run.on_link is not None:
            self.links[run.on_link].remove(run.id)
            run.on_link = None
        if run.paused:
            run.status, run.end = "failed", run.t_off
            self.back.pop(run.client, None)
        else:
            run.status, run.end = "dropped", t
        run.tau = 0
        run.process.interrupt(CANCEL)
        if self.busy[run.client] is run:
            self.busy[run.client] = None

    def _sync_plan(self, r: int, t_open: float, close: float, runs: list[_Run], was_online: list[bool],
                   plan_close: float | None = None) -> RoundPlan:
        """Round r's plan: dropped rows end at ``close``, the plan at ``plan_close`` (the close plus
        the server's aggregation time; default ``close``)."""
        rows = {}
        for run in runs:
            done = run.status == "completed"
            rows[run.client] = Job(
                r, run.client, run.status, run.tau if done else 0, run.start,
                close if run.status == "dropped" else run.end, r, r, 0, run.weight, run.count, *run.transfers(),
                run.resumed, run.cut if done else 0,
            )
        if self.rule.clients_per_round is None:  # full participation: the offline clients were asked for
            for c in range(self.m):
                if not was_online[c]:
                    rows[c] = Job(r, c, "offline", 0, t_open, t_open, r, r, 0, 0.0, 0)
        return RoundPlan(r, t_open, close if plan_close is None else plan_close, tuple(rows[c] for c in sorted(rows)),
                         r + 1, sum(was_online))

    def _overcommit_plan(self, r: int, t_open: float, close: float, runs: list[_Run], was_online: list[bool],
                         plan_close: float | None = None) -> RoundPlan:
        """The round of an ``overcommit`` policy that got K uploads by ``close``: the first K (by
        upload time, then client) are aggregated; every other job is ``dropped`` (end = close) --
        a later upload, a job still running (stopped now), or one whose outage came exactly at
        the close -- except those that failed before the close."""
        k = self.rule.clients_per_round
        done = sorted((run for run in runs if run.status == "completed"),
                      key=lambda run: (run.end if run.general else run.t_upload, run.client))
        for run in done[k:]:
            run.status = "dropped"
            run.tau = 0 if run.general else run.tau
        for run in sorted(runs, key=lambda run: run.client):
            if run.status == "running":  # stop it: it is no longer the client's job
                if run.general:
                    self._stop(run, close)
                    continue
                run.status = "dropped"
                run.process.interrupt(CANCEL)
                if self.busy[run.client] is run:
                    self.busy[run.client] = None
        for run in runs:
            if run.status == "failed" and run.end >= close:  # an outage at the close does not fail it
                run.status = "dropped"
        return self._sync_plan(r, t_open, close, runs, was_online, plan_close)

    # ------------------------------------------------------------------ asynchronous (FedBuff-style)
    def _request_settle(self) -> None:
        if not self.settle_scheduled:
            self.settle_scheduled = True
            self.env.at(self.env.now, LATE).callbacks.append(self._settle)

    def _settle(self, _event) -> None:
        """End of an instant: process resolved jobs in key order (every ``buffer`` arrivals make a
        server update), then fill free slots among online clients not in flight -- at once, or,
        when this instant made plans, once the server has observed them (:meth:`observed`)."""
        self.settle_scheduled = False
        policy, now = self.policy, self.env.now
        batch, self.resolved = sorted(self.resolved, key=lambda run: run.key), []
        for run in batch:
            del self.in_flight[run.client]
            self.pending.append(run)
            if run.status == "completed":
                self.idle = [0, 0]
                self.arrivals += 1
                if self.arrivals == policy.buffer:
                    self._async_update(now)
            else:
                self.idle[run.status == "failed"] += 1
                if sum(self.idle) > self.idle_bound:
                    raise idle_error(now, *self.idle)
        if self.unobserved:
            self.fill_pending = True
        else:
            self._fill()

    def _fill(self) -> None:
        """Start jobs in the free slots, picked by the selection rule among online clients not in flight."""
        policy, clock, now = self.policy, self.clock, self.env.now
        free = policy.concurrency - len(self.in_flight)
        if free <= 0:
            return
        available = sum(self.online)
        if self.declined_at != now:  # general jobs: a client whose job fits no step is not asked again now
            self.declined, self.declined_at = set(), now
        candidates = np.array([c for c in range(self.m) if self.online[c] and c not in self.in_flight
                               and c not in self.declined], dtype=np.int64)
        if not len(candidates):
            return

        def is_candidate(cs):
            return np.array([self.online[c] and c not in self.in_flight and c not in self.declined for c in cs.tolist()],
                            dtype=bool)

        pick = self.selector.pick(self.seq, now, free, lambda: candidates, is_candidate, is_async=True).clients
        for c in pick:
            c = int(c)
            run = self._start(c, self.seq, -1, self._published(now), now, None, INF, float(clock.p[c]), 1, available)
            self.in_flight[c] = run
            if run.process is not None and not self.general:
                self.started.append((c, self.seq, run.tau))
            self.seq += 1
            if run.process is None:
                if self.general:
                    self.declined.add(c)
                self.zero_work_streak += 1
                if self.zero_work_streak > 1000 * self.m:
                    raise ClockError("policy async: no client gets any local steps (tau = 0 for every job)")
            else:
                self.zero_work_streak = 0

    def _published(self, t: float) -> int:
        """The model version a job starting at ``t`` downloads (the server's aggregation time
        publishes a version after its update)."""
        if not self.clock.paced:
            return self.version
        while self.publishing and self.publishing[0][0] <= t:
            self.published = self.publishing.pop(0)[1]
        return self.published

    def _async_update(self, now: float) -> None:
        u = self.version
        jobs = tuple(
            Job(u, run.client, run.status, run.tau if run.status == "completed" else 0, run.start, run.end,
                run.key, run.version, u - run.version, run.weight, 1, *run.transfers(), run.resumed,
                run.cut if run.status == "completed" else 0)
            for run in self.pending
        )
        first = min(self.pending, key=lambda run: (run.start, run.key))
        self.version += 1
        close = now
        if self.clock.paced:
            close = max(now, self.busy_until) + self.clock.aggregation_seconds(self.arrivals)
            self.busy_until = close
            self.publishing.append((close, self.version))
        live = [run.version for run in self.in_flight.values() if run.status in ("running", "completed")]
        self._emit(RoundPlan(u, self.last_update, close, jobs, min(live + [self._published(now)]), first.available,
                             tuple(self.started)))
        self.pending, self.arrivals, self.last_update, self.started = [], 0, close, []
