"""Half precision: each entry rounded to IEEE float16 (``algorithm.compression: {name: fp16}``).

    C(v)_j = fp16(v_j)            round to nearest, ties to even; |v_j| > 65504 becomes +-inf
    payload: 2 n bytes

With error feedback the residual u - fp16(u) is exact (u and fp16(u) are within a factor 2 of each
other, Sterbenz's lemma; entries that round to 0 leave u itself), as long as no entry overflows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Compressor
from .section import CompressionSection

__all__ = ["Half", "FP16Section"]


@dataclass(frozen=True)
class Half(Compressor):
    """Round every entry to float16 and back to the update's dtype."""

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        return float(2 * num_params)

    def compress_rows(self, rows, gens):
        import torch

        return rows.to(torch.float16, copy=True).to(rows.dtype)


class FP16Section(CompressionSection):
    """``{name: fp16}``: the update in half precision, 2 bytes an entry."""

    name: str = "fp16"

    def compressor(self) -> Half:
        return Half()
