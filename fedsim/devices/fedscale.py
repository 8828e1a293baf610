"""Import FedScale's device traces (Lai et al., "FedScale: Benchmarking Model and System
Performance of Federated Learning at Scale", ICML 2022) into fedsim's trace format.

FedScale ships two pickled dicts:

* capacity (``client_device_capacity``): ``{client_id: {'computation': ms per sample,
  'communication': kbit/s}}``;
* behaviour (``client_behave_trace``): ``{client_id: {'active': [...], 'inactive': [...],
  'finish_time': ..., 'duration': ..., 'model': ...}}``; a device is online at time t iff
  ``active[k] <= t mod finish_time <= inactive[k]`` for some k.

``assign="sorted"`` (the default, fedsim's own pairing): device i of the written trace
(i = 0 .. N-1, N the number of behaviour entries) takes the i-th behaviour entry in ascending
client_id order, and the (i mod M)-th capacity entry in ascending client_id order (M capacity
entries). ``assign="fedscale"``: FedScale's own assignment (:func:`fedscale_pairs`; FedScale
numbers clients 1..n, keys capacity by id mod M with a default profile when the key is absent,
and takes behaviour at position id mod N of the pickle's insertion order). Its rows: ``[active_k, inactive_k)`` online, the gaps (and the time before the first
session and after the last, up to ``finish_time``) offline, so its last ``end`` is
``finish_time`` and the replay's period is FedScale's. ``sample_seconds = computation / 1000``,
``down_kbps = up_kbps = communication``. (FedScale's closed intervals become half-open ones: they
differ on instants only; a zero-length session is a zero-length online row.) Only the keys above are read; ``duration`` and ``model`` are not used.

The pickles are read by an unpickler that refuses every class (a FedScale trace holds only dicts,
lists, numbers and strings), so a file cannot run code. Anything else -- a class, another
layout, a missing key, a number that is not finite and > 0 (times: >= 0), sessions out of order
or past ``finish_time``, a path that is not a regular file -- raises :class:`FedScaleError`, one
line naming the file and the key; nothing is written.

Bounds (docs/reliability.md): a pickle of at most ``MAX_TRACE_BYTES``; client ids that fit in 64
bits; what the trace reader accepts (``computation / 1000`` in [1 / MAX_SPEED, MAX_SECONDS] s,
``communication`` and ``finish_time`` at most MAX_SECONDS); at most ``MAX_TRACE_ROWS`` rows in
all, counted before anything is written. Error messages show a value only when it is short.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import pickle
import stat
from pathlib import Path
from typing import Any, Iterator

from fedsim.limits import MAX_INT, MAX_SECONDS, MAX_SPEED, MAX_TRACE_BYTES, MAX_TRACE_ROWS
from fedsim.scenario import ScenarioError

from .traceio import check_out, number, write_atomic

__all__ = ["FedScaleError", "read_pickle", "import_fedscale", "fedscale_pairs"]

#: Largest ``--clients`` of ``--assign fedscale`` (the trace reader's device-id bound).
MAX_CLIENTS = 10**7


class FedScaleError(ScenarioError):
    """A FedScale file that cannot be imported: ``str(err)`` is one line, ``FILE: key: problem``
    (a :class:`~fedsim.scenario.ScenarioError`, so the command line exits 2)."""


class _ClassRefused(pickle.UnpicklingError):
    pass


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise _ClassRefused(f"holds a class ({module}.{name}); a FedScale trace holds only plain data")


def _regular(path: Path) -> bytes:
    try:
        st = os.stat(path)
    except OSError:
        raise FedScaleError(f"{path}: no such file") from None
    if not stat.S_ISREG(st.st_mode):
        raise FedScaleError(f"{path}: not a regular file")
    if st.st_size > MAX_TRACE_BYTES:
        raise FedScaleError(f"{path}: {st.st_size:,} bytes, more than the {MAX_TRACE_BYTES:,} fedsim reads")
    try:
        with open(path, "rb") as f:
            raw = f.read(st.st_size + 1)  # a file grown since stat is caught below
    except OSError as err:
        raise FedScaleError(f"{path}: cannot read ({err.strerror})") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise FedScaleError(f"{path}: more than the {MAX_TRACE_BYTES:,} bytes fedsim reads")
    return raw


def read_pickle(path: str | Path) -> Any:
    """The object in a pickle file, refusing every class (dicts, lists, numbers, strings only)."""
    path = Path(path)
    raw = _regular(path)
    try:
        return _DataOnly(io.BytesIO(raw)).load()
    except _ClassRefused as err:
        raise FedScaleError(f"{path}: {err}") from None
    except Exception as err:  # noqa: BLE001 - truncated or garbage bytes: one line
        raise FedScaleError(f"{path}: not a readable pickle ({type(err).__name__})") from None


def _show(x: Any) -> str:
    """A short description of a value for an error message (never a huge or deep repr)."""
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 64:
        return f"an integer of about {int(x.bit_length() * 0.30103) + 1} digits"
    if isinstance(x, (bool, int, float)) or (isinstance(x, str) and len(x) <= 40):
        return repr(x)
    return f"a {type(x).__name__}"


def _is_num(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    if isinstance(x, int):
        return abs(x) <= MAX_INT  # a larger int would overflow float()
    return math.isfinite(x)


def _positive(path: Path, key: str, x: Any, low: float = 0.0, high: float = MAX_SECONDS) -> float:
    if not _is_num(x) or not x > 0:
        raise FedScaleError(f"{path}: {key}: must be a finite number > 0, got {_show(x)}")
    if not low <= float(x) <= high:
        raise FedScaleError(f"{path}: {key}: must be in [{low:g}, {high:g}], got {_show(x)}")
    return float(x)


def _entries(path: Path, obj: Any, what: str) -> list[tuple[int, dict]]:
    if not isinstance(obj, dict) or not obj:
        raise FedScaleError(f"{path}: not a FedScale {what} trace (expected a non-empty dict of client_id -> dict)")
    for cid, v in obj.items():
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise FedScaleError(f"{path}: client_id {_show(cid)}: must be an integer")
        if abs(cid) > MAX_INT:
            raise FedScaleError(f"{path}: client_id {_show(cid)}: must fit in 64 bits")
        if not isinstance(v, dict):
            raise FedScaleError(f"{path}: {cid}: expected a dict, got {type(v).__name__}")
    return sorted(obj.items())


def _capacity(path: Path, cid: int, v: dict) -> tuple[float, float]:
    for key in ("computation", "communication"):
        if key not in v:
            raise FedScaleError(f"{path}: {cid}.{key}: missing")
    # the trace reader's bounds: sample_seconds = computation / 1000 in [1 / MAX_SPEED, MAX_SECONDS]
    comp = _positive(path, f"{cid}.computation", v["computation"], 1000 / MAX_SPEED, 1000 * MAX_SECONDS)
    return comp, _positive(path, f"{cid}.communication", v["communication"])


def _sessions(path: Path, cid: int, v: dict) -> tuple[list[tuple[float, float]], float]:
    for key in ("active", "inactive", "finish_time"):
        if key not in v:
            raise FedScaleError(f"{path}: {cid}.{key}: missing")
    act, ina = v["active"], v["inactive"]
    for key, seq in (("active", act), ("inactive", ina)):
        if not isinstance(seq, list):
            raise FedScaleError(f"{path}: {cid}.{key}: must be a list, got {type(seq).__name__}")
    if len(act) != len(ina):
        raise FedScaleError(f"{path}: {cid}.inactive: {len(ina)} entries for {len(act)} in active")
    finish = _positive(path, f"{cid}.finish_time", v["finish_time"])  # at most MAX_SECONDS
    out: list[tuple[float, float]] = []
    prev = 0.0
    for k, (a, b) in enumerate(zip(act, ina)):
        for key, x in (("active", a), ("inactive", b)):
            if not _is_num(x) or x < 0:
                raise FedScaleError(f"{path}: {cid}.{key}[{k}]: must be a finite number >= 0, got {_show(x)}")
        if not prev <= a <= b:  # a == b: a zero-length session (FedScale's own test fixture has one)
            raise FedScaleError(
                f"{path}: {cid}.active[{k}]: sessions must be increasing "
                f"(active {a!r}, inactive {b!r}, previous end {prev!r})"
            )
        if b > finish:
            raise FedScaleError(f"{path}: {cid}.inactive[{k}]: {_show(b)} is past finish_time {finish!r}")
        out.append((float(a), float(b)))
        prev = float(b)
    return out, finish


def _rows(client: int, sessions: list[tuple[float, float]], finish: float, cap: tuple[float, float]) -> Iterator[str]:
    comp, comm = cap
    tail = f"{number(comp / 1000)},{number(comm)},{number(comm)}"
    t = 0.0
    for a, b in sessions:
        if a > t:
            yield f"{client},{number(t)},{number(a)},0,{tail}"
        yield f"{client},{number(a)},{number(b)},1,{tail}"
        t = b
    if t < finish:
        yield f"{client},{number(t)},{number(finish)},0,{tail}"


def _row_count(path: Path, entries: list[tuple[int, dict]]) -> int:
    """At most this many rows (2 per session + 1 per device), refused past ``MAX_TRACE_ROWS``
    before anything is written (a small pickle can share one long session list among many
    devices)."""
    total = 0
    for _, v in entries:
        act = v.get("active")
        total += 2 * (len(act) if isinstance(act, list) else 0) + 1
        if total > MAX_TRACE_ROWS:
            raise FedScaleError(f"{path}: would make more than {MAX_TRACE_ROWS:,} trace rows; fedsim reads no larger trace")
    return total


#: FedScale's profile for a client whose capacity key is absent (aggregator.py,
#: ``client_profiles.get(mapped_id, {"computation": 1.0, "communication": 1.0})``)
FEDSCALE_DEFAULT_PROFILE = (1.0, 1.0)


def fedscale_pairs(cap_ids: list[int], beh_ids: list[int], clients: int) -> tuple[list[tuple[int, int | None]], int]:
    """``--assign fedscale``: for fedsim clients i = 0 .. clients-1 (FedScale client id i + 1), the
    behaviour entry at position (i + 1) mod len of the pickle's insertion order, and the capacity
    key (i + 1) mod len(capacity) (None when that key is absent: FedScale's default profile).
    Returns the pairs (behaviour position, capacity key or None) and how many got the default."""
    keys = set(cap_ids)
    pairs = []
    for i in range(clients):
        c = i + 1
        key = c % len(cap_ids)
        pairs.append((c % len(beh_ids), key if key in keys else None))
    return pairs, sum(1 for _, k in pairs if k is None)


def import_fedscale(capacity: str | Path, behaviour: str | Path, out: str | Path, *, force: bool = False,
                    assign: str = "sorted", clients: int | None = None, notes: list[str] | None = None) -> int:
    """Convert FedScale's capacity and behaviour pickles into a fedsim trace CSV at ``out``.

    ``assign="sorted"`` (the default): device i takes the i-th behaviour entry and the (i mod M)-th
    capacity entry, both in ascending client_id order. ``assign="fedscale"``: FedScale's own
    assignment (:func:`fedscale_pairs`), for ``clients`` devices (default: the number of
    behaviour entries); how many clients got FedScale's default profile is appended to ``notes``.

    Entries are checked as they are written to a temporary file in ``out``'s folder, which is
    renamed to ``out`` only when all passed: the file appears whole or not at all. An existing
    ``out`` is replaced only with ``force`` (:func:`fedsim.devices.traceio.check_out`).

    Returns:
        The number of devices written.
    """
    capacity, behaviour = Path(capacity), Path(behaviour)
    if assign not in ("sorted", "fedscale"):
        raise FedScaleError(f"--assign {assign}: expected sorted or fedscale")
    if clients is not None and not 1 <= clients <= MAX_CLIENTS:
        raise FedScaleError(f"--clients {clients}: must be between 1 and {MAX_CLIENTS}")
    cap_items = _entries(capacity, read_pickle(capacity), "capacity")
    caps = [_capacity(capacity, cid, v) for cid, v in cap_items]
    beh_obj = read_pickle(behaviour)
    entries = _entries(behaviour, beh_obj, "behaviour")  # checked; ascending client_id
    if assign == "sorted":
        plan = [(i, caps[i % len(caps)]) for i in range(len(entries))]
        how = (f"client i = i-th behaviour client_id ascending ({entries[0][0]} .. {entries[-1][0]}), "
               f"capacity entry i mod {len(caps)} ascending")
    else:
        inserted = list(beh_obj.items())  # FedScale: list(user_trace.keys())[client_id % len]
        by_key = dict(zip((cid for cid, _ in cap_items), caps))
        pairs, defaults = fedscale_pairs(list(by_key), [cid for cid, _ in inserted], clients or len(entries))
        entries = inserted
        plan = [(b, FEDSCALE_DEFAULT_PROFILE if k is None else by_key[k]) for b, k in pairs]
        how = (f"FedScale's assignment: client i = FedScale client i+1, behaviour at position (i+1) mod "
               f"{len(inserted)} of the pickle's order, capacity key (i+1) mod {len(caps)} "
               f"({defaults} of {len(pairs)} clients got FedScale's default profile computation 1, communication 1)")
        if defaults and notes is not None:
            notes.append(f"warning: {defaults} of {len(pairs)} clients have no capacity entry under key (id mod "
                         f"{len(caps)}) and get FedScale's default profile (computation 1 ms/sample, "
                         "communication 1 kbit/s), as FedScale gives them")
    _row_count(behaviour, [entries[b] for b, _ in plan])
    out = check_out(out, force)

    def rows() -> Iterator[str]:  # checked entry by entry while the temporary file is written
        for i, (b, cap) in enumerate(plan):
            cid, v = entries[b]
            yield from _rows(i, *_sessions(behaviour, cid, v), cap)

    comments = [
        "fedsim device trace imported from FedScale by `fedsim trace import-fedscale`",
        f"capacity: {capacity.name} ({len(caps)} entries, sha256 {_sha256(capacity)})",
        f"behaviour: {behaviour.name} ({len(entries)} entries, sha256 {_sha256(behaviour)})",
        how,
    ]
    write_atomic(out, comments, rows())
    return len(plan)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
