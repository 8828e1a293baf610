"""The fast path of synchronous rounds whose jobs need events (:mod:`fedsim.clock.jobs`): a shared
server link, ``system.on_outage: resume``, ``round.on_deadline: partial``, the server's
aggregation time. The round logic is the vectorised paths' (selection at the open, availability as
numpy state advanced from open to open, offline rows under full participation); each round's jobs
run in a :class:`~fedsim.clock.jobs.Machine` of their own, so no transfer outlives its round.

A round closes at its window's end (``window``), at the K-th upload (``overcommit``, the first K
kept, by upload time then client), when every job has resolved (``wait``), or at the deadline
(``deadline``); the server stops waiting for the jobs still going then (``dropped``; a job sitting
out an outage then: ``failed`` at it). An outage at the close itself does not fail a job. With an
aggregation time A per aggregated update the round closes A x (updates aggregated) later (or 2 x
parameters x updates / the server's FLOP/s), and the next round opens then.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np

from .jobs import INF, JobRun, Machine
from .plan import JOB_COLUMNS, STATUSES, RoundTable
from .sim import ClockError

__all__ = ["general_tables", "row_columns"]

_COMPLETED, _DROPPED, _FAILED = (STATUSES.index(s) for s in ("completed", "dropped", "failed"))


def _peek(states):
    """The machine's ``peek`` for one round (``states`` advanced to its open): a cursor per client
    (:meth:`~fedsim.clock.availability.ToggleArrays.cursor`), so a job that sits out many outages
    walks its client's toggles once, not once per outage from the open."""
    if states is None:
        return lambda c, t: (True, INF)
    cursors = {}

    def peek(c: int, t: float) -> tuple[bool, float]:
        cursor = cursors.get(c)
        if cursor is None:
            cursor = cursors[c] = states.cursor(np.array([c], dtype=np.int64))
        online, nxt = cursor.at(t)
        return bool(online[0]), float(nxt[0])

    return peek


def general_tables(clock, selector) -> Iterator[RoundTable]:
    """The plans of ``clock`` (a synchronous policy) as tables, each round's jobs event by event."""
    rule, m = clock.rule, clock.num_clients
    policy = rule.policy
    everyone = np.arange(m, dtype=np.int64)
    states = clock.availability_states()
    q = policy.request_size(rule.clients_per_round)
    k = rule.clients_per_round if policy.keeps_first else None
    resume = clock.system.on_outage == "resume"
    partial = rule.on_deadline == "partial"
    paced = clock.paced  # aggregation time: each round opens when the last one closed
    last_close = 0.0
    for r in itertools.count():
        t_open = last_close if paced else policy.open_at(r, last_close)
        fixed = policy.fixed_close(r) if not paced or policy.fixed_close(r) is None else t_open + policy.span()[0]
        give_up = policy.give_up(t_open, fixed)
        online = everyone
        if states is not None:
            states.advance(t_open, record=False)
            online = np.flatnonzero(states.online)
        picked = selector.pick(r, t_open, q, lambda: online, None if states is None else (lambda cs: states.online[cs]))
        machine = Machine(clock, _peek(states), resume=resume)
        nxt = None if states is None else states.next[picked.clients]  # online at the open: the next toggle is an outage
        jobs = machine.start_many(picked.clients, np.full(len(picked.clients), r, dtype=np.int64), t_open,
                                  fixed_close=fixed, give_up=give_up, partial=partial,
                                  next_toggles=np.full(len(picked.clients), INF) if nxt is None else nxt)
        close = _run_round(machine, jobs, give_up, k)
        if close is None:  # every job resolved before the server's limit
            if fixed is not None:
                close = fixed
            elif jobs:
                close = max(j.end for j in jobs)
            else:
                close = _first_online(states, give_up, t_open)
        kept = [j for j in jobs if j.status == _COMPLETED and j.tau > 0]
        cols = row_columns(jobs, r, picked.weights, picked.counts, close)
        if paced:
            close = close + clock.aggregation_seconds(len(kept))
        if rule.clients_per_round is None and len(online) < m:
            from .vectorised import _with_offline_rows

            cols = _with_offline_rows(cols, online, m, r, t_open)
        yield RoundTable(r, t_open, close, r + 1, cols, len(online))
        last_close = close


def _run_round(machine: Machine, jobs: list[JobRun], give_up: float, k: int | None) -> float | None:
    """Run a round's jobs; returns the close when the server decides it (the K-th upload, or its
    limit with jobs still going), else None (every job resolved before)."""
    done = 0
    while machine.jobs:
        t = machine.next_time()
        if t > give_up:
            break
        if t == INF:
            raise ClockError("a round's job has no event left (clock bug)")
        machine.run_instant(t)
        if k is not None:
            done += sum(1 for j in machine.take() if j.status == _COMPLETED)
            if done >= k:
                _keep_first(jobs, machine, k, t)
                return t
    if not machine.jobs:
        return None
    for job in sorted(machine.jobs.values(), key=lambda j: j.client):
        machine.cancel(job, give_up)
    return give_up


def _keep_first(jobs: list[JobRun], machine: Machine, k: int, close: float) -> None:
    """Over-commitment's close at the K-th upload: the first K (by upload time, then client) are
    kept; later uploads and jobs still going are dropped (end = close); a failure at the close
    itself is a drop."""
    done = sorted((j for j in jobs if j.status == _COMPLETED), key=lambda j: (j.end, j.client))
    for j in done[k:]:
        j.status, j.tau, j.end = _DROPPED, 0, close
    for j in sorted(machine.jobs.values(), key=lambda j: j.client):
        machine.cancel(j, close)
    for j in jobs:
        if j.status == _FAILED and j.end >= close:
            j.status, j.end = _DROPPED, close


def row_columns(jobs: list[JobRun], r: int, weights, counts, close: float) -> dict:
    """The round's rows as columns, sorted by client (dropped rows end at the server's close,
    before any aggregation time)."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].client)
    js = [jobs[i] for i in order]
    n = len(js)
    w = np.asarray(weights, dtype=np.float64)[order] if n else np.zeros(0)
    cnt = np.asarray(counts, dtype=np.int64)[order] if n else np.zeros(0, dtype=np.int64)
    status = np.array([j.status for j in js], dtype=np.int8)
    completed = status == _COMPLETED
    end = np.array([j.end for j in js], dtype=np.float64)
    end = np.where(status == _DROPPED, close, end)
    cols = {
        "round": np.full(n, r, dtype=np.int64),
        "client": np.array([j.client for j in js], dtype=np.int64),
        "status": status,
        "steps": np.where(completed, np.array([j.tau for j in js], dtype=np.int64), 0),
        "start": np.array([j.start for j in js], dtype=np.float64),
        "end": end,
        "key": np.full(n, r, dtype=np.int64),
        "version": np.full(n, r, dtype=np.int64),
        "staleness": np.zeros(n, dtype=np.int64),
        "weight": w,
        "count": cnt,
        "download": np.array([j.download for j in js], dtype=np.float64),
        "upload": np.array([j.upload for j in js], dtype=np.float64),
        "resumed": np.array([j.resumed for j in js], dtype=np.int64),
        "cut": np.where(completed, np.array([j.cut for j in js], dtype=np.int64), 0),
    }
    assert tuple(cols) == JOB_COLUMNS
    return cols


def _first_online(states, give_up: float, t_open: float) -> float:
    first = float(states.next.min()) if states is not None else INF
    close = min(first, give_up)
    if close == math.inf:
        raise ClockError(f"the clock stops at t={t_open:g}: no client is online and none ever comes online again")
    return close
