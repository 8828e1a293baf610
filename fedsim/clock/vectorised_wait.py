"""The vectorised path behind :meth:`fedsim.clock.Clock.tables` for the policies with prescribed
work: ``wait``, ``deadline`` and ``overcommit``.

As for windows (:mod:`fedsim.clock.vectorised`), a job is a closed-form function of the client's
speed (or trace integrals), slowdown, prescribed work, transfers and its next availability toggle
after the open: the client is online at the open, so that toggle is an outage, and the job fails
iff it comes strictly before the job resolves (its upload, the deadline, or the over-commitment
close). A round is a few numpy operations over the selected clients plus the population's
availability state (advanced from open to open), with no SimPy process, event or Python object per
client. It computes exactly what :mod:`fedsim.clock.sim` computes (the tests compare every field
of every job).
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np

from .model import Traced
from .plan import JOB_COLUMNS, STATUSES, RoundTable
from .sim import ClockError
from .vectorised import _with_offline_rows

__all__ = ["prescribed_tables"]

_COMPLETED, _DROPPED, _FAILED = (STATUSES.index(s) for s in ("completed", "dropped", "failed"))
INF = math.inf


def prescribed_tables(clock, selector) -> Iterator[RoundTable]:
    """The plans of ``clock`` (policy wait, deadline or overcommit, any availability) as tables.

    Same draws and floating-point expressions as ``Simulation._start`` / ``_sync_rounds`` and
    ``ConstantRate.finish`` (traced clients: the per-job integral of ``TraceRate.finish``).
    """
    rule, m = clock.rule, clock.num_clients
    policy = rule.policy
    everyone = np.arange(m, dtype=np.int64)
    no_slowdown = clock.system.slowdown is None
    av = clock.system.availability
    states = clock.availability_states()
    q = policy.request_size(rule.clients_per_round)
    t_open = 0.0
    for r in itertools.count():
        give_up = policy.give_up(t_open, None)
        online = everyone
        if states is not None:
            states.advance(t_open, record=False)
            online = np.flatnonzero(states.online)
        picked = selector.pick(r, t_open, q, lambda: online, None if states is None else (lambda cs: states.online[cs]))
        chosen, counts, weights = picked.clients, picked.counts, picked.weights
        n = len(chosen)
        if n == 0:
            cols, close = _empty(), _first_online(states, give_up, t_open)
        else:
            cols, close = _jobs(clock, policy, chosen, r, t_open, give_up, no_slowdown, av, states)
            cols["weight"] = np.asarray(weights, dtype=np.float64)
            cols["count"] = np.asarray(counts, dtype=np.int64)
        cols["round"] = np.full(n, r, dtype=np.int64)
        cols["client"] = chosen.astype(np.int64)
        cols["start"] = np.full(n, t_open, dtype=np.float64)
        cols["key"] = cols["version"] = np.full(n, r, dtype=np.int64)
        cols["staleness"] = cols["resumed"] = cols["cut"] = np.zeros(n, dtype=np.int64)
        cols = {name: cols[name] for name in JOB_COLUMNS}
        if rule.clients_per_round is None and len(online) < m:
            cols = _with_offline_rows(cols, online, m, r, t_open)
        yield RoundTable(r, t_open, close, r + 1, cols, len(online))
        t_open = close


def _empty() -> dict:
    z = {name: np.zeros(0, dtype=np.float64) for name in ("end", "weight", "download", "upload")}
    return {**z, "status": np.zeros(0, dtype=np.int8), "steps": np.zeros(0, dtype=np.int64),
            "count": np.zeros(0, dtype=np.int64)}


def _first_online(states, give_up: float, t_open: float) -> float:
    """Nobody online at the open: the round closes when the first client comes online (every
    client is offline, so each one's next toggle brings it online), at most at the deadline."""
    first = float(states.next.min()) if states is not None else INF
    close = min(first, give_up)
    if close == INF:
        raise ClockError(f"the clock stops at t={t_open:g}: no client is online and none ever comes online again")
    return close


def _jobs(clock, policy, chosen: np.ndarray, r: int, t_open: float, give_up: float, no_slowdown: bool, av,
          states) -> tuple[dict, float]:
    """Status, steps, end and transfers of the selected clients' jobs, and the round's close."""
    n = len(chosen)
    speed = clock.speed_of(chosen)
    down, up = clock.transfers_of(chosen)
    slow = 1.0 if no_slowdown else np.array([clock.slowdown(int(c), r) for c in chosen])
    if clock.fixed_work is not None:
        tau = clock.fixed_work[chosen].astype(np.int64)
    else:
        tau = np.array([clock.work_cap(int(c), r) for c in chosen], dtype=np.int64)
    t_d = t_open + down
    if isinstance(av, Traced):  # time-varying speed: the SimPy path's per-job integrals
        slows = np.broadcast_to(slow, (n,))
        t_c = np.array([clock.rates[c].finish(float(t_d[i]), int(tau[i]), float(slows[i]))
                        for i, c in enumerate(chosen.tolist())])
    else:
        t_c = t_d + tau * slow / speed
    t_u = t_c + up
    started = tau > 0
    nxt = np.full(n, INF) if states is None else states.next[chosen]
    failed = started & (nxt < np.minimum(t_u, give_up))  # an outage strictly before the job resolves
    late = started & ~failed & (t_u > give_up)  # deadline: still busy at the deadline
    done = started & ~failed & ~late
    ends = np.where(failed, nxt, np.where(done, t_u, np.where(late, give_up, t_open)))  # Simulation's run.end
    close = float(ends.max())
    download_done = started & (t_d <= give_up) & (~failed | (t_d < nxt))
    upload_done = done.copy()
    k = clock.rule.clients_per_round
    if policy.keeps_first and int(done.sum()) >= k:
        # the first K uploads (by time, then client) are kept; the round closes at the K-th
        order = np.lexsort((chosen, np.where(done, t_u, INF)))
        close = float(t_u[order[k - 1]])
        keep = np.zeros(n, dtype=bool)
        keep[order[:k]] = True
        upload_done = done & (t_u <= close)
        download_done = started & (t_d <= close) & (~failed | (t_d < nxt))
        failed = failed & (nxt < close)
        done = keep
    status = np.where(failed, _FAILED, np.where(done, _COMPLETED, _DROPPED)).astype(np.int8)
    cols = {
        "status": status,
        "steps": np.where(done, tau, 0).astype(np.int64),
        "end": np.where(failed, nxt, np.where(done, t_u, close)).astype(np.float64),
        "download": np.where(download_done, down, 0.0),
        "upload": np.where(upload_done, up, 0.0),
    }
    return cols, close
