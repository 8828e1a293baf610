"""No compression: the update as it is (``algorithm.compression: {name: none}``).

    C(v) = v                      payload: n b bytes (n entries of b bytes: the raw update)

A raw link is also the only one ``system.payload_bytes`` (bytes of one transfer in place of the
model's) applies to: :func:`check_with_payload`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..section import FieldError
from .base import Compressor
from .section import DOWNLINK, UPLINK, CompressionSection

__all__ = ["Identity", "NoneSection", "check_with_payload"]


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


def check_with_payload(algorithm, payload_bytes) -> None:
    """``system.payload_bytes`` refused beside a compressor other than ``none`` on either link of
    ``algorithm`` (the scenario's ``algorithm`` section): that compressor's bytes come from the
    model's parameter count (one line naming the key)."""
    if payload_bytes is None:
        return
    for path, section in ((UPLINK, algorithm.compression), (DOWNLINK, algorithm.downlink_compression)):
        if section is not None and not isinstance(section.compressor(), Identity):
            raise FieldError("system.payload_bytes", f"not with {path} {section.name!r}: a compressor declares "
                              "its bytes from the model's parameter count (docs/compression.md, "
                              '"Bytes on the clock")')
