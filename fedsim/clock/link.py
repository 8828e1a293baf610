"""The server's link: one direction of capacity C shared by the transfers in flight.

Processor sharing with caps (max-min fairness, water-filling; Bertsekas and Gallager, *Data
Networks*, 2nd ed., 1992, section 6.5.2). Transfer i, active on the link, moves at

    r_i = min(c_i, L),                                                        (1)

where c_i is its client's own bandwidth and the level L solves

    sum_i min(c_i, L) = C,   L = inf when sum_i c_i <= C,                     (2)

so what a slow client cannot use is given to the others and sum_i r_i = min(C, sum_i c_i). With
the caps sorted, c_(1) <= ... <= c_(n), and S_k = c_(1) + ... + c_(k) (S_0 = 0), L is found
without a loop: g_k = S_k + (n - k) c_(k+1) (k = 0..n-1) is nondecreasing with g_(n-1) = sum c;
for the first k with g_k >= C,

    L = (C - S_k) / (n - k),   c_(k) < L <= c_(k+1).                          (3)

Rates are recomputed whenever a transfer starts, finishes or is removed; between these events they
are constant. Units are the caller's (bits and bits/s, or kbit and kbit/s); latency is the
caller's too (it adds it per transfer). C = inf is no link: r_i = c_i.

Floating-point rules, which make every clock path that drives a :class:`SharedLink` agree exactly:

- Between events a transfer's remaining bits fall linearly. Each transfer holds (t0, q, r, f):
  at time t0 it had q bits left and moved at r since, and its predicted finish is
  f = t0 + q / r. These change only when the transfer's rate changes: then, at time t,
  q <- max(q - r (t - t0), 0), t0 <- t, r <- r_new, f <- t + q / r_new. A transfer whose rate
  an event leaves unchanged keeps its prediction bit for bit (so with C = inf, or a client capped
  by its own bandwidth throughout, f = start + bits / c exactly).
- A transfer finishes at its prediction by definition: :meth:`SharedLink.pop_finished` at
  t = min f finishes exactly the transfers with f == t (two transfers predicted at the same float
  finish together), and an event at t leaves a transfer with f <= t at f (it is never left with
  a residue of 1e-12 bits to move at a new rate).
- Ties with ``add`` / ``remove`` at the same instant are the caller's order: whatever it calls
  first happens first. :func:`sweep` finishes first, then removes, then adds.

Each event costs O(n) numpy work on the n transfers in flight (kept sorted by cap, so (3) needs
prefix sums and a binary search, not a sort), and no Python loop over transfers.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fair_rates", "SharedLink", "sweep"]

INF = math.inf
_CAP, _RATE, _REM, _T0, _FIN = range(5)  # rows of SharedLink._f


def _check_capacity(capacity) -> float:
    c = float(capacity)
    if not c > 0:  # also NaN
        raise ValueError(f"link capacity must be > 0 (inf for no link), got {capacity!r}")
    return c


def _level(sorted_caps: np.ndarray, capacity: float) -> float:
    """The level L of (2)-(3) for caps sorted ascending."""
    n = sorted_caps.size
    if n == 0 or capacity == INF:
        return INF
    below = np.zeros(n)
    np.cumsum(sorted_caps[:-1], out=below[1:])  # S_k, k = 0..n-1
    g = below + np.arange(n, 0, -1) * sorted_caps  # g_k = S_k + (n - k) c_(k+1)
    k = int(np.searchsorted(g, capacity, side="left"))
    if k == n:
        return INF
    return float((capacity - below[k]) / (n - k))


def fair_rates(caps: np.ndarray, capacity: float) -> np.ndarray:
    """Max-min fair rates (1): r_i = min(c_i, L), L solving sum_i min(c_i, L) = capacity.

    L = inf (r = caps) when sum c <= capacity. Vectorised (a sort and prefix sums, (3)).

    Args:
        caps: each transfer's own bandwidth c_i > 0 (inf allowed when capacity is finite).
        capacity: the link's capacity C > 0 (inf: no link).

    Returns:
        The rates, in the order of ``caps`` (float64).
    """
    capacity = _check_capacity(capacity)
    c = np.asarray(caps, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError(f"caps must be one-dimensional, got shape {c.shape}")
    if c.size and not (c > 0).all():
        raise ValueError("every cap must be > 0")
    if capacity == INF:
        return c.copy()
    return np.minimum(c, _level(np.sort(c), capacity))


class SharedLink:
    """The transfers in flight on one direction of a link of capacity C, by processor sharing.

    Event-driven: the caller advances time by its own events (``add``, ``remove``) and by the
    link's (``next_finish`` then ``pop_finished``); each call at time t needs
    ``now <= t <= next_finish()``. See the module docstring for the rules.

    Args:
        capacity: C > 0 in the caller's units (inf: no link, each transfer at its own cap).
    """

    def __init__(self, capacity: float):
        self.capacity = _check_capacity(capacity)
        self.now = 0.0
        self._n = 0
        self._f = np.empty((5, 16))  # rows _CAP.._FIN, columns sorted by cap
        self._key = np.empty(16, dtype=np.int64)
        self._fmin = INF

    def active(self) -> int:
        """The number of transfers in flight."""
        return self._n

    def next_finish(self) -> float:
        """The earliest predicted finish (inf when idle)."""
        return self._fmin

    def add(self, key: int, t: float, bits: float, cap: float) -> None:
        """Start transfer ``key`` of ``bits`` > 0 at time t at most ``cap`` > 0 (its client's own bandwidth)."""
        self.add_many(np.array([key], dtype=np.int64), t, np.array([bits], dtype=np.float64),
                      np.array([cap], dtype=np.float64))

    def add_many(self, keys, t: float, bits, caps) -> None:
        """Start several transfers at time t in one rate change (what ``add`` one by one gives,
        with the intermediate rate changes, which last no time, skipped)."""
        self._advance(t)
        keys = np.asarray(keys, dtype=np.int64).ravel()
        bits = np.asarray(bits, dtype=np.float64).ravel()
        caps = np.asarray(caps, dtype=np.float64).ravel()
        m = keys.size
        if bits.size != m or caps.size != m:
            raise ValueError("keys, bits and caps must have the same length")
        if m == 0:
            return
        if not ((bits > 0) & (bits < INF)).all():
            raise ValueError("bits must be finite and > 0 (a transfer of 0 bits is the caller's)")
        if not (caps > 0).all():
            raise ValueError("caps must be > 0")
        if self.capacity == INF and not (caps < INF).all():
            raise ValueError("a transfer with no cap on a link with no capacity takes no time (the caller's)")
        n = self._n
        if np.unique(keys).size != m or np.isin(keys, self._key[:n]).any():
            raise ValueError("a key is already on the link")
        order = np.argsort(caps, kind="stable")
        new = np.empty((5, m))
        new[_CAP] = caps[order]
        new[_RATE] = 0.0  # so the first rate change sets q = bits, t0 = t
        new[_REM] = bits[order]
        new[_T0] = t
        new[_FIN] = INF
        at = np.searchsorted(self._f[_CAP, :n], new[_CAP], side="right")
        f = np.insert(self._f[:, :n], at, new, axis=1)
        self._key = np.insert(self._key[:n], at, keys[order])
        self._f, self._n = f, n + m
        self._rerate(t)

    def remove(self, key: int, t: float) -> None:
        """Cancel transfer ``key`` at time t (an outage, the round closed); no-op if absent."""
        self.remove_many(np.array([key], dtype=np.int64), t)

    def remove_many(self, keys, t: float) -> None:
        """Cancel several transfers at time t in one rate change; absent keys are ignored."""
        self._advance(t)
        hit = np.isin(self._key[: self._n], np.asarray(keys, dtype=np.int64).ravel())
        if hit.any():
            self._drop(~hit, t)

    def pop_finished(self, t: float) -> list[int]:
        """Advance to t (<= ``next_finish()``) and return the keys finishing at t, in ascending
        order; they leave the link. Empty when t < ``next_finish()``."""
        self._advance(t)
        if t < self._fmin:
            return []
        done = self._f[_FIN, : self._n] == t
        keys = np.sort(self._key[: self._n][done]).tolist()
        self._drop(~done, t)
        return keys

    # -- internals -------------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        if not (self.now <= t <= self._fmin) or t == INF:
            if not t < INF:
                raise ValueError(f"event time must be finite, got {t!r}")
            if t < self.now:
                raise ValueError(f"event at t={t!r} before the link's time {self.now!r}")
            raise ValueError(f"event at t={t!r} after the predicted finish {self._fmin!r}: pop_finished first")
        self.now = float(t)

    def _drop(self, keep: np.ndarray, t: float) -> None:
        self._f = self._f[:, : self._n][:, keep]
        self._key = self._key[: self._n][keep]
        self._n = self._key.size
        self._rerate(t)

    def _rerate(self, t: float) -> None:
        """Recompute the rates at time t; transfers whose rate changes get a new prediction."""
        n = self._n
        if n == 0:
            self._fmin = INF
            return
        f = self._f
        cap, rate, fin = f[_CAP, :n], f[_RATE, :n], f[_FIN, :n]
        new = np.minimum(cap, _level(cap, self.capacity))
        idx = np.flatnonzero((new != rate) & (fin > t))
        if idx.size:
            r, r_new = rate[idx], new[idx]
            q = f[_REM, idx] - r * (t - f[_T0, idx])
            np.maximum(q, 0.0, out=q)
            f[_REM, idx] = q
            f[_T0, idx] = t
            f[_RATE, idx] = r_new
            f[_FIN, idx] = t + q / r_new
        self._fmin = float(fin.min())


def sweep(starts, bits, caps, capacity: float, leave=None) -> np.ndarray:
    """Finish times of transfers sharing one link (the per-round tool for synchronous rounds).

    Transfer i starts at ``starts[i]`` with ``bits[i]`` at most ``caps[i]`` and leaves
    (cancelled) at ``leave[i]`` if it has not finished by then. Events run in time order on a
    :class:`SharedLink`; at one instant, finishes come first, then leaves, then starts (those
    starting together are added at once, in index order). So a transfer finishing exactly when
    it would leave finishes.

    Args:
        starts: start times (finite).
        bits: sizes >= 0; a transfer of 0 bits finishes at its start without using the link.
        caps: each client's own bandwidth (> 0).
        capacity: the link's capacity C > 0 (inf: no link).
        leave: optional leave times (inf: never); ``leave[i] <= starts[i]`` never starts.

    Returns:
        Each transfer's finish time, inf where it left first (float64).
    """
    starts = np.asarray(starts, dtype=np.float64).ravel()
    bits = np.asarray(bits, dtype=np.float64).ravel()
    caps = np.asarray(caps, dtype=np.float64).ravel()
    n = starts.size
    leave = np.full(n, INF) if leave is None else np.asarray(leave, dtype=np.float64).ravel()
    if not (bits.size == caps.size == leave.size == n):
        raise ValueError("starts, bits, caps and leave must have the same length")
    if not np.isfinite(starts).all():
        raise ValueError("starts must be finite")
    if not ((bits >= 0) & (bits < INF)).all():
        raise ValueError("bits must be finite and >= 0")
    if not (caps > 0).all():
        raise ValueError("caps must be > 0")
    if np.isnan(leave).any():
        raise ValueError("leave must not be NaN")
    link = SharedLink(capacity)
    out = np.full(n, INF)
    ran = leave > starts
    now = ran & (bits == 0)
    out[now] = starts[now]
    on = np.flatnonzero(ran & (bits > 0))
    s_order = on[np.argsort(starts[on], kind="stable")]
    s_time = starts[s_order]
    lv = on[np.isfinite(leave[on])]
    l_order = lv[np.argsort(leave[lv], kind="stable")]
    l_time = leave[l_order]
    i = j = 0
    ns, nl = s_order.size, l_order.size
    while True:
        ts = s_time[i] if i < ns else INF
        tl = l_time[j] if j < nl else INF
        tf = link.next_finish()
        t = min(ts, tl, tf)
        if t == INF:
            break
        if tf == t:
            out[link.pop_finished(t)] = t
        if tl == t:
            j1 = int(np.searchsorted(l_time, t, side="right"))
            link.remove_many(l_order[j:j1], t)
            j = j1
        if ts == t:
            i1 = int(np.searchsorted(s_time, t, side="right"))
            k = s_order[i:i1]
            link.add_many(k, t, bits[k], caps[k])
            i = i1
    return out
