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

from fedsim.scenario import ScenarioError

from .traceio import number, write_atomic

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
    return path.read_bytes()


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


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive(path: Path, key: str, x: Any) -> float:
    if not _is_num(x) or not x > 0:
        raise FedScaleError(f"{path}: {key}: must be a finite number > 0, got {x!r}")
    return float(x)


def _entries(path: Path, obj: Any, what: str) -> list[tuple[int, dict]]:
    if not isinstance(obj, dict) or not obj:
        raise FedScaleError(f"{path}: not a FedScale {what} trace (expected a non-empty dict of client_id -> dict)")
    for cid, v in obj.items():
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise FedScaleError(f"{path}: client_id {cid!r}: must be an integer")
        if not isinstance(v, dict):
            raise FedScaleError(f"{path}: {cid}: expected a dict, got {type(v).__name__}")
    return sorted(obj.items())


def _capacity(path: Path, cid: int, v: dict) -> tuple[float, float]:
    for key in ("computation", "communication"):
        if key not in v:
            raise FedScaleError(f"{path}: {cid}.{key}: missing")
    comp = _positive(path, f"{cid}.computation", v["computation"])
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
    finish = _positive(path, f"{cid}.finish_time", v["finish_time"])
    out: list[tuple[float, float]] = []
    prev = 0.0
    for k, (a, b) in enumerate(zip(act, ina)):
        for key, x in (("active", a), ("inactive", b)):
            if not _is_num(x) or x < 0:
                raise FedScaleError(f"{path}: {cid}.{key}[{k}]: must be a finite number >= 0, got {x!r}")
        if not prev <= a <= b:  # a == b: a zero-length session (FedScale's own test fixture has one)
            raise FedScaleError(
                f"{path}: {cid}.active[{k}]: sessions must be increasing "
                f"(active {a!r}, inactive {b!r}, previous end {prev!r})"
            )
        if b > finish:
            raise FedScaleError(f"{path}: {cid}.inactive[{k}]: {b!r} is past finish_time {finish!r}")
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


def import_fedscale(capacity: str | Path, behaviour: str | Path, out: str | Path, *, assign: str = "sorted",
                    clients: int | None = None, notes: list[str] | None = None) -> int:
    """Convert FedScale's capacity and behaviour pickles into a fedsim trace CSV at ``out``.

    ``assign="sorted"`` (the default): device i takes the i-th behaviour entry and the (i mod M)-th
    capacity entry, both in ascending client_id order. ``assign="fedscale"``: FedScale's own
    assignment (:func:`fedscale_pairs`), for ``clients`` devices (default: the number of
    behaviour entries); how many clients got FedScale's default profile is appended to ``notes``.

    Entries are checked as they are written to a temporary file in ``out``'s folder, which is
    renamed to ``out`` only when all passed: the file appears whole or not at all.

    Returns:
        The number of devices written.
    """
    capacity, behaviour, out = Path(capacity), Path(behaviour), Path(out)
    if not Path(out.parent if str(out.parent) else ".").is_dir():
        raise FedScaleError(f"--out {out}: folder {out.parent} does not exist")
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
