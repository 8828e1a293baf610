"""8-bit inputs held as one byte each: the rows a run holds for its whole length, exactly.

Image datasets store pixels as k / 255 for k in 0..255: LEAF's FEMNIST writes ``pixel / 255`` as
JSON floats, FedScale's images and the table readers decode 8-bit pixels and divide by 255. Text
datasets of a small alphabet hold token ids in 0..255 as int64 (LEAF's Shakespeare: 80 letters).
:class:`PaletteRows` keeps such rows as ``uint8`` codes k and a table of the 256 values; indexing
it gives the values back in their dtype, normalized per channel when the data are, bit for bit
what the rows were (the table holds exactly those values and is normalized by the same two IEEE
operations, ``(v - mean) / std``, as the rows would have been). A quarter of float32's memory, an
eighth of float64's and int64's: the evaluation sample's training data and the test set are held
for the whole run (docs/devices.md, "The evaluation sample").

:func:`codes` encodes a block of rows when every value is one of the table's, else returns None
(the caller keeps floats).
"""

from __future__ import annotations

import torch

__all__ = ["PaletteRows", "tables", "pixel_table", "codes", "encode"]


def tables(dtype: torch.dtype, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """The candidate tables in ``dtype`` on ``device``. Floating: k / 255 computed in ``dtype``,
    and computed in float32 then cast (8-bit pixels a reader decoded to float32, in a float64 run).
    Integers wider than a byte: 0..255 (token ids of a small alphabet). Anything else: none."""
    if dtype in _INTS:
        return [torch.arange(256, dtype=dtype, device=device)]
    if dtype not in _BITS:
        return []
    k = torch.arange(256, dtype=torch.float64)
    out = [(k / 255).to(dtype)]
    alt = (k.to(torch.float32) / 255).to(dtype)
    if not torch.equal(alt, out[0]):
        out.append(alt)
    return [t.to(device) for t in out]


def pixel_table(dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """The values of 8-bit pixels k (``FederatedData.pixels``) in ``dtype``: float32's k / 255,
    what a reader decoding to float32 gives, cast to ``dtype``."""
    return tables(dtype, device)[-1]


def codes(x: torch.Tensor, table: torch.Tensor, *, block: int = 1 << 22) -> torch.Tensor | None:
    """``uint8`` codes k with ``table[k]`` equal to ``x`` bit for bit, element for element (so
    -0.0 and NaN are never coded), or None when a value is not in ``table``. Worked through in
    blocks of about ``block`` values (a big test set never has a long index of its whole size)."""
    if x.dtype != table.dtype or x.dim() == 0 or not (x.dtype in _BITS or x.dtype in _INTS):
        return None
    bits = _BITS.get(x.dtype, x.dtype)
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    step = max(1, block // max(1, x[0].numel())) if len(x) else 1
    for s in range(0, len(x), step):
        xb = x[s:s + step]
        k = (torch.round(xb * 255) if x.is_floating_point() else xb).clamp(0, 255).to(torch.uint8)
        if not torch.equal(table[k.long()].view(bits), xb.view(bits)):
            return None
        out[s:s + step] = k
    return out


def encode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(codes, table)`` for the first of :func:`tables` that holds every value of ``x``, or None."""
    for table in tables(x.dtype, x.device):
        coded = codes(x, table)
        if coded is not None:
            return coded, table
    return None


_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}
_INTS = (torch.int16, torch.int32, torch.int64)


class PaletteRows:
    """Rows of ``uint8`` codes that index like the tensor they encode.

    Args:
        codes: ``uint8 (n, ...)``, one code per input value.
        table: The 256 values, ``(256,)``.
        mean, std: Per-channel normalization of ``(n, C, H, W)`` images (each ``(1, C, 1, 1)`` in
            the table's dtype), or None: the values as they are.
    """

    def __init__(self, codes: torch.Tensor, table: torch.Tensor, mean: torch.Tensor | None = None,
                 std: torch.Tensor | None = None):
        self.codes = codes
        if mean is None:
            self._flat, self._offset = table, None
        else:  # one row of 256 normalized values per channel, as (x - mean) / std on the rows
            channels = codes.shape[1]
            per_channel = table.view(1, 256).expand(channels, 256)
            self._flat = ((per_channel - mean.view(-1, 1)) / std.view(-1, 1)).reshape(-1)
            self._offset = (torch.arange(channels, device=codes.device) * 256).view(1, channels, *([1] * (codes.dim() - 2)))

    def __getitem__(self, index) -> torch.Tensor:
        k = self.codes[index].long()
        if self._offset is not None:
            k = k + (self._offset[0] if k.dim() == self.codes.dim() - 1 else self._offset)
        return self._flat[k]

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def device(self) -> torch.device:
        return self.codes.device

    @property
    def dtype(self) -> torch.dtype:
        return self._flat.dtype

    def element_size(self) -> int:
        return self._flat.element_size()

    def is_floating_point(self) -> bool:
        return self._flat.is_floating_point()

    def dim(self) -> int:
        return self.codes.dim()
