"""Checkpoints: everything needed to continue a run, written atomically.

A checkpoint after round r holds the global model, the server state (optimizer moments, control
variates, global direction, averaged v_hat), the next round index and the byte length of
``rounds.csv`` / ``clients.csv`` at that moment. The clock needs no saved state: it is replayed
from the scenario seed (its random streams are keyed by (seed, purpose, client, round), so no
generator positions exist to save). Resuming truncates the tables to the recorded lengths, so
rows written after the checkpoint are cut back and the continuation is byte-identical.

Files are written to ``NAME.tmp`` then renamed (``os.replace``); loading uses
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import io
import os
from dataclasses import asdict
from pathlib import Path

import torch

from .algorithms.server import ServerState

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT", "server_state_to_dict", "server_state_from_dict"]

CHECKPOINT = "checkpoint.pt"


def server_state_to_dict(st: ServerState) -> dict:
    return asdict(st)


def server_state_from_dict(d: dict) -> ServerState:
    return ServerState(**d)


def _fault(point: str) -> None:
    """Fault injection for the crash tests: FEDSIM_FAULT=point:round kills the process there."""
    spec = os.environ.get("FEDSIM_FAULT")
    if spec and spec == point:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def save_checkpoint(out: Path, payload: dict) -> None:
    """Atomically write ``payload`` (tensors, numbers, strings, dicts, lists) to the checkpoint."""
    buf = io.BytesIO()
    torch.save(payload, buf)
    data = buf.getvalue()
    path = Path(out) / CHECKPOINT
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data[: len(data) // 2])
        _fault(f"checkpoint:{payload.get('next_round')}")
        f.write(data[len(data) // 2 :])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def load_checkpoint(out: Path) -> dict | None:
    path = Path(out) / CHECKPOINT
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
