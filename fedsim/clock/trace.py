"""Measured device traces: the two CSV layouts, read and checked into :class:`Trace` values
(:mod:`fedsim.clock.trace_time` replays a parsed trace over time).

Two CSV layouts (``system.trace``; a header line, then one interval per line; lines starting
with '#' and blank lines are ignored). **Speed traces**::

    client,start,end,online,speed
    0,0,3600,1,2.5        # client 0 online in [0, 3600) s, 2.5 local steps per second
    0,3600,5400,0,0       # offline in [3600, 5400) (speed is ignored while offline)

**Device traces** (the layout ``fedsim trace import-fedscale`` writes; a header holding
``sample_seconds`` selects it)::

    client,start,end,sample_seconds,down_kbps,up_kbps
    0,0,3600,0.012,5000,1200   # online in [0, 3600): 12 ms per sample, 5000 / 1200 kbit/s

* ``client``: integer 0 .. clients-1 (ASCII digits); every client needs at least one interval.
* ``start``, ``end``: simulated seconds, 0 <= start < end <= 1e15; one client's intervals must
  not overlap (they may touch). An online row may have start == end: a zero-length session (as
  in FedScale's own test fixture). It adds no online time, but it is a session of
  ``system.trace_semantics: fedscale``'s session index. Gaps between a client's intervals, and the time before its first
  one, count as offline.
* ``online``: 0 or 1 (optional in device traces, default 1: every row is an online interval; an
  offline row can extend the period). ``speed``: local steps per simulated second, 0 <= speed <=
  1e12, and > 0 when online.
* Device rows: ``sample_seconds`` > 0 is the compute time of one sample; one local step takes
  3 x batch_size x sample_seconds (forward and backward, FedScale's factor 3). ``down_kbps`` /
  ``up_kbps`` > 0 are the client's bandwidths in kbit/s (the same on all its online rows): a
  download takes latency + model_kbit / down_kbps, an upload latency + upload_kbit / up_kbps, with
  kbit = bytes x 8 / 1024 (FedScale's units; the bytes come from the model, ``WorkCost``).
* Device traces list devices 0 .. N-1 (every one with an interval); fedsim client i replays
  device i mod N, so a population larger than the trace cycles over it (which devices these are
  is decided when the trace is written: ``fedsim trace import-fedscale --assign``).
* Steps complete by integrating the speed over time (piecewise constant), divided by the job's
  slowdown factor if ``system.slowdown`` is set.
* A client's period P is its last ``end``. Beyond it, ``system.trace_repeat`` decides:
  ``cycle`` (default) replays the client's trace from 0 (time t behaves like t mod P);
  ``last`` keeps the last interval's state and speed forever. FedScale's availability (online at
  t iff active[k] <= (t mod finish_time) <= inactive[k]) is rows [active[k], inactive[k]) plus an
  offline row up to finish_time: the same up to the instants at the interval ends.
* ``system.trace_semantics: fedscale`` replaces that stateless rule by FedScale's stateful one
  (:class:`fedsim.clock.trace_time.SessionIndex`): each client keeps a session index k, and a
  test at time t first moves k to the next session (cyclically) if t mod P is past inactive[k],
  at most once per test, then answers active[k] <= t mod P <= inactive[k]. The sessions are the
  client's online rows in time order, zero-length ones included; P is the period.

A trace replaces ``system.speed`` and ``system.availability``. A malformed file raises
:class:`TraceError` whose message is one line naming the file, the line and the problem, e.g.
``traces/x.csv line 7: intervals overlap for client 2 (with line 5)``. Only regular files are
read (a device or FIFO is refused before opening).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedsim.errors import ScenarioError

from ..limits import MAX_TRACE_BYTES, MAX_TRACE_ROWS
from .model import MAX_SPEED, MAX_TIME

#: Largest device id a device trace may use (ids are dense, 0..N-1).
MAX_DEVICES = 10**7

__all__ = ["TraceError", "Trace", "ClientTrace", "load_trace", "TRACE_COLUMNS", "DEVICE_COLUMNS"]

TRACE_COLUMNS = ("client", "start", "end", "online", "speed")
#: Device traces (e.g. imported from FedScale): per-sample compute time and bandwidths; ``online``
#: is optional (default 1).
DEVICE_COLUMNS = ("client", "start", "end", "sample_seconds", "down_kbps", "up_kbps")


class TraceError(ScenarioError):
    """Malformed trace file; ``str(err)`` is one line: ``FILE line N: problem`` (a ValueError, and a
    :class:`~fedsim.scenario.ScenarioError`, so the command line exits 2 on it)."""


@dataclass(frozen=True, eq=False)
class ClientTrace:
    """One client's trace over one period [0, P): segments ``[bp[j], bp[j+1])`` with ``online[j]``
    and ``speed[j]`` (gaps filled in as offline segments with speed 0)."""

    bp: np.ndarray  # n + 1 breakpoints, bp[0] = 0, bp[n] = P
    online: np.ndarray  # n bools
    speed: np.ndarray  # n floats
    #: the online rows (start, end, speed) in time order, zero-length ones included (FedScale's sessions)
    sessions: tuple[tuple[float, float, float], ...] = ()

    @property
    def period(self) -> float:
        return float(self.bp[-1])

    @property
    def mean_speed(self) -> float:
        """Time-weighted mean speed while online over one period (0 if never online)."""
        dur = np.diff(self.bp) * self.online
        return float((dur * self.speed).sum() / dur.sum()) if dur.sum() > 0 else 0.0

    @property
    def session_speed(self) -> float:
        """``mean_speed``, or with no online time (zero-length sessions only) the sessions' mean
        speed: the speed a job runs at under ``trace_semantics: fedscale`` (0: no sessions)."""
        if self.mean_speed > 0 or not self.sessions:
            return self.mean_speed
        return float(np.mean([sp for _, _, sp in self.sessions]))


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace. Speed traces: ``speed`` in local steps per second. Device traces
    (``device`` True): ``speed`` in samples per second (1 / sample_seconds), and each client's
    ``down_kbps`` / ``up_kbps``."""

    path: str
    clients: tuple[ClientTrace, ...]
    device: bool = False
    down_kbps: np.ndarray | None = None
    up_kbps: np.ndarray | None = None


def _fail(name: str, line: int | None, msg: str) -> TraceError:
    return TraceError(f"{name} line {line}: {msg}" if line is not None else f"{name}: {msg}")


def _number(name: str, line: int, col: str, text: str, bound: float) -> float:
    try:
        x = float(text)
    except ValueError:
        raise _fail(name, line, f"{col} is not a number: {text!r}") from None
    if not math.isfinite(x):
        raise _fail(name, line, f"{col} must be finite, got {text!r}")
    if abs(x) > bound:
        raise _fail(name, line, f"{col} must be at most {bound:g} in size, got {text!r}")
    return x


def _stat_regular(path: str | Path, name: str) -> os.stat_result:
    """``os.stat(path)``, which must be a regular file (not a device, FIFO or directory: those
    never end or block, so they are refused before opening) of at most ``MAX_TRACE_BYTES``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _fail(name, None, "no such trace file") from None
    except OSError as err:
        raise _fail(name, None, f"cannot read ({err.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise _fail(name, None, "is a directory, not a trace file")
    if not stat.S_ISREG(st.st_mode):
        raise _fail(name, None, "not a regular file (a device, FIFO or socket)")
    if st.st_size > MAX_TRACE_BYTES:
        raise _fail(name, None, f"{st.st_size:,} bytes, more than the {MAX_TRACE_BYTES:,} fedsim reads")
    return st


def _read_bytes(path: str | Path, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise _fail(name, None, f"cannot read ({err.strerror})") from None


def _decode(data: bytes, name: str) -> str:
    try:
        text = data.decode("utf-8-sig")  # tolerate a byte-order mark
    except UnicodeDecodeError:
        raise _fail(name, None, "not a text file") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as text mode reads


#: Loaded traces kept (the most recently used), so one run parses its trace once: ``fedsim
#: run``'s validation and then the clock get the same :class:`Trace`.
LOADED_TRACES = 2
_loaded: OrderedDict[tuple, Trace] = OrderedDict()


def load_trace(path: str | Path, num_clients: int) -> Trace:
    """Read and check a trace file for ``num_clients`` clients (see the module docstring).

    The file is read each time, but parsed once per content: the last :data:`LOADED_TRACES`
    traces are kept, keyed by the path as given, ``num_clients`` and a BLAKE2b digest of the bytes
    (an edited file is parsed again). A kept trace's arrays are read-only."""
    name = str(path)
    _stat_regular(path, name)
    data = _read_bytes(path, name)
    key = (name, int(num_clients), hashlib.blake2b(data, digest_size=32).digest())
    trace = _loaded.get(key)
    if trace is None:
        trace = _parse(name, _decode(data, name), num_clients)
        _loaded[key] = trace
        while len(_loaded) > LOADED_TRACES:
            _loaded.popitem(last=False)
    _loaded.move_to_end(key)
    return trace


def _parse(name: str, text: str, num_clients: int) -> Trace:
    """The :class:`Trace` in ``text`` (the file ``name``) for ``num_clients`` clients."""
    reader = csv.reader(io.StringIO(text))
    index: dict[str, int] | None = None
    rows: dict[int, list[tuple[float, float, bool, float, int]]] = {c: [] for c in range(num_clients)}
    bandwidth: dict[int, tuple[float, float]] = {}
    device = False
    count = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise _fail(name, reader.line_num, f"CSV syntax error: {err}") from None
        line = reader.line_num
        cells = [x.strip() for x in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if index is None:
            index = _header(name, line, cells)
            device = "sample_seconds" in index
            continue
        if len(cells) != len(index):
            raise _fail(name, line, f"expected {len(index)} values, got {len(cells)}")
        count += 1
        if count > MAX_TRACE_ROWS:
            raise _fail(name, line, f"more than {MAX_TRACE_ROWS:,} rows")
        get = {col: cells[i] for col, i in index.items()}
        c_text = get["client"]
        if not (c_text.isascii() and c_text.isdigit()):
            raise _fail(name, line, f"client must be a non-negative integer, got {c_text[:40]!r}")
        if len(c_text) > len(str(MAX_DEVICES)):
            c_text = c_text.lstrip("0") or "0"
            if len(c_text) > len(str(MAX_DEVICES)):
                raise _fail(name, line, f"client id of {len(c_text)} digits is past the largest id {MAX_DEVICES}")
        c = int(c_text)
        if c >= num_clients and not device:
            known = f"the scenario has {num_clients} clients: 0..{num_clients - 1}"
            raise _fail(name, line, f"unknown client {c} ({known})")
        if c > MAX_DEVICES:
            raise _fail(name, line, f"device {c} is past the largest device id {MAX_DEVICES}")
        start = _number(name, line, "start", get["start"], MAX_TIME)
        end = _number(name, line, "end", get["end"], MAX_TIME)
        online_x = _number(name, line, "online", get.get("online", "1"), MAX_TIME)
        if device:
            speed, bw = _device_row(name, line, get, online_x == 1.0)
            if bw is not None:
                if bandwidth.setdefault(c, bw) != bw:
                    raise _fail(name, line, f"client {c}'s down_kbps / up_kbps differ from its earlier rows")
        else:
            speed = _number(name, line, "speed", get["speed"], MAX_SPEED)
        if start < 0 or end < 0:
            raise _fail(name, line, f"negative time (start {start:g}, end {end:g})")
        if online_x not in (0.0, 1.0):
            raise _fail(name, line, f"online must be 0 or 1, got {get['online']!r}")
        if speed < 0:
            raise _fail(name, line, f"speed must be >= 0, got {speed:g}")
        if online_x == 1.0 and speed == 0:
            raise _fail(name, line, "speed must be > 0 while online")
        if not (start < end or (start == end and online_x == 1.0)):  # online: zero-length session
            raise _fail(name, line, f"start {start:g} must be < end {end:g}")
        rows.setdefault(c, []).append((start, end, online_x == 1.0, speed, line))
    if index is None:
        raise _fail(name, None, "empty trace (no header line)")

    # Device traces: fedsim client i replays device i mod N (N devices, ids 0..N-1 in ascending
    # order, as imported from FedScale), so a population larger than the trace cycles over it.
    devices = max((c for c, r in rows.items() if r), default=-1) + 1 if device else num_clients
    if device:
        if devices == 0:
            raise _fail(name, None, "no intervals (a device trace needs at least one row)")
        have = sum(1 for r in rows.values() if r)
        if have < devices:  # ids are dense 0..N-1: name the first missing ones before allocating N lists
            gaps = []
            for c in range(devices):
                if not rows.get(c):
                    gaps.append(c)
                    if len(gaps) > 10:
                        break
            listed = ", ".join(map(str, gaps[:10])) + (", ..." if devices - have > 10 else "")
            raise _fail(name, None, f"no intervals for client(s) {listed} (device ids must be 0..{devices - 1}, "
                                    "every one with at least one row)")
        rows = {c: rows.get(c, []) for c in range(devices)}
    clients = []
    missing = [c for c, r in rows.items() if not r]
    for c in range(devices):
        ivs = sorted(rows[c])
        for prev, cur in zip(ivs, ivs[1:]):
            if cur[0] < prev[1]:
                lo, hi = sorted((prev[4], cur[4]))
                raise _fail(name, hi, f"intervals overlap for client {c} (with line {lo})")
        if ivs:
            clients.append(_client_trace(ivs))
    if missing:
        listed = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise _fail(name, None, f"no intervals for client(s) {listed} (every client needs at least one)")
    if not device:
        return Trace(name, tuple(clients))
    of = np.arange(num_clients) % devices  # fedsim client -> trace device
    bw = np.array([bandwidth.get(c, (math.inf, math.inf)) for c in range(devices)], dtype=np.float64)[of]
    bw.setflags(write=False)
    return Trace(name, tuple(clients[d] for d in of.tolist()), True, bw[:, 0], bw[:, 1])


def _device_row(name: str, line: int, get: dict, online: bool) -> tuple[float, tuple[float, float] | None]:
    """(samples per second, (down_kbps, up_kbps)) of a device-trace row; offline rows: (0, None)."""
    sample = _number(name, line, "sample_seconds", get["sample_seconds"], MAX_TIME)
    down = _number(name, line, "down_kbps", get["down_kbps"], MAX_TIME)
    up = _number(name, line, "up_kbps", get["up_kbps"], MAX_TIME)
    if not online:
        return 0.0, None
    for col, x in (("sample_seconds", sample), ("down_kbps", down), ("up_kbps", up)):
        if not x > 0:
            raise _fail(name, line, f"{col} must be > 0 while online, got {get[col]!r}")
    if sample < 1 / MAX_SPEED:
        raise _fail(name, line, f"sample_seconds must be at least {1 / MAX_SPEED:g}, got {get['sample_seconds']!r}")
    return 1.0 / sample, (down, up)


def _header(name: str, line: int, cells: list[str]) -> dict[str, int]:
    """Column positions; ``sample_seconds`` in the header makes it a device trace."""
    columns, optional = (DEVICE_COLUMNS, ("online",)) if "sample_seconds" in cells else (TRACE_COLUMNS, ())
    index: dict[str, int] = {}
    for i, col in enumerate(cells):
        if col in index:
            raise _fail(name, line, f"duplicate column {col!r}")
        if col not in columns and col not in optional:
            raise _fail(name, line, f"unknown column {col!r} (expected {', '.join(columns)})")
        index[col] = i
    missing = [c for c in columns if c not in index]
    if missing:
        raise _fail(name, line, f"missing column(s) {', '.join(missing)} (expected {', '.join(columns)})")
    return index


def _client_trace(ivs: list[tuple[float, float, bool, float, int]]) -> ClientTrace:
    bp, online, speed = [0.0], [], []
    sessions = tuple((s, e, sp) for s, e, on, sp, _ in ivs if on)
    for s, e, on, sp, _ in ivs:
        if s == e:  # a zero-length session: no online time (kept in ``sessions`` only)
            continue
        if s > bp[-1]:  # gap: offline
            bp.append(s)
            online.append(False)
            speed.append(0.0)
        bp.append(e)
        online.append(on)
        speed.append(sp if on else 0.0)
    if len(bp) == 1:  # only zero-length sessions: offline up to the last of them
        bp.append(max(ivs[-1][1], math.ulp(0.0)))
        online.append(False)
        speed.append(0.0)
    arrays = np.array(bp), np.array(online, dtype=bool), np.array(speed)
    for a in arrays:  # shared by every run that loads the trace (load_trace keeps it)
        a.setflags(write=False)
    return ClientTrace(*arrays, sessions)
