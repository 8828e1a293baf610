"""Keeping torchrun's ranks in step around what only rank 0 does (the run folder)."""

from __future__ import annotations

from typing import Any, Callable

from ..engine.distributed import broadcast_object, world
from ..errors import ScenarioError

__all__ = ["agree"]


def agree(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on rank 0 only and hand its result -- or its failure -- to every rank.

    Keeps the ranks in step when rank 0 does something that may fail (preparing the run folder,
    reading a checkpoint): otherwise a failure on rank 0 would leave the others waiting in the
    next collective. Rank 0 re-raises the original exception; the others raise a
    ``ScenarioError`` (exit status 2) or ``RuntimeError`` with the same message.
    """
    rank, size = world()
    if size == 1:
        return fn()
    if rank == 0:
        try:
            value = fn()
        except BaseException as err:
            broadcast_object(("err", isinstance(err, ScenarioError), str(err)))
            raise
        broadcast_object(("ok", value, None))
        return value
    kind, value, msg = broadcast_object(None)
    if kind == "err":
        raise (ScenarioError if value else RuntimeError)(msg)
    return value
