"""No compression: the update as it is (``algorithm.compression: {name: none}``).

    C(v) = v                      payload: n b bytes (n entries of b bytes: the raw update)
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Compressor
from .section import CompressionSection

__all__ = ["Identity", "NoneSection"]


@dataclass(frozen=True)
class Identity(Compressor):
    """The identity: the raw update, n b bytes."""

    lossless = True

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        return float(num_params * dtype_bytes)

    def compress_rows(self, rows, gens):
        return rows.clone()


class NoneSection(CompressionSection):
    """``{name: none}``: the raw update (with error feedback the residual stays 0)."""

    name: str = "none"

    def compressor(self) -> Identity:
        return Identity()
