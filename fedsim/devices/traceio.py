"""Writing device traces in fedsim's trace format (the file ``system.trace`` replays).

Format: '#' comment lines saying where the trace came from, then the header
``client,start,end,online,sample_seconds,down_kbps,up_kbps`` and one row per interval. Each
client's rows are in time order, touch end to start from 0, and its last ``end`` is its period
(the replay cycles with it). ``sample_seconds`` is the device's compute time per training
sample, ``down_kbps`` / ``up_kbps`` its bandwidths in kbit/s (FedScale's unit); they are the
device's values on every row, online or not.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = ["DEVICE_TRACE_COLUMNS", "number", "write_atomic"]

DEVICE_TRACE_COLUMNS = ("client", "start", "end", "online", "sample_seconds", "down_kbps", "up_kbps")


def number(x: float) -> str:
    """A number as the trace writes it: integers without a point, other floats as ``repr``
    (the shortest text that reads back to the same float)."""
    f = float(x)
    return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)


def write_atomic(out: Path, comments: Iterable[str], rows: Iterable[str]) -> None:
    """Write comment lines, the header and ``rows`` (lines without newline) to ``out`` atomically:
    a temporary file in the same folder, fsynced, then renamed; nothing is left on failure."""
    out = Path(out)
    folder = out.parent if str(out.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            for c in comments:
                f.write(f"# {c}\n")
            f.write(",".join(DEVICE_TRACE_COLUMNS) + "\n")
            for r in rows:
                f.write(r + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
