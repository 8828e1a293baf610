"""The round loop: plan -> engine (local training, server update) -> evaluation -> records ->
sinks -> checkpoint, the same for synchronous and asynchronous runs."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from itertools import islice
from typing import Callable, ContextManager, Iterable, Sequence

from ..clock.plan import RoundPlan
from ..records import ClientRecord, RoundRecord

__all__ = ["run_rounds"]

Sink = Callable[[RoundRecord, list[ClientRecord]], None]


def run_rounds(
    engine,
    plans: Iterable[RoundPlan],
    *,
    start: int,
    rounds: int,
    eval_every: int,
    sinks: Sequence[Sink],
    checkpoint: Callable[[int], None],
    hold: Callable[[], ContextManager] = nullcontext,
) -> RoundRecord:
    """Execute plans ``start .. rounds-1``; returns the last round's record.

    Evaluates every ``eval_every`` rounds and on the last one. A round whose model is not finite
    is recorded with ``diverged = 1`` (not evaluated) and ends the run without a checkpoint, so a
    resumed run replays the divergence and writes the same rows. ``checkpoint(r)`` is called
    after each finite round r - 1 with r, the round a resumed run would start at. ``hold()`` wraps
    each round's compute (training and evaluation): the engine's fair share of the cores
    (:func:`fedsim.engine.threads.hold_cores`), which only waits and changes no result.
    """
    last = None
    for plan in islice(plans, start, rounds):
        with hold():
            record, clients = engine.step(plan)
            finite = engine.finite()
            if finite and (plan.round == rounds - 1 or (plan.round + 1) % eval_every == 0):
                record = engine.evaluate(record)
        if not finite:
            record = replace(record, diverged=1)
        for sink in sinks:
            sink(record, clients)
        last = record
        if not finite:
            break
        checkpoint(plan.round + 1)
    if last is None:
        raise ValueError(f"no round to run: start {start}, rounds {rounds}")
    return last
