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

        return torch.where(top_mask(rows.abs(), kept(self.ratio, rows.shape[1])), rows, 0.0)


def top_mask(mag, k: int):
    """Boolean ``(C, n)``: the k largest entries of each row of ``mag`` (NaN counts as +inf), ties
    at the k-th value broken towards the lowest index.

    One ``torch.topk`` of k + 1 gives each row's k-th and (k+1)-th values; where the k-th is
    strictly larger (no tie across the cut, no NaN), the mask is mag >= the k-th value. Other rows
    keep every entry above the k-th value and, of those equal to it, the first in index order.
    """
    import torch

    c, n = mag.shape
    if k >= n:
        return torch.ones_like(mag, dtype=torch.bool)
    top = torch.topk(mag, k + 1, dim=1, sorted=False).values  # NaN ranks above every number
    two = torch.topk(top, 2, dim=1, largest=False).values  # the (k+1)-th and the k-th largest
    mask = mag >= two[:, 1:]
    tied = ~(two[:, 1] > two[:, 0]) | torch.isnan(top).any(dim=1)
    if bool(tied.any()):
        rows = tied.nonzero().flatten()
        m = torch.nan_to_num(mag[rows], nan=float("inf"), posinf=float("inf"))
        t = torch.topk(m, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
        above, at = m > t, m == t
        mask[rows] = above | (at & (torch.cumsum(at, dim=1) <= k - above.sum(dim=1, keepdim=True)))
    return mask


class TopKSection(CompressionSection):
    """``{name: topk, ratio: r}``: keep the max(1, ceil(r n)) largest-magnitude entries, r in (0, 1]."""

    name: str = "topk"
    ratio: float = Field(gt=0, le=1)

    def compressor(self) -> TopK:
        return TopK(self.ratio)
