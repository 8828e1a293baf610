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


def _mix(z: np.ndarray) -> np.ndarray:
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _mix_into(z: np.ndarray, t: np.ndarray) -> None:
    """:func:`_mix` of ``z`` in place (``t``: scratch of z's shape): the same values, no temporaries."""
    z += _GOLDEN
    np.right_shift(z, np.uint64(30), out=t)
    z ^= t
    z *= _M1
    np.right_shift(z, np.uint64(27), out=t)
    z ^= t
    z *= _M2
    np.right_shift(z, np.uint64(31), out=t)
    z ^= t


def keyed_uniform(seed: int, purpose: str, client, k) -> np.ndarray:
    """Uniforms in (0, 1), one per element of the broadcast of ``client`` and ``k`` (integers)."""
    head = np.array([int(seed) & _MASK], dtype=np.uint64)
    head = _mix(_mix(head) ^ np.uint64(zlib.crc32(purpose.encode("utf-8"))))
    c = np.asarray(client, dtype=np.int64)
    j = np.asarray(k, dtype=np.int64)
    h = np.bitwise_xor(head, c.astype(np.uint64), dtype=np.uint64)
    if h.shape != np.broadcast_shapes(h.shape, j.shape):
        h = np.broadcast_to(h, np.broadcast_shapes(h.shape, j.shape)).copy()
    t = np.empty_like(h)
    with np.errstate(over="ignore"):
        _mix_into(h, t)
        h ^= j.astype(np.uint64)
        _mix_into(h, t)
    h >>= np.uint64(11)
    u = h.astype(np.float64)
    u += 0.5
    u /= 2.0**53
    return u


def keyed_exponential(mean, seed: int, purpose: str, client, k) -> np.ndarray:
    """``-mean * log(u)`` with u = :func:`keyed_uniform`: exponential draws, always > 0."""
    u = keyed_uniform(seed, purpose, client, k)
    neg = -np.asarray(mean, dtype=np.float64)
    if u.shape != np.broadcast_shapes(u.shape, neg.shape):
        return neg * np.log(u)
    np.log(u, out=u)
    u *= neg
    return u
