"""The compressor's seam: a frozen value that declares its payload and compresses stacked updates.

A compressor acts on one client's whole update at a time, flattened: every parameter tensor of
the model, in the model's parameter order, concatenated into one vector of n entries (not tensor
by tensor), so its payload is a function of n and the update's element size alone
(docs/compression.md). Many clients are compressed at once as the rows of a ``(C, n)`` matrix.

This module imports no torch at import time (the scenario checks call :meth:`Compressor.payload_bytes`
without it); the transforms import it when they run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch

    Tensors = dict[str, torch.Tensor]

__all__ = ["Compressor", "Compression", "kept", "index_bytes", "packed_bytes", "flatten", "unflatten"]


@dataclass(frozen=True)
class Compressor:
    """A compression operator C on one client's flattened update (subclass it, frozen).

    Subclasses implement :meth:`payload_bytes` (the bytes of one compressed update, from the
    parameter count alone, so the clock knows transfer sizes before training) and
    :meth:`compress_rows` (the decompressed result of compressing each row). ``random`` says
    whether :meth:`compress_rows` draws random numbers: it is then handed one ``torch.Generator``
    per row, keyed by (seed, client, job key), and must draw a row's numbers from that row's
    generator only, so a client's result does not depend on the cohort it is compressed with.
    ``lossless`` says that C(v) = v for every v (then there is nothing to compress or feed back).
    ``overflows`` says that a finite entry may come out +-inf (``fp16`` beyond 65504); without it a
    non-finite output where the row was finite stops the run naming the compressor
    (:func:`fedsim.compression.apply.compress_cohort`). All three are class variables
    (``ClassVar``), not dataclass fields.
    """

    random: ClassVar[bool] = False
    lossless: ClassVar[bool] = False
    overflows: ClassVar[bool] = False

    def payload_bytes(self, num_params: int, dtype_bytes: int) -> float:
        """Bytes of one compressed update of ``num_params`` entries of ``dtype_bytes`` bytes each."""
        raise NotImplementedError

    def compress_rows(self, rows: "torch.Tensor", gens: Sequence["torch.Generator"] | None) -> "torch.Tensor":
        """C applied to each row of ``rows`` ``(C, n)``: a new ``(C, n)`` tensor of ``rows``' dtype
        and device, the decompressed updates (``rows`` itself is not written)."""
        raise NotImplementedError

    def __call__(self, updates: "Tensors", gens: Sequence["torch.Generator"] | None = None) -> "Tensors":
        """The batched transform on stacked updates ``{name: (C, ...)}``: the decompressed updates,
        same shapes and dtypes (each row flattened over the whole model, compressed, split back)."""
        return unflatten(self.compress_rows(flatten(updates), gens), updates)


@dataclass(frozen=True)
class Compression:
    """What a run applies on one link: a compressor, and whether the client keeps an error-feedback
    residual e_i (applied = C(Delta + e_i), e_i' = Delta + e_i - applied; Stich et al. 2018,
    Karimireddy et al. 2019)."""

    compressor: Compressor
    error_feedback: bool = False
    #: the name the compressor was registered under (``algorithm.compression.name``), for errors;
    #: None: its class name
    name: str | None = field(default=None, compare=False)


def kept(ratio: float, n: int) -> int:
    """k = max(1, ceil(r n)) entries kept of n, r the ratio's shortest decimal form (``repr``),
    exactly (``0.07`` of 100 keeps 7, although the float 0.07 * 100 is 7.000000000000001);
    at most n."""
    if n < 1:
        raise ValueError(f"an update has at least one entry, got n = {n}")
    return min(n, max(1, math.ceil(Fraction(repr(float(ratio))) * n)))


def index_bytes(n: int) -> int:
    """Bytes of one index into n entries: 4 (int32) when every index 0..n-1 fits, else 8 (int64)."""
    return 4 if n - 1 <= 2**31 - 1 else 8


def packed_bytes(n: int, bits: int) -> int:
    """Bytes of n fields of ``bits`` bits each, packed: ceil(n bits / 8)."""
    return -(-(n * bits) // 8)


def flatten(updates: "Tensors") -> "torch.Tensor":
    """Stacked updates ``{name: (C, ...)}`` as one ``(C, n)`` matrix (the tensors in dict order).

    Raises:
        ValueError: no tensors, tensors of several dtypes or devices, a non-floating dtype, or
            leading dimensions that differ.
    """
    import torch

    if not updates:
        raise ValueError("compression: an update with no tensors")
    ts = list(updates.values())
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1 or not ts[0].is_floating_point():
        raise ValueError(f"compression: the parameters must share one floating dtype, got {sorted(map(str, dtypes))}")
    if len({t.device for t in ts}) != 1:
        raise ValueError("compression: the parameters must be on one device")
    c = ts[0].shape[0] if ts[0].dim() else None
    if c is None or any(t.dim() == 0 or t.shape[0] != c for t in ts):
        raise ValueError("compression: stacked updates need one leading client dimension, the same for every tensor")
    return torch.cat([t.reshape(c, -1) for t in ts], dim=1) if len(ts) > 1 else ts[0].reshape(c, -1).clone()


def unflatten(rows: "torch.Tensor", like: "Tensors") -> "Tensors":
    """``rows`` ``(C, n)`` split back into ``like``'s names and per-row shapes (contiguous copies)."""
    out, off, c = {}, 0, rows.shape[0]
    for name, t in like.items():
        size = math.prod(t.shape[1:])
        out[name] = rows[:, off : off + size].reshape((c,) + tuple(t.shape[1:])).contiguous()
        off += size
    if off != rows.shape[1]:
        raise ValueError(f"compression: {rows.shape[1]} entries per row, the update has {off}")
    return out
