"""Seeded random streams for data generation (no global RNG anywhere)."""

from __future__ import annotations

import zlib

import numpy as np


def purpose_id(purpose: str) -> int:
    """Stable 32-bit integer for a purpose label (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(purpose.encode("utf-8"))


def rng_for(seed: int, purpose: str, *extra: int) -> np.random.Generator:
    """Independent generator for ``(seed, purpose, *extra)``.

    Args:
        seed: Non-negative scenario seed.
        purpose: Label of what the stream is used for (e.g. ``"partition"``).
        *extra: Further non-negative integers (e.g. a client index).

    Returns:
        ``np.random.default_rng(SeedSequence([seed, purpose_id(purpose), *extra]))``.
    """
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(np.random.SeedSequence([int(seed), purpose_id(purpose), *map(int, extra)]))
