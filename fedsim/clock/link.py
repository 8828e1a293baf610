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
prefix sums and a binary search, not a sort), and no Python loop over transfers. A cap is held as
min(c_i, C), which changes no rate (L <= C), so a client with no bandwidth limit of its own
(c_i = inf) is limited by the link alone.
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
    """The level L of (2)-(3) for finite caps sorted ascending."""
    n = sorted_caps.size
    if n == 0 or capacity == INF:
        return INF
    upto = np.cumsum(sorted_caps)  # S_(k+1), k = 0..n-1
    g = np.arange(n - 1, -1, -1, dtype=np.float64)
    g *= sorted_caps
    g += upto  # S_(k+1) + (n - k - 1) c_(k+1) = g_k
    k = int(np.searchsorted(g, capacity, side="left"))
    if k == n:
        return INF
    return (capacity - (float(upto[k - 1]) if k else 0.0)) / (n - k)


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
    c = np.minimum(c, capacity)  # min(c, L) = min(min(c, C), L) as L <= C; no inf cap in (3)
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
        self.now = -INF  # no event yet: the first may come at any finite time
        self._n = 0
        self._f = np.empty((5, 16))  # rows _CAP.._FIN; the first _n columns, sorted by cap, are in flight
        self._key = np.empty(16, dtype=np.int64)
        self._fmin = INF

    def active(self) -> int:
        """The number of transfers in flight."""
        return self._n

    def next_finish(self) -> float:
        """The earliest predicted finish (inf when idle)."""
        return self._fmin

    def add(self, key: int, t: float, bits: float, cap: float) -> None:
        """Start transfer ``key`` of ``bits`` > 0 at time t, at most ``cap`` > 0 (its client's own
        bandwidth)."""
        self._advance(t)
        bits, cap = float(bits), float(cap)
        self._check(bits > 0 and bits < INF, cap > 0, cap < INF)
        cap = min(cap, self.capacity)  # min(c, L) = min(min(c, C), L) as L <= C
        n = self._n
        if (self._key[:n] == key).any():
            raise ValueError(f"key {key!r} is already on the link")
        self._reserve(1)
        f, k = self._f, self._key
        p = int(np.searchsorted(f[_CAP, :n], cap, side="right"))
        f[:, p + 1 : n + 1] = f[:, p:n]
        k[p + 1 : n + 1] = k[p:n]
        f[:, p] = (cap, 0.0, bits, t, INF)  # rate 0: the first rate change sets q = bits, t0 = t
        k[p] = key
        self._n = n + 1
        self._rerate(t)

    def add_many(self, keys, t: float, bits, caps) -> None:
        """Start several transfers at time t in one rate change.

        The same as ``add`` one by one in index order (the intermediate rate changes last no time
        and leave each remaining q as it was at t), except that a transfer whose rate the whole
        batch leaves unchanged keeps its prediction, where one by one it would be recomputed.
        """
        self._advance(t)
        keys = np.asarray(keys, dtype=np.int64).ravel()
        bits = np.asarray(bits, dtype=np.float64).ravel()
        caps = np.asarray(caps, dtype=np.float64).ravel()
        m = keys.size
        if bits.size != m or caps.size != m:
            raise ValueError("keys, bits and caps must have the same length")
        if m == 0:
            return
        self._check(((bits > 0) & (bits < INF)).all(), (caps > 0).all(), (caps < INF).all())
        n = self._n
        if np.unique(keys).size != m or np.isin(keys, self._key[:n]).any():
            raise ValueError("a key is already on the link (or given twice)")
        caps = np.minimum(caps, self.capacity)
        order = np.argsort(caps, kind="stable")
        new = np.empty((5, m))
        new[_CAP] = caps[order]
        new[_RATE] = 0.0
        new[_REM] = bits[order]
        new[_T0] = t
        new[_FIN] = INF
        at = np.searchsorted(self._f[_CAP, :n], new[_CAP], side="right")
        merged = np.insert(self._f[:, :n], at, new, axis=1)
        merged_keys = np.insert(self._key[:n], at, keys[order])
        self._reserve(m)
        self._f[:, : n + m] = merged
        self._key[: n + m] = merged_keys
        self._n = n + m
        self._rerate(t)

    def remove(self, key: int, t: float) -> None:
        """Cancel transfer ``key`` at time t (an outage, the round closed); no-op if absent."""
        self._advance(t)
        at = np.flatnonzero(self._key[: self._n] == key)
        if at.size:
            self._drop(at, t)

    def remove_many(self, keys, t: float) -> None:
        """Cancel several transfers at time t in one rate change; absent keys are ignored."""
        self._advance(t)
        at = np.flatnonzero(np.isin(self._key[: self._n], np.asarray(keys, dtype=np.int64).ravel()))
        if at.size:
            self._drop(at, t)

    def pop_finished(self, t: float) -> list[int]:
        """Advance to t (<= ``next_finish()``) and return the keys finishing at t, in ascending
        order; they leave the link. Empty when t < ``next_finish()``."""
        self._advance(t)
        if t < self._fmin:
            return []
        at = np.flatnonzero(self._f[_FIN, : self._n] == t)
        keys = np.sort(self._key[at]).tolist()
        self._drop(at, t)
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

    def _check(self, bits_ok, caps_ok, caps_finite) -> None:
        if not bits_ok:
            raise ValueError("bits must be finite and > 0 (a transfer of 0 bits is the caller's)")
        if not caps_ok:
            raise ValueError("caps must be > 0")
        if self.capacity == INF and not caps_finite:
            raise ValueError("a transfer with no cap on a link with no capacity takes no time (the caller's)")

    def _reserve(self, m: int) -> None:
        cols = self._key.size
        if self._n + m > cols:
            cols = max(2 * cols, self._n + m)
            f, k = np.empty((5, cols)), np.empty(cols, dtype=np.int64)
            f[:, : self._n] = self._f[:, : self._n]
            k[: self._n] = self._key[: self._n]
            self._f, self._key = f, k

    def _drop(self, at: np.ndarray, t: float) -> None:
        """Take the columns ``at`` (ascending) off the link at time t."""
        n, f, k = self._n, self._f, self._key
        if at.size == 1:
            i = int(at[0])
            f[:, i : n - 1] = f[:, i + 1 : n]
            k[i : n - 1] = k[i + 1 : n]
        else:
            keep = np.ones(n, dtype=bool)
            keep[at] = False
            f[:, : n - at.size] = f[:, :n][:, keep]
            k[: n - at.size] = k[:n][keep]
        self._n = n - at.size
        self._rerate(t)

    def _rerate(self, t: float) -> None:
        """Recompute the rates at time t; transfers whose rate changes get a new prediction."""
        n = self._n
        if n == 0:
            self._fmin = INF
            return
        cap, rate, rem, t0, fin = self._f[:, :n]
        new = cap if self.capacity == INF else np.minimum(cap, _level(cap, self.capacity))
        change = new != rate
        change &= fin > t  # a transfer predicted at t finishes at t
        q = t - t0
        q *= rate
        np.subtract(rem, q, out=q)
        np.maximum(q, 0.0, out=q)
        np.copyto(rem, q, where=change)
        np.copyto(t0, t, where=change)
        np.copyto(rate, new, where=change)
        q /= new
        q += t
        np.copyto(fin, q, where=change)
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
