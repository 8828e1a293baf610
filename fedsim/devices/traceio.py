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
import secrets
import signal
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from fedsim.atomic import AtomicFile
from fedsim.errors import ScenarioError
from fedsim.limits import MAX_TRACE_ROWS

__all__ = ["DEVICE_TRACE_COLUMNS", "number", "write_atomic", "check_out"]

DEVICE_TRACE_COLUMNS = ("client", "start", "end", "online", "sample_seconds", "down_kbps", "up_kbps")


def number(x: float) -> str:
    """A number as the trace writes it: integers without a point, other floats as ``repr``
    (the shortest text that reads back to the same float)."""
    f = float(x)
    return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)


def check_out(out: str | Path, force: bool = False) -> Path:
    """``--out`` of a trace command, checked before anything is read or written: a path whose
    folder exists and is writable; an existing entry there only when it is a regular file (not a
    folder, device, FIFO or symbolic link) and ``force`` is given. Else ScenarioError, one line."""
    if str(out) == "":
        raise ScenarioError("--out: must name a file")
    out = Path(out)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise ScenarioError(f"--out {out}: folder {folder} does not exist")
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise ScenarioError(f"--out {out}: cannot use it ({err.strerror})") from None
    if mode is not None:
        if stat.S_ISLNK(mode):
            raise ScenarioError(f"--out {out}: is a symbolic link; name the file itself")
        if not stat.S_ISREG(mode):
            raise ScenarioError(f"--out {out}: exists and is not a regular file")
        if not force:
            raise ScenarioError(f"--out {out}: exists; use --force to replace it")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ScenarioError(f"--out {out}: folder {folder} is not writable")
    return out


@contextmanager
def _signals_raise() -> Iterator[list[int]]:
    """SIGTERM / SIGHUP raise SystemExit in the block (so its cleanup runs), as Ctrl-C does. The
    list it gives also receives the signal, for the block to check: an exception raised while a
    module is being imported can be lost (numpy.random imported lazily mid-write lost about one
    SIGTERM in ten), the list cannot."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def stop(signum, frame):
        received.append(signum)
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM))}
    try:
        yield received
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def write_atomic(out: Path, comments: Iterable[str], rows: Iterable[str]) -> None:
    """Write comment lines, the header and ``rows`` (lines without newline) to ``out`` atomically:
    a temporary file in the same folder (created new, mode 0o666 less the umask, like any other
    output), fsynced, then renamed; nothing is left on failure, Ctrl-C, SIGTERM or SIGHUP (only
    SIGKILL can leave the hidden ``.NAME.*.tmp``). More than ``MAX_TRACE_ROWS`` rows, or a
    folder that cannot be written, is a ScenarioError."""
    out = Path(out)
    folder = out.parent if str(out.parent) else Path(".")
    tmp = folder / f".{out.name}.{secrets.token_hex(4)}.tmp"
    with _signals_raise() as received:
        atomic = None
        try:
            atomic = AtomicFile(out, tmp, exclusive=True, text=True)
            with atomic as f:
                for c in comments:
                    f.write(f"# {c}\n")
                f.write(",".join(DEVICE_TRACE_COLUMNS) + "\n")
                for n, r in enumerate(rows, 1):
                    if received:
                        raise SystemExit(128 + received[0])
                    if n > MAX_TRACE_ROWS:
                        raise ScenarioError(f"--out {out}: more than {MAX_TRACE_ROWS:,} rows; fedsim reads no larger trace")
                    f.write(r + "\n")
                if received:
                    raise SystemExit(128 + received[0])
        except OSError as err:
            if atomic is None:
                raise ScenarioError(f"--out {out}: cannot write in {folder} ({err.strerror})") from None
            raise ScenarioError(f"--out {out}: cannot write it ({err.strerror})") from None
        except BaseException:  # also a signal while the file was being created, before `with` took it
            tmp.unlink(missing_ok=True)
            raise
