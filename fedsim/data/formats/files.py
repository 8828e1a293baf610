"""Opening dataset files safely: regular files only, within a size cap, never blocking.

A FIFO, a device (``/dev/zero``), a socket or a folder named where a dataset file is expected is
refused before any byte is read: :func:`open_regular` opens non-blocking and checks the open
descriptor (so a FIFO never blocks and a file swapped after a check cannot slip through);
:func:`check_regular` checks with ``stat`` for the libraries that open files by name themselves
(SQLite, Parquet).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from fedsim.data.formats.errors import DataFormatError

__all__ = ["open_regular", "check_regular", "kind_of"]


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for the "not a regular file" message)."""
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "not a regular file"


def _check(path: str | Path, st: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = kind_of(st.st_mode)
        raise DataFormatError(path, "not a regular file" + ("" if kind == "not a regular file" else f" ({kind})"))
    if st.st_size > limit:
        raise DataFormatError(path, f"larger than {limit:,} bytes ({st.st_size:,})")


def open_regular(path: str | Path, limit: int) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file of at most ``limit`` bytes.

    Raises:
        DataFormatError: not a regular file, too large, or it cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise DataFormatError(path, f"cannot read ({err.strerror or err})") from None
    try:
        _check(path, os.fstat(fd), limit)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def check_regular(path: str | Path, limit: int) -> None:
    """``path`` is a regular file of at most ``limit`` bytes (``stat``, following links), else
    DataFormatError: for readers whose library opens the file by name."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise DataFormatError(path, f"cannot read ({err.strerror or err})") from None
    _check(path, st, limit)
