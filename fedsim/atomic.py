"""Atomic file writes: a temporary file beside the target, fsynced, then renamed over it.

One primitive for every file fedsim replaces whole (run folders, comparison tables, Parquet
parts, device traces), so a reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

__all__ = ["AtomicFile"]


class AtomicFile:
    """``with AtomicFile(path) as f:`` writes ``f``, which becomes ``path`` when the block ends.

    Creating it opens ``tmp`` (default ``NAME.tmp`` beside ``path``) for writing, never through a
    symbolic link (``O_NOFOLLOW``; ``exclusive``: only if it does not exist yet), mode ``perm``
    less the umask, as bytes or (``text``) as text in the locale's encoding without newline
    translation; an OSError there is raised before anything exists. A block that ends normally
    flushes and fsyncs the file, renames it over ``path`` (a link there is replaced, not
    followed) and fsyncs the folder; one that raises removes the temporary file.
    """

    def __init__(self, path: str | Path, tmp: str | Path | None = None, *, exclusive: bool = False,
                 text: bool = False, perm: int = 0o666) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp") if tmp is None else Path(tmp)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.tmp, flags, perm)
        self.file: IO[Any] = os.fdopen(fd, "w", newline="") if text else os.fdopen(fd, "wb")

    def __enter__(self) -> IO[Any]:
        return self.file

    def __exit__(self, kind, value, tb) -> bool:
        try:
            if kind is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if kind is None:
                os.replace(self.tmp, self.path)
                _fsync_folder(self.path.parent)
                return False
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        self.tmp.unlink(missing_ok=True)
        return False


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
