"""Half precision: each entry rounded to IEEE float16 (``algorithm.compression: {name: fp16}``).

    C(v)_j = fp16(v_j)            round to nearest, ties to even; |v_j| >= 65520 becomes +-inf
    payload: 2 n bytes

Each entry is rounded once, from the update's own dtype. A float64 entry in CPU memory goes through
numpy's float64 -> float16 cast (one rounding); on another device, to float32 rounded to odd
(truncated, its last bit set when the truncation was inexact), then to float16 to nearest: float32
keeps 13 bits more than float16, so that second rounding is the nearest half of the float64 value
itself (Boldo and Melquiond, "When double rounding is odd", 2005). Going through float32 to
nearest instead rounds twice (65519.999999999 would become inf, not 65504).

With error feedback the residual u - fp16(u) is exact (u and fp16(u) are within a factor 2 of each
other, Sterbenz's lemma; entries that round to 0 leave u itself), as long as no entry overflows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Compressor
from .section import CompressionSection

__all__ = ["Half", "FP16Section", "to_half", "to_half_by_odd_rounding"]


def to_half(rows):
    """``rows`` rounded to float16 once (to nearest, ties to even), as a float16 tensor. A float64
    tensor in CPU memory goes through numpy's float64 -> float16 cast (one rounding, one pass);
    elsewhere :func:`to_half_by_odd_rounding`."""
    import numpy as np
    import torch

    if rows.dtype != torch.float64:  # float32, bfloat16, float16: torch's conversion is one rounding
        return rows.to(torch.float16, copy=True)
    if rows.device.type == "cpu" and not rows.requires_grad:
        with np.errstate(over="ignore"):  # beyond 65504: inf, as IEEE rounding says
            return torch.from_numpy(rows.numpy().astype(np.float16))
    return to_half_by_odd_rounding(rows)


def to_half_by_odd_rounding(rows):
    """float64 ``rows`` to float16 with one rounding, in torch on any device: to float32 rounded to
    odd (the float32 next to the value toward zero, its last significand bit set when inexact),
    then to float16 to nearest."""
    import torch

    f = rows.to(torch.float32)
    back = f.to(torch.float64)
    inexact = (back != rows) & ~rows.isnan()
    over = back.abs() > rows.abs()  # rounded away from zero: step back one float32 toward zero
    bits = (f.view(torch.int32) - over.to(torch.int32)) | inexact.to(torch.int32)
    return bits.view(torch.float32).to(torch.float16)


@dataclass(frozen=True)
class Half(Compressor):
    """Round every entry to float16 (once) and back to the update's dtype."""

    #: finite entries of magnitude >= 65520 become +-inf (IEEE overflow), not an error
    overflows: ClassVar[bool] = True

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        return float(2 * num_params)

    def compress_rows(self, rows, gens):
        return to_half(rows).to(rows.dtype)


class FP16Section(CompressionSection):
    """``{name: fp16}``: the update in half precision, 2 bytes an entry."""

    name: str = "fp16"

    def compressor(self) -> Half:
        return Half()
