"""Scaled sign compression (``{name: sign}``): one bit an entry and one scale, the mean magnitude.

    C(v)_j = (||v||_1 / n) sgn(v_j),  sgn(x) = +1 for x >= 0 (so 0 is sent as +), -1 otherwise
    payload: b + ceil(n / 8) bytes     (the scale at the update's dtype, n sign bits packed)

The scaled sign of EF-SignSGD (Karimireddy et al. 2019), a biased compressor meant for error
feedback; with it, applied + residual = u within one rounding per entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Compressor, packed_bytes
from .section import CompressionSection

__all__ = ["Sign", "SignSection"]


@dataclass(frozen=True)
class Sign(Compressor):
    """(||v||_1 / n) sgn(v) for each row v."""

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        return float(dtype_bytes + packed_bytes(num_params, 1))

    def compress_rows(self, rows, gens):
        import torch

        c, n = rows.shape
        # each row's sum on its own: the same whatever the cohort (a batched reduction may not be)
        l1 = torch.stack([torch.linalg.vector_norm(r, ord=1) for r in rows]).unsqueeze(1) if c else rows.new_zeros((0, 1))
        scale = l1 / n
        return torch.where(rows >= 0, scale, -scale)


class SignSection(CompressionSection):
    """``{name: sign}``: the scaled sign, 1 bit an entry."""

    name: str = "sign"

    def compressor(self) -> Sign:
        return Sign()
