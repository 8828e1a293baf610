"""The round loop: plan -> engine (local training, server update) -> evaluation -> records ->
sinks -> checkpoint, the same for synchronous and asynchronous runs."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from typing import Callable, Iterable, Sequence

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
) -> RoundRecord:
    """Execute plans ``start .. rounds-1``; returns the last round's record.

    Evaluates every ``eval_every`` rounds and on the last one. A round whose model is not finite
    is recorded with ``diverged = 1`` (not evaluated) and ends the run without a checkpoint, so a
    resumed run replays the divergence and writes the same rows. ``checkpoint(r)`` is called
    after each finite round r - 1 with r, the round a resumed run would start at.
    """
    last = None
    for plan in islice(plans, start, rounds):
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
