"""The run folder's file primitives: its error type, safe path components and atomic writes."""

from __future__ import annotations

from pathlib import Path

from ..atomic import AtomicFile
from ..errors import ScenarioError

__all__ = ["FolderError", "safe_component", "write_atomic"]

#: Longest path component most file systems accept (bytes of UTF-8).
MAX_COMPONENT_BYTES = 255


class FolderError(ScenarioError):
    """A run folder that cannot be used as asked (exit status 2, one line naming it)."""


def safe_component(name: str, key: str) -> str:
    """``name`` when it is one safe path component; else :class:`FolderError` blaming ``key``.

    Safe: not empty, not ``.`` or ``..``, no ``/``, ``\\`` or control character (NUL included),
    at most 255 bytes of UTF-8. A path built by joining such a name to a folder stays directly
    inside that folder.
    """
    if name in ("", ".", ".."):
        raise FolderError(f"{key}: {name!r} is not a usable folder name")
    if any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in name):
        raise FolderError(f"{key}: {name!r} must be one folder name (no '/', '\\' or control characters)")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
        raise FolderError(f"{key}: longer than {MAX_COMPONENT_BYTES} bytes")
    return name


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that it is either the old file or the new one, never a mix:
    write ``NAME.tmp`` (never through a symbolic link), fsync it, rename it over ``path`` (a link
    there is replaced, not followed) and fsync the folder (:class:`fedsim.atomic.AtomicFile`)."""
    with AtomicFile(path) as f:
        f.write(data)
