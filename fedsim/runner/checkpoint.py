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

Written with :func:`fedsim.runner.files.write_atomic`; read with ``torch.load(...,
weights_only=True)``, and a file that is not a fedsim checkpoint is refused with one line.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from ..clock.plan import STATUSES
from ..clock.selection import Observations
from .files import FolderError, write_atomic

__all__ = ["CHECKPOINT", "TABLES", "PARQUET_TABLES", "save_checkpoint", "load_checkpoint", "observed_log"]

CHECKPOINT = "checkpoint.pt"
#: The tables whose byte lengths a checkpoint records.
TABLES = ("rounds.csv", "clients.csv")
#: The table folders whose part counts a checkpoint of a ``--format parquet`` run records.
PARQUET_TABLES = ("rounds.parquet", "clients.parquet")


def save_checkpoint(out: Path, next_round: int, table_sizes: dict[str, int], state: dict,
                    observed: list[Observations] | None = None) -> None:
    """Atomically write the checkpoint of a run folder: resume at ``next_round`` with the tables
    cut to ``table_sizes``, the engine state ``state`` (tensors, numbers, dicts, lists) and the
    observations a selection rule was given so far (``observed``, when it reads them)."""
    buf = io.BytesIO()
    ck = {"next_round": next_round, "table_sizes": dict(table_sizes), "sim": state}
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
    if not isinstance(ck, dict) or set(ck) - {"observed"} != {"next_round", "table_sizes", "sim"}:
        return False
    sizes = ck["table_sizes"]
    return (
        type(ck["next_round"]) is int and ck["next_round"] >= 1
        and isinstance(sizes, dict) and set(sizes) in (set(TABLES), set(PARQUET_TABLES))
        and all(type(v) is int and v >= 0 for v in sizes.values())
        and isinstance(ck["sim"], dict) and isinstance(ck["sim"].get("params"), dict)
    )
