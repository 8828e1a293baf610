"""How the ``async`` server picks the clients that fill its free slots.

Both rules pick ``k = min(free, candidates)`` clients uniformly without replacement among the
candidates (online, not in flight) and return them sorted; they differ only in the random numbers:

* ``permutation`` (populations below :data:`CHECKIN_MIN_CLIENTS`): the first k of one permutation
  of the sorted candidates, from stream ``("select", seq)``. It needs the whole candidate list,
  so each pick costs O(population).
* ``checkin`` (populations of at least :data:`CHECKIN_MIN_CLIENTS`): clients "check in" at random:
  draw i is client floor(u_i m) (at most m - 1), u_i the keyed uniform u(seed, "checkin", seq, i)
  (:mod:`fedsim.clock.keyed`); the server accepts, in draw order, each candidate not accepted
  yet, until it has ``free``. Accepting uniform draws that fall on the candidates is uniform
  sampling without replacement among them, so the two rules have the same distribution; this
  one costs O(free / share of candidates). After :func:`checkin_draws` draws without filling
  every slot the server lists the candidates left and takes them all, or, when there are more
  than it needs, the first ones of a permutation of them from stream ``("select", seq)``.

``seq`` is the sequence number of the first job the pick starts.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fedsim.rng import stream

from .keyed import keyed_uniform

__all__ = ["CHECKIN_MIN_CLIENTS", "checkin_draws", "checkin_pick", "permutation_pick"]

#: Populations at least this large pick async clients by keyed check-in draws.
CHECKIN_MIN_CLIENTS = 1 << 16


def checkin_draws(free: int) -> int:
    """Check-in draws before the server lists the remaining candidates: 4 free + 64."""
    return 4 * free + 64


def permutation_pick(candidates: np.ndarray, free: int, seed: int, seq: int) -> np.ndarray:
    """The first min(free, len) of a permutation of ``candidates`` (sorted) from ``("select", seq)``, sorted."""
    k = min(free, len(candidates))
    return np.sort(candidates[stream(seed, "select", seq).permutation(len(candidates))[:k]])


def checkin_pick(m: int, free: int, seed: int, seq: int, is_candidate: Callable[[np.ndarray], np.ndarray],
                 all_candidates: Callable[[], np.ndarray]) -> np.ndarray:
    """The ``checkin`` rule (module docstring). ``is_candidate(clients)``: a bool per entry (the
    clients may repeat); ``all_candidates()``: every candidate, sorted (called only when the draws
    did not fill the slots)."""
    accepted: list[int] = []
    seen: set[int] = set()
    limit, i = checkin_draws(free), 0
    block = 2 * free + 8
    while len(accepted) < free and i < limit:
        hi = min(i + block, limit)
        u = keyed_uniform(seed, "checkin", seq, np.arange(i, hi, dtype=np.int64))
        clients = np.minimum((u * m).astype(np.int64), m - 1)
        ok = is_candidate(clients)
        for c in clients[ok].tolist():
            if c not in seen:
                seen.add(c)
                accepted.append(c)
                if len(accepted) == free:
                    break
        i = hi
        block *= 2
    if len(accepted) < free:
        rest = all_candidates()
        if seen:
            rest = rest[~np.isin(rest, np.fromiter(seen, dtype=np.int64))]
        need = free - len(accepted)
        if len(rest) > need:
            rest = rest[stream(seed, "select", seq).permutation(len(rest))[:need]]
        accepted.extend(rest.tolist())
    return np.sort(np.asarray(accepted, dtype=np.int64))
