"""Top-k sparsification: the k entries of largest magnitude (``{name: topk, ratio: r}``).

    k = max(1, ceil(r n))                     (r as written, exactly: fedsim.compression.base.kept)
    C(v)_j = v_j if j is among the k largest |v_j|, else 0
    ties at the k-th magnitude: the lowest indices are kept; NaN counts as the largest magnitude
    payload: k b + k ib bytes                 (k values of b bytes, k indices of ib = 4 bytes,
                                              8 when n > 2^31)

Biased, a contraction: ||C(v) - v||^2 <= (1 - k/n) ||v||^2 (Stich et al. 2018), the compressor
error feedback was made for. With error feedback, applied + residual = u exactly (each entry is
kept or left whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from .base import Compressor, index_bytes, kept
from .section import CompressionSection

__all__ = ["TopK", "TopKSection", "top_mask"]


@dataclass(frozen=True)
class TopK(Compressor):
    """Keep the k = max(1, ceil(ratio n)) largest-magnitude entries of each row."""

    ratio: float

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        k = kept(self.ratio, num_params)
        return float(k * dtype_bytes + k * index_bytes(num_params))

    def compress_rows(self, rows, gens):
        import torch

        mask = top_mask(rows.abs(), kept(self.ratio, rows.shape[1]))
        return torch.where(mask, rows, torch.zeros((), dtype=rows.dtype, device=rows.device))


def top_mask(mag, k: int):
    """Boolean ``(C, n)``: the k largest entries of each row of ``mag`` (NaN as +inf), ties broken
    towards the lowest index. One ``torch.topk`` finds each row's k-th value t; every entry > t is
    kept, and of the entries == t the first k - #(> t) in index order."""
    import torch

    n = mag.shape[1]
    if k >= n:
        return torch.ones_like(mag, dtype=torch.bool)
    mag = torch.nan_to_num(mag, nan=float("inf"), posinf=float("inf"))
    t = torch.topk(mag, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    above = mag > t
    room = k - above.sum(dim=1, keepdim=True)
    tied = mag == t
    return above | (tied & (torch.cumsum(tied, dim=1) <= room))


class TopKSection(CompressionSection):
    """``{name: topk, ratio: r}``: keep the max(1, ceil(r n)) largest-magnitude entries, r in (0, 1]."""

    name: Literal["topk"] = "topk"
    ratio: float = Field(gt=0, le=1)

    def compressor(self) -> TopK:
        return TopK(self.ratio)
