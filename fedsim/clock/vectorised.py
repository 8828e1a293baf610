"""The vectorised path behind :meth:`fedsim.clock.Clock.tables` for the ``window`` policy.

A window job is a closed-form function of the client's speed (or trace integrals), slowdown, work
cap, transfers and its next availability toggle, so a round is a few numpy operations over the
selected clients plus the population's availability state, with no SimPy process and no Python
object per client. It computes exactly what :mod:`fedsim.clock.sim` computes (the tests compare
every field of every job).
"""

from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from .draws import whole_steps
from .model import Traced
from .plan import JOB_COLUMNS, STATUSES, RoundTable

__all__ = ["window_tables"]

_COMPLETED, _DROPPED, _OFFLINE, _FAILED = (STATUSES.index(s) for s in ("completed", "dropped", "offline", "failed"))


def window_tables(clock, selector) -> Iterator[RoundTable]:
    """The plans of ``clock`` (policy window, any availability) as tables, round after round.

    Same draws and floating-point expressions as ``Simulation._start`` and ``ConstantRate.fit``
    / ``finish``. A job fails iff the client, online at the open, toggles (goes offline) before its
    upload ends. Only the selected clients' speeds and transfers are drawn; every client's
    availability is numpy state (:meth:`fedsim.clock.Clock.availability_states`). Round r's pick
    (``selector``) runs when the generator resumes after round r - 1, i.e. after it was observed.
    """
    rule, m = clock.rule, clock.num_clients
    everyone = np.arange(m, dtype=np.int64)
    W = rule.policy.window
    no_slowdown = clock.system.slowdown is None
    av = clock.system.availability
    states = clock.availability_states()
    for r in itertools.count():
        t_open, close = r * W, (r + 1) * W
        online = everyone
        if states is not None:
            states.advance(t_open, record=False)
            online = np.flatnonzero(states.online)
        picked = selector.pick(r, t_open, rule.clients_per_round, lambda: online,
                               None if states is None else (lambda cs: states.online[cs]))
        chosen, counts, weights = picked.clients, picked.counts, picked.weights
        speed = clock.speed_of(chosen)
        down, up = clock.transfers_of(chosen)
        slow = 1.0 if no_slowdown else np.array([clock.slowdown(int(c), r) for c in chosen])
        t_d = t_open + down
        t_to = close - up
        if isinstance(av, Traced):  # time-varying speed: the SimPy path's per-job integrals
            tau, t_c = _trace_jobs(clock, chosen, r, t_d, t_to, slow)
        else:
            tau = whole_steps((t_to - t_d) * speed / slow)
            if clock.fixed_work is not None:
                cap = clock.fixed_work[chosen]
                tau = np.where(cap >= 0, np.minimum(tau, cap), tau)
            else:
                cap = np.array([clock.work_cap(int(c), r) for c in chosen], dtype=np.int64)
                tau = np.minimum(tau, cap)
            t_c = np.minimum(t_d + tau * slow / speed, t_to)
        t_u = np.minimum(t_c + up, close)
        started = tau > 0
        if states is None:
            failed = np.zeros(len(chosen), dtype=bool)
            t_fail = t_u
        else:
            t_fail = states.next[chosen]
            failed = started & (t_fail < t_u)
        done = started & ~failed
        n = len(chosen)
        cols = {
            "round": np.full(n, r, dtype=np.int64),
            "client": chosen.astype(np.int64),
            "status": np.where(failed, _FAILED, np.where(done, _COMPLETED, _DROPPED)).astype(np.int8),
            "steps": np.where(done, tau, 0).astype(np.int64),
            "start": np.full(n, t_open, dtype=np.float64),
            "end": np.where(failed, t_fail, np.where(done, t_u, close)).astype(np.float64),
            "key": np.full(n, r, dtype=np.int64),
            "version": np.full(n, r, dtype=np.int64),
            "staleness": np.zeros(n, dtype=np.int64),
            "weight": np.asarray(weights, dtype=np.float64),
            "count": np.asarray(counts, dtype=np.int64),
            "download": np.where(done | (failed & (t_d < t_fail)), down, 0.0),
            "upload": np.where(done, up, 0.0),
            "resumed": np.zeros(n, dtype=np.int64),
            "cut": np.zeros(n, dtype=np.int64),
        }
        if rule.clients_per_round is None and len(online) < m:
            cols = _with_offline_rows(cols, online, m, r, t_open)
        assert tuple(cols) == JOB_COLUMNS
        yield RoundTable(r, t_open, close, r + 1, cols, len(online))


def _trace_jobs(clock, chosen, r, t_d, t_to, slow) -> tuple[np.ndarray, np.ndarray]:
    """Window jobs of traced clients: (tau, compute end), as ``Simulation._start`` computes them."""
    tau = np.zeros(len(chosen), dtype=np.int64)
    t_c = np.zeros(len(chosen))
    slows = np.broadcast_to(slow, (len(chosen),))
    for i, c in enumerate(chosen.tolist()):
        rate, s = clock.rates[c], float(slows[i])
        fit = rate.fit(float(t_d[i]), float(t_to[i]), s)
        cap = clock.work_cap(c, r)
        tau[i] = fit if cap is None else min(fit, cap)
        t_c[i] = min(rate.finish(float(t_d[i]), int(tau[i]), s), float(t_to[i]))
    return tau, t_c


def _with_offline_rows(cols: dict, online: np.ndarray, m: int, r: int, t_open: float) -> dict:
    """Full participation: add an ``offline`` row for every client offline at the open, sorted by client."""
    off = np.setdiff1d(np.arange(m, dtype=np.int64), online)
    k = len(off)
    extra = {name: np.zeros(k, dtype=col.dtype) for name, col in cols.items()}
    extra.update(round=np.full(k, r), client=off, status=np.full(k, _OFFLINE), start=np.full(k, t_open),
                 end=np.full(k, t_open), key=np.full(k, r), version=np.full(k, r))
    order = np.argsort(np.concatenate([cols["client"], off]), kind="stable")
    return {name: np.concatenate([cols[name], extra[name].astype(cols[name].dtype)])[order] for name in cols}
