"""Random-k sparsification: k entries drawn uniformly without replacement (``{name: randk, ratio: r}``).

    k = max(1, ceil(r n))                      (as top-k)
    S = k distinct indices, uniform over the n-choose-k subsets (``torch.randperm`` of the row's
        generator, its first k)
    scaled (default without error feedback):  C(v)_j = (n / k) v_j for j in S, else 0
                                              unbiased: E[C(v)] = v (Wangni et al. 2018)
    unscaled (default with error feedback):   C(v)_j = v_j for j in S, else 0
                                              a contraction, E||C(v) - v||^2 = (1 - k/n) ||v||^2
                                              (Stich et al. 2018, the rand_k of sparsified SGD
                                              with memory)
    payload: k b + k ib bytes                  (as top-k: values and indices)

``scaled`` may be set either way. Unscaled with error feedback: applied + residual = u exactly;
scaled: within one rounding per entry (the n / k product). The draw of each client's S comes from
its own generator keyed (seed, client, job key), so it does not depend on the cohort.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, model_validator

from .base import Compressor, index_bytes, kept
from .section import CompressionSection

__all__ = ["RandK", "RandKSection"]


@dataclass(frozen=True)
class RandK(Compressor):
    """Keep k = max(1, ceil(ratio n)) uniformly drawn entries of each row, times n / k if ``scaled``."""

    ratio: float
    scaled: bool = True

    random = True

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        k = kept(self.ratio, num_params)
        return float(k * dtype_bytes + k * index_bytes(num_params))

    def compress_rows(self, rows, gens):
        import torch

        c, n = rows.shape
        k = kept(self.ratio, n)
        if gens is None or len(gens) != c:
            raise ValueError(f"randk: needs one generator per row ({c}), got {0 if gens is None else len(gens)}")
        idx = torch.stack([torch.randperm(n, generator=g, device=rows.device)[:k] for g in gens]) if c else \
            torch.zeros((0, k), dtype=torch.long, device=rows.device)
        mask = torch.zeros_like(rows, dtype=torch.bool).scatter_(1, idx, True)
        vals = rows * (n / k) if self.scaled and k < n else rows
        return torch.where(mask, vals, 0.0)


class RandKSection(CompressionSection):
    """``{name: randk, ratio: r, scaled: ...}``: k = max(1, ceil(r n)) random entries; scaled by
    n / k unless ``scaled: false`` (default: scaled without error feedback, unscaled with it)."""

    name: str = "randk"
    ratio: float = Field(gt=0, le=1)
    scaled: bool | None = None

    @model_validator(mode="after")
    def _scaled(self):
        if self.scaled is None:
            object.__setattr__(self, "scaled", not self.error_feedback)
        return self

    def compressor(self) -> RandK:
        return RandK(self.ratio, bool(self.scaled))
