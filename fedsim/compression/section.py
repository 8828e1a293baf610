"""The base of a compressor's scenario section, and the check of ``algorithm.compression`` /
``algorithm.downlink_compression`` (a registered compressor's section, its keys, its bytes).

Nothing here imports torch: a scenario is checked without it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from pydantic import ValidationError

from ..limits import MAX_PAYLOAD_BYTES
from ..section import FieldError, Section, registered
from .base import Compression, Compressor

__all__ = ["CompressionSection", "compression_value", "check_payload", "UPLINK", "DOWNLINK"]

#: The scenario keys of the two links.
UPLINK = "algorithm.compression"
DOWNLINK = "algorithm.downlink_compression"

#: (n, bytes per entry) at which a compressor's declared payload is checked when the scenario is
#: read (the model's own n is checked again when the run is built).
PROBE_SIZES = tuple((n, b) for n in (1, 7, 1000, 123_457, 10**8, 2**31 + 1) for b in (2, 4, 8))


class CompressionSection(Section):
    """``algorithm.compression: {name: NAME, key: value, ..., error_feedback: false}``: subclass
    it, declare the compressor's keys as pydantic fields (frozen, unknown keys refused) and
    return the compressor from :meth:`compressor`. Errors name their key under the link's path."""

    name: str
    error_feedback: bool = False

    def compressor(self) -> Compressor:
        """The compressor this section describes (a frozen value, no pydantic)."""
        raise NotImplementedError

    def value(self) -> Compression:
        """The compressor and the error-feedback switch, as the engine takes them."""
        return Compression(self.compressor(), bool(self.error_feedback), self.name)


def compression_value(v: Any, path: str = UPLINK) -> CompressionSection | None:
    """``algorithm.compression`` (``path``) checked: None (off), a registered compressor's name, or
    its section ``{name: NAME, ...}`` (:data:`fedsim.registries.COMPRESSORS`). The section's keys are
    validated, its :meth:`~CompressionSection.compressor` built and its declared payload checked
    (:func:`check_payload`); the downlink takes no error feedback."""
    from ..registries import COMPRESSORS
    from ..section_errors import nested_error

    if v is None or isinstance(v, CompressionSection):
        section = v
    else:
        if isinstance(v, str):
            v = {"name": v}
        if not isinstance(v, dict):
            raise FieldError(path, "give {name: NAME, ...} (a registered compressor), a compressor's name, or null")
        name = v.get("name")
        if not isinstance(name, str):
            known = ", ".join(COMPRESSORS.names())
            raise FieldError(f"{path}.name", f"missing (which compressor? {known})" if name is None
                              else f"must be a compressor's name ({known})")
        try:
            registered(COMPRESSORS, name)
        except FieldError as err:
            raise FieldError(f"{path}.name", err.msg) from None
        cls = COMPRESSORS.get(name)
        if not (isinstance(cls, type) and issubclass(cls, CompressionSection)):
            raise FieldError(f"{path}.name", f"{name!r} is registered as {cls!r}, not a subclass of "
                              "fedsim.compression.CompressionSection")
        try:
            section = cls.model_validate(v)
        except ValidationError as err:
            raise nested_error(err, path) from None
    if section is None:
        return None
    if path == DOWNLINK and section.error_feedback:
        raise FieldError(f"{path}.error_feedback", "not on the downlink (the broadcast model is compressed "
                          "afresh each time; docs/compression.md)")
    try:
        comp = section.compressor()
    except Exception as err:  # noqa: BLE001 -- a user's section: one line naming it
        raise FieldError(path, f"compressor {section.name!r}: compressor() failed: "
                          f"{type(err).__name__}: {err}".rstrip(": ")) from None
    if not isinstance(comp, Compressor):
        raise FieldError(path, f"compressor {section.name!r}: compressor() returned {type(comp).__name__}, "
                          "not a fedsim.compression.Compressor")
    for n, b in PROBE_SIZES:
        check_payload(comp, n, b, path, section.name)
    return section


def check_payload(comp: Compressor, n: int, dtype_bytes: int, path: str, name: str) -> float:
    """``comp.payload_bytes(n, dtype_bytes)`` as a float, or a one-line :class:`FieldError`
    at ``path`` when it fails or is not a number of bytes in [0, ``MAX_PAYLOAD_BYTES``] (the bound
    of ``system.payload_bytes``; fractional bytes are allowed: an average payload)."""
    try:
        b = comp.payload_bytes(n, dtype_bytes)
    except Exception as err:  # noqa: BLE001 -- a user's compressor: one line naming it
        raise FieldError(path, f"compressor {name!r}: payload_bytes({n}, {dtype_bytes}) failed: "
                          f"{type(err).__name__}: {err}".rstrip(": ")) from None
    try:  # a Python or numpy number; not a bool, a string or a tensor
        value = float(b) if isinstance(b, numbers.Real) and not isinstance(b, bool) else math.nan
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise FieldError(path, f"compressor {name!r}: payload_bytes({n}, {dtype_bytes}) = {_short(b)}; "
                          "must be a finite number of bytes >= 0")
    if value > MAX_PAYLOAD_BYTES:
        raise FieldError(path, f"compressor {name!r}: payload_bytes({n}, {dtype_bytes}) = {_short(b)}; "
                          f"must be at most {MAX_PAYLOAD_BYTES:.0e} bytes (MAX_PAYLOAD_BYTES, as system.payload_bytes)")
    return value


def _short(x: Any) -> str:
    """``repr(x)`` on one line, at most 60 characters."""
    try:
        text = " ".join(repr(x).split())
    except Exception:  # noqa: BLE001 -- a user's object whose repr fails
        text = f"<{type(x).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."
