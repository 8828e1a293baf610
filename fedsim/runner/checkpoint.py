"""Checkpoints: everything needed to continue a run, written atomically.

A checkpoint after round r holds the engine's state (global model; server state: optimizer
moments, control variates, global direction, averaged v_hat; async: live model versions), the
next round index and the byte length of ``rounds.csv`` / ``clients.csv`` at that moment (a
``--format parquet`` run: the part count of ``rounds.parquet/`` / ``clients.parquet/``, its keys). The
clock needs no saved state: it is replayed from the scenario seed (its random streams are keyed
by (seed, purpose, client, round), so no generator positions exist to save). Resuming truncates
the tables to the recorded lengths, so rows written after the checkpoint are cut back and the
continuation is byte-identical.

Written with :func:`fedsim.runner.files.write_atomic`; read with ``torch.load(...,
weights_only=True)``, and a file that is not a fedsim checkpoint is refused with one line.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import torch

from .files import FolderError, write_atomic

__all__ = ["CHECKPOINT", "TABLES", "PARQUET_TABLES", "save_checkpoint", "load_checkpoint"]

CHECKPOINT = "checkpoint.pt"
#: The tables whose byte lengths a checkpoint records.
TABLES = ("rounds.csv", "clients.csv")
#: The table folders whose part counts a checkpoint of a ``--format parquet`` run records.
PARQUET_TABLES = ("rounds.parquet", "clients.parquet")


def save_checkpoint(out: Path, next_round: int, table_sizes: dict[str, int], state: dict) -> None:
    """Atomically write the checkpoint of a run folder: resume at ``next_round`` with the tables
    cut to ``table_sizes`` and the engine state ``state`` (tensors, numbers, dicts, lists)."""
    buf = io.BytesIO()
    torch.save({"next_round": next_round, "table_sizes": dict(table_sizes), "sim": state}, buf)
    write_atomic(Path(out) / CHECKPOINT, buf.getvalue())


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
    if not isinstance(ck, dict) or set(ck) != {"next_round", "table_sizes", "sim"}:
        return False
    sizes = ck["table_sizes"]
    return (
        type(ck["next_round"]) is int and ck["next_round"] >= 1
        and isinstance(sizes, dict) and set(sizes) in (set(TABLES), set(PARQUET_TABLES))
        and all(type(v) is int and v >= 0 for v in sizes.values())
        and isinstance(ck["sim"], dict) and isinstance(ck["sim"].get("params"), dict)
    )
