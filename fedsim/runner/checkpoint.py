"""Checkpoints: everything needed to continue a run, written atomically.

A checkpoint after round r holds the engine's state (global model; server state: optimizer
moments, control variates, global direction, averaged v_hat; async: live model versions), the
next round index and the byte length of ``rounds.csv`` / ``clients.csv`` at that moment (a
``--format parquet`` run: the part count of ``rounds.parquet/`` / ``clients.parquet/``, its keys). The
clock needs no saved state: it is replayed from the scenario seed (its random streams are keyed
by (seed, purpose, client, round), so no generator positions exist to save), and a selection rule
that reads what the server observed (``uses_feedback``) is replayed from the observations it was
given, which the checkpoint keeps (``observed``: one entry per plan so far). Resuming truncates
the tables to the recorded lengths, so rows written after the checkpoint are cut back and the
continuation is byte-identical.

A checkpoint also carries the fingerprint of the run it belongs to (``scenario_sha256``: the
SHA-256 of the folder's ``scenario.yaml``, the dumped resolved scenario). ``--resume`` checks it
fully before anything is cut (:func:`check_fingerprint`, :func:`check_observed`): the fingerprint
is the scenario's (a checkpoint of another run planted in the folder, say a ``fastest`` run's in an
``oort`` folder, is refused); the observations are one per plan, each of arrays of one length
and of their dtypes, round k's at index k, clients in range, statuses a job can end with, times
finite and never going back; and they are the tables' own: plan k's clients, statuses and
completed steps are the non-offline rows of round k in ``clients.csv`` (in order), its time
``rounds.csv``'s ``sim_time`` of round k (an edited or emptied log resumed into other tables
before). A checkpoint without a fingerprint (written by a fedsim before checkpoints carried one)
is refused likewise: delete it to resume from the start, or finish the run with the fedsim that
wrote it (docs/long-runs.md).

Written with :func:`fedsim.runner.files.write_atomic`; read with ``torch.load(...,
weights_only=True)``, and a file that is not a fedsim checkpoint is refused with one line.
"""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from ..clock.plan import STATUSES
from ..clock.selection import Observations
from .files import FolderError, write_atomic

__all__ = ["CHECKPOINT", "TABLES", "PARQUET_TABLES", "FINGERPRINT", "fingerprint", "save_checkpoint", "load_checkpoint",
           "observed_log", "check_fingerprint", "check_observed"]

CHECKPOINT = "checkpoint.pt"
#: The tables whose byte lengths a checkpoint records.
TABLES = ("rounds.csv", "clients.csv")
#: The table folders whose part counts a checkpoint of a ``--format parquet`` run records.
PARQUET_TABLES = ("rounds.parquet", "clients.parquet")


#: The checkpoint's key holding the run's fingerprint (:func:`fingerprint`).
FINGERPRINT = "scenario_sha256"


def fingerprint(scenario_text: str | bytes) -> str:
    """The fingerprint of a run: SHA-256 (hex) of its dumped resolved scenario (``scenario.yaml``)."""
    data = scenario_text.encode() if isinstance(scenario_text, str) else scenario_text
    return hashlib.sha256(data).hexdigest()


def save_checkpoint(out: Path, next_round: int, table_sizes: dict[str, int], state: dict,
                    observed: list[Observations] | None = None) -> None:
    """Atomically write the checkpoint of a run folder: resume at ``next_round`` with the tables
    cut to ``table_sizes``, the engine state ``state`` (tensors, numbers, dicts, lists), the
    observations a selection rule was given so far (``observed``, when it reads them) and the
    fingerprint of the folder's ``scenario.yaml`` (written before the first round)."""
    buf = io.BytesIO()
    ck = {"next_round": next_round, "table_sizes": dict(table_sizes), "sim": state,
          FINGERPRINT: fingerprint((Path(out) / "scenario.yaml").read_bytes())}
    if observed is not None:
        ck["observed"] = [_plain(o) for o in observed]
    torch.save(ck, buf)
    write_atomic(Path(out) / CHECKPOINT, buf.getvalue())


_ARRAYS = [f.name for f in fields(Observations)][2:]


def _plain(o: Observations) -> dict:
    """An Observations as tensors and numbers (what ``torch.load(weights_only=True)`` reads)."""
    d = {"round": int(o.round), "time": float(o.time)}
    for name in _ARRAYS:
        a = getattr(o, name)
        if name == "status":
            a = np.array([STATUSES.index(x) for x in a.tolist()], dtype=np.int8)
        d[name] = torch.from_numpy(np.ascontiguousarray(a))
    return d


def observed_log(ck: dict, next_round: int, out: Path) -> list[Observations]:
    """The observations a checkpoint kept, one per plan before ``next_round`` (FolderError, one
    line, when they are missing or malformed: the selection rule could not be replayed)."""
    log = ck.get("observed")
    if not isinstance(log, list) or len(log) != next_round:
        raise FolderError(f"--resume {out}: {CHECKPOINT} lacks the observations the selection rule was given; "
                          "delete it to resume from the start")
    try:
        return [Observations(int(d["round"]), float(d["time"]),
                             **{n: (np.asarray(STATUSES, dtype=object)[d[n].numpy()].astype(str) if n == "status"
                                    else d[n].numpy()) for n in _ARRAYS}) for d in log]
    except (KeyError, TypeError, AttributeError, IndexError, ValueError):
        raise FolderError(f"--resume {out}: {CHECKPOINT} holds malformed observations; delete it to resume "
                          "from the start") from None


def load_checkpoint(out: Path) -> dict | None:
    """The checkpoint of run folder ``out`` (None when there is none).

    Raises :class:`FolderError` (one line) for a file that is empty, truncated, not a torch file,
    holds anything but plain tensors and containers, or lacks a checkpoint's keys.
    """
    path = Path(out) / CHECKPOINT
    if not path.exists():
        return None
    if not path.is_file():
        raise FolderError(f"--resume {out}: {CHECKPOINT} is not a file")
    if path.stat().st_size == 0:
        raise FolderError(f"--resume {out}: {CHECKPOINT} is empty; delete it to resume from the start")
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols on stderr
            warnings.simplefilter("ignore")
            ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - torch's text would suggest unsafe loading; say what it is instead
        raise FolderError(
            f"--resume {out}: {CHECKPOINT} is damaged or was not written by fedsim; delete it to resume from the start"
        ) from None
    if not _well_formed(ck):
        raise FolderError(f"--resume {out}: {CHECKPOINT} is not a fedsim checkpoint; delete it to resume from the start")
    return ck


def _well_formed(ck) -> bool:
    if not isinstance(ck, dict) or set(ck) - {"observed", FINGERPRINT} != {"next_round", "table_sizes", "sim"}:
        return False
    if FINGERPRINT in ck and not (isinstance(ck[FINGERPRINT], str) and len(ck[FINGERPRINT]) == 64):
        return False
    sizes = ck["table_sizes"]
    return (
        type(ck["next_round"]) is int and ck["next_round"] >= 1
        and isinstance(sizes, dict) and set(sizes) in (set(TABLES), set(PARQUET_TABLES))
        and all(type(v) is int and v >= 0 for v in sizes.values())
        and isinstance(ck["sim"], dict) and isinstance(ck["sim"].get("params"), dict)
    )


def check_fingerprint(ck: dict, scenario_text: str, out: Path) -> None:
    """FolderError (one line naming the checkpoint) unless ``ck`` carries the fingerprint of
    ``scenario_text`` (the run's dumped resolved scenario)."""
    have = ck.get(FINGERPRINT)
    if have is None:
        raise FolderError(f"--resume {out}: {CHECKPOINT} carries no scenario fingerprint (written by an older fedsim, "
                          "docs/long-runs.md); delete it to resume from the start")
    if have != fingerprint(scenario_text):
        raise FolderError(f"--resume {out}: {CHECKPOINT} belongs to another scenario's run (its fingerprint is not "
                          "this scenario.yaml's); delete it to resume from the start")


#: The observations' arrays that hold integers (the others hold floats).
_INTEGERS = frozenset({"client", "key", "status", "steps", "samples"})
_JOB_STATUSES = [STATUSES.index(s) for s in ("completed", "dropped", "failed")]


def check_observed(ck: dict, out: Path, table_format: str, num_clients: int) -> None:
    """FolderError (one line naming the checkpoint and what is wrong) unless the checkpoint's
    ``observed`` log is one well-formed entry per plan before ``next_round`` that agrees with the
    tables as the checkpoint records them (module docstring). Reads only."""
    n = ck["next_round"]

    def bad(why: str) -> FolderError:
        return FolderError(f"--resume {out}: {CHECKPOINT} holds observations that {why}; delete it to resume "
                           "from the start")

    log = ck.get("observed")
    if not isinstance(log, list) or len(log) != n:
        raise bad(f"are not one per plan ({n} plans)")
    entries = []
    last = -math.inf
    for k, d in enumerate(log):
        if not isinstance(d, dict) or set(d) != {"round", "time", *_ARRAYS}:
            raise bad(f"are malformed (plan {k})")
        arrays = {name: d[name] for name in _ARRAYS}
        if not all(isinstance(a, torch.Tensor) and a.dim() == 1 and a.dtype != torch.bool
                   and a.is_floating_point() == (name not in _INTEGERS) for name, a in arrays.items()):
            raise bad(f"are malformed (plan {k}: arrays of other shapes or types)")
        arrays = {name: a.numpy() for name, a in arrays.items()}
        if len({len(a) for a in arrays.values()}) != 1:
            raise bad(f"are malformed (plan {k}: arrays of different lengths)")
        if type(d["round"]) is not int or d["round"] != k:
            raise bad(f"are out of order (entry {k} is for plan {d['round']!r})")
        t = d["time"]
        if not isinstance(t, float) or not math.isfinite(t) or t < last:
            raise bad(f"have a time that is not finite or goes back (plan {k})")
        last = t
        c = arrays["client"]
        if len(c) and (c.min() < 0 or c.max() >= num_clients):
            raise bad(f"name a client outside 0..{num_clients - 1} (plan {k})")
        if not np.isin(arrays["status"], _JOB_STATUSES).all():
            raise bad(f"hold a status no job ends with (plan {k})")
        entries.append((t, arrays))
    codes = {name: i for i, name in enumerate(STATUSES)}
    offline = codes["offline"]
    try:
        rounds, clients = _tables(out, table_format, ck["table_sizes"])
        status_all = np.array([codes.get(x, -1) for x in clients["status"].astype(str).tolist()], dtype=np.int64)
        round_all, client_all, steps_all = (np.array([int(v) for v in clients[c].tolist()], dtype=np.int64)
                                            for c in ("round", "client", "steps"))
        sim_time = np.array([float(v) for v in rounds["sim_time"].tolist()], dtype=np.float64)
    except Exception:  # noqa: BLE001 - any unreadable cell: the tables cannot confirm the log
        raise bad("cannot be checked against the tables (a cell of rounds or clients is unreadable)") from None
    if len(rounds) != n:
        raise bad(f"do not match rounds ({len(rounds)} rows for {n} plans)")
    order = np.argsort(round_all, kind="stable")
    bounds = np.searchsorted(round_all[order], np.arange(n + 1))
    for k, (t, a) in enumerate(entries):
        rows = order[bounds[k]:bounds[k + 1]]
        rows = rows[status_all[rows] != offline]
        done = a["status"] == codes["completed"]
        if not (np.array_equal(client_all[rows], a["client"]) and np.array_equal(status_all[rows], a["status"])
                and np.array_equal(steps_all[rows][done], a["steps"][done]) and sim_time[k] == t):
            raise bad(f"do not match the tables at plan {k} (its clients, statuses, steps or time)")


def _tables(out: Path, table_format: str, sizes: dict):
    """The rounds and clients tables as the checkpoint records them (the first bytes of the CSV
    files, the first parts of the Parquet folders), with the columns :func:`check_observed` reads."""
    import pandas as pd

    if table_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..report.parquet import part_files

        def read(name: str, cols: list[str]):
            parts = part_files(Path(out) / name)[:sizes[name]]
            if not parts:
                return pd.DataFrame({c: [] for c in cols})
            return pa.concat_tables([pq.read_table(p, columns=cols) for p in parts]).to_pandas()

        return (read("rounds.parquet", ["round", "sim_time"]),
                read("clients.parquet", ["round", "client", "status", "steps"]))

    def read_csv(name: str, cols: list[str]):
        with open(Path(out) / name, "rb") as f:
            data = f.read(sizes[name])
        # every column as text: sim_time is parsed by float() (exactly the repr fedsim wrote)
        return pd.read_csv(io.BytesIO(data), usecols=cols, dtype=str, keep_default_na=False)

    return (read_csv("rounds.csv", ["round", "sim_time"]),
            read_csv("clients.csv", ["round", "client", "status", "steps"]))
