"""Counter-based keyed uniforms: ``u(seed, purpose, client, k)`` for whole arrays of clients and
counters at once, with no generator object per client.

Each value is a pure function of its key: the key words are folded through SplitMix64's
finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014)
and the top 53 bits give ``(x + 0.5) / 2**53``, strictly inside (0, 1). Drawing the k-th value of
one client, or of a million clients, gives the same numbers, so a vectorised path and a
per-client SimPy process agree exactly.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["keyed_uniform", "keyed_exponential"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK = 0xFFFFFFFFFFFFFFFF


def _mix(z: np.ndarray, t: np.ndarray) -> None:
    """SplitMix64's finalizer applied to ``z`` in place (``t``: scratch of z's shape)."""
    z += _GOLDEN
    np.right_shift(z, np.uint64(30), out=t)
    z ^= t
    z *= _M1
    np.right_shift(z, np.uint64(27), out=t)
    z ^= t
    z *= _M2
    np.right_shift(z, np.uint64(31), out=t)
    z ^= t


def _word(seed: int, purpose: str) -> np.ndarray:
    """The key's head word: mix(mix(seed) ^ crc32(purpose)), as a 1-element uint64 array."""
    head, t = np.array([int(seed) & _MASK], dtype=np.uint64), np.empty(1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        _mix(head, t)
        head ^= np.uint64(zlib.crc32(purpose.encode("utf-8")))
        _mix(head, t)
    return head


def keyed_uniform(seed: int, purpose: str, client, k) -> np.ndarray:
    """Uniforms in (0, 1), one per element of the broadcast of ``client`` and ``k`` (integers):
    ``(mix(mix(head ^ client) ^ k) >> 11 + 0.5) / 2**53``, computed in place."""
    head = _word(seed, purpose)
    c = np.asarray(client, dtype=np.int64).astype(np.uint64)
    j = np.asarray(k, dtype=np.int64).astype(np.uint64)
    h = np.bitwise_xor(head, c, out=np.empty(np.broadcast_shapes(head.shape, c.shape, j.shape), dtype=np.uint64))
    t = np.empty_like(h)
    with np.errstate(over="ignore"):
        _mix(h, t)
        h ^= j
        _mix(h, t)
    h >>= np.uint64(11)
    u = h.astype(np.float64)
    u += 0.5
    u /= 2.0**53
    return u


def keyed_exponential(mean, seed: int, purpose: str, client, k) -> np.ndarray:
    """``-mean * log(u)`` with u = :func:`keyed_uniform`: exponential draws, always > 0."""
    u = keyed_uniform(seed, purpose, client, k)
    np.log(u, out=u)
    neg = -np.asarray(mean, dtype=np.float64)
    if np.broadcast_shapes(u.shape, neg.shape) != u.shape:  # a mean of more dimensions than the keys
        return neg * u
    u *= neg  # x * y == y * x exactly
    return u
