"""Hand-made picks and observations for the selection rules' tests (no clock involved)."""

from __future__ import annotations

import numpy as np

from fedsim.selection import Observations, Request, check_picked

NAN = float("nan")


def request(key: int, online, k: int | None, m: int, p=None, time: float = 0.0) -> Request:
    """A sync pick of ``k`` among ``online`` (client ids) in a population of ``m``."""
    online = np.sort(np.asarray(online, dtype=np.int64))
    p = np.full(m, 1.0 / m) if p is None else np.asarray(p, dtype=np.float64)
    return Request(key=key, time=time, k=k, num_clients=m, p=p, _online=lambda: online)


def observations(round: int, time: float, rows) -> Observations:
    """One server update from rows ``(client, status, download, compute, upload, loss, loss_sq,
    samples)``; steps are 1 for completed jobs, 0 otherwise; missing trailing fields are NaN/0."""
    full = [tuple(r) + (NAN,) * max(0, 7 - len(r)) + (0,) * (len(r) < 8) for r in rows]
    col = list(zip(*full)) if full else [()] * 8
    status = np.array([str(s) for s in col[1]], dtype="<U9")
    f = lambda i: np.array(col[i], dtype=np.float64)  # noqa: E731
    return Observations(
        round=round, time=float(time), client=np.array(col[0], dtype=np.int64), key=np.full(len(full), round, dtype=np.int64),
        status=status, steps=(status == "completed").astype(np.int64), download=f(2), compute=f(3), upload=f(4),
        loss=f(5), loss_sq=f(6), samples=np.array(col[7], dtype=np.int64),
    )


def done(client: int, duration: float, loss: float = NAN, loss_sq: float = NAN, samples: int = 0):
    """A completed job whose download + compute + upload is ``duration`` (split 0 / duration / 0)."""
    return (client, "completed", 0.0, float(duration), 0.0, loss, loss_sq, samples)


def run(rule, m: int, rounds, seed: int = 0, p=None):
    """Drive ``rule`` through ``rounds``: a list of ``(request_kwargs, rows_or_None, close)``; returns
    the picks (each checked with check_picked) and the final state."""
    state = rule.init(m, np.full(m, 1.0 / m) if p is None else np.asarray(p, dtype=np.float64), seed)
    picks = []
    for r, (online, k, rows, close) in enumerate(rounds):
        req = request(r, online, k, m, p)
        state, picked = rule.select(state, req)
        picks.append(check_picked(picked, req, type(rule).__name__).clients.tolist())
        if rows is not None:
            state = rule.observe(state, observations(r, close, rows))
    return picks, state


def uniform_pick(online, q, scheme: str, p, seed: int, key: int, weights: str = "normalized"):
    """(clients, counts, weights) of the clock's own rules (``uniform`` with ``weights``, or
    ``weighted``) picking ``q`` of ``online`` for round ``key``."""
    from fedsim.clock.selection import Uniform, Weighted

    rule = Uniform(weights) if scheme == "uniform" else Weighted()
    online = np.asarray(online, dtype=np.int64)
    picked = rule.select(seed, request(key, online, q, len(p), p))[1]
    return picked.clients, picked.counts, picked.weights
