"""QSGD stochastic quantisation with s levels (Alistarh et al. 2017, section 3.1): ``{name: qsgd, levels: s}``.

One norm per client update, over the whole flattened model (the paper's bucketing is not used):

    N = ||v||_2                       sent at the update's dtype (b bytes)
    r_j = s |v_j| / N,  l_j = floor(r_j)  (r_j capped at s against rounding)
    xi_j = (l_j + 1) / s with probability r_j - l_j, else l_j / s    (uniform u_j from the row's generator)
    Q(v)_j = N sign(v_j) xi_j          (Q(0) = 0)
    payload: b + ceil(n (ceil(log2(s + 1)) + 1) / 8) bytes           (a level in 0..s and a sign bit
                                                                      per entry, packed)

Unbiased, E[Q(v)] = v, with E||Q(v) - v||^2 <= min(n / s^2, sqrt(n) / s) ||v||^2 (Lemma 3.1).
With error feedback, applied + residual = u within one rounding per entry (u - Q(u) is rounded).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from .base import Compressor, packed_bytes
from .section import CompressionSection

__all__ = ["QSGD", "QSGDSection", "MAX_LEVELS"]

#: Most levels: a level then takes at most 16 bits, well inside float32's 24-bit significand.
MAX_LEVELS = 2**16 - 1


@dataclass(frozen=True)
class QSGD(Compressor):
    """Stochastic quantisation of each row to ``levels`` levels of its Euclidean norm."""

    levels: int

    random = True

    def bits(self) -> int:
        """Bits an entry takes: ceil(log2(s + 1)) for its level, 1 for its sign."""
        return int(self.levels).bit_length() + 1  # bit_length(s) = ceil(log2(s + 1)) for s >= 1

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        return float(dtype_bytes + packed_bytes(num_params, self.bits()))

    def compress_rows(self, rows, gens):
        import torch

        c, n = rows.shape
        if gens is None or len(gens) != c:
            raise ValueError(f"qsgd: needs one generator per row ({c}), got {0 if gens is None else len(gens)}")
        s = float(self.levels)
        # each row's norm on its own: the same whatever the cohort (a batched reduction may not be)
        norm = torch.stack([torch.linalg.vector_norm(r) for r in rows]).unsqueeze(1) if c else rows.new_zeros((0, 1))
        scale = torch.where(norm > 0, s / norm, 0.0)
        r = rows.abs().mul_(scale).clamp_(max=s)  # s |v_j| / N
        level = torch.floor(r)
        p = r.sub_(level)  # r_j - l_j, exactly
        u = torch.stack([torch.rand(n, generator=g, dtype=rows.dtype, device=rows.device) for g in gens]) if c else \
            torch.zeros_like(rows)
        level += u < p  # l_j + 1 with probability r_j - l_j
        return level.copysign_(rows).mul_(norm / s)


class QSGDSection(CompressionSection):
    """``{name: qsgd, levels: s}``: s >= 1 levels (s = 1: ternary {-N, 0, N})."""

    name: str = "qsgd"
    levels: int = Field(ge=1, le=MAX_LEVELS)

    def compressor(self) -> QSGD:
        return QSGD(self.levels)
