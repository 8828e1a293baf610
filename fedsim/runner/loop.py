"""The round loop: plan -> engine (local training, server update) -> evaluation -> records ->
sinks -> what the server learned back to the clock -> checkpoint, the same for synchronous and
asynchronous runs.

:func:`round_loop` is the loop as a generator that asks for each round's local training
(:class:`fedsim.engine.request.TrainRequest`) and each evaluation
(:class:`~fedsim.engine.request.EvalRequest`, and the per-client one) and does everything else itself;
:func:`run_rounds` drives it alone, a comparison's stack drives several at once
(:mod:`fedsim.compare.stack`)."""

from __future__ import annotations

import inspect
from contextlib import nullcontext
from dataclasses import replace
from itertools import islice
from typing import Callable, ContextManager, Sequence

from ..engine.request import drive, evaluating
from ..records import ClientRecord, RoundRecord

__all__ = ["run_rounds", "round_loop"]

Sink = Callable[[RoundRecord, list[ClientRecord]], None]


def run_rounds(engine, schedule, **kw) -> RoundRecord:
    """:func:`round_loop` driven alone (each round's training by the engine's own trainer); same
    arguments, returns the last round's record."""
    return drive(round_loop(engine, schedule, **kw))


def _reach(grid, engine, t: float, last_round: int, inclusive: bool = False):
    """``grid.reach`` as a generator (``reaching``); a grid with only ``reach`` asks for nothing."""
    steps = getattr(grid, "reaching", None)
    if steps is None:
        return grid.reach(engine, t, last_round, inclusive=inclusive)
    return (yield from steps(engine, t, last_round, inclusive=inclusive))


def _step(engine, plan):
    """The engine's round as a generator (``steps``); an engine with only ``step`` asks for nothing."""
    steps = getattr(engine, "steps", None)
    if steps is None:
        return engine.step(plan)
    return (yield from steps(plan))


def round_loop(
    engine,
    schedule,
    *,
    start: int,
    rounds: int,
    eval_every: int,
    sinks: Sequence[Sink],
    checkpoint: Callable[[int], None],
    hold: Callable[[], ContextManager] = nullcontext,
    grid=None,
    replay: Sequence = (),
) -> RoundRecord:
    """Execute plans ``start .. rounds-1`` of ``schedule`` (:class:`fedsim.clock.Schedule`); returns
    the last round's record. ``sinks`` are called with each round's record and client records; a
    sink that returns a generator (one asking for an evaluation) is driven here.

    After each round the server's observations go back to the clock (``schedule.observe`` with
    what the trained clients reported, ``engine.reported()``) before the next plan is asked for,
    so a selection rule sees them. Plans ``0 .. start-1`` (a resumed run) are replayed: each is
    observed with the observations logged before (``replay[k]``; none when the rule reads none).

    Evaluates every ``eval_every`` rounds and on the last one. A round whose model is not finite
    is recorded with ``diverged = 1`` (not evaluated) and ends the run without a checkpoint, so a
    resumed run replays the divergence and writes the same rows. ``checkpoint(r)`` is called
    after each finite round r - 1 with r, the round a resumed run would start at. ``hold()`` wraps
    each round's compute (training and evaluation): the engine's fair share of the cores
    (:func:`fedsim.engine.threads.hold_cores`), which only waits and changes no result.

    ``grid`` (:class:`fedsim.runner.evals.EvalGrid`, ``eval.every_seconds``): before each round the
    model standing until its close is evaluated at the grid times before that close, and after the
    last finite round at the grid times up to its close. It reads the model only.
    """
    last = None
    opened_after = None
    for k, plan in enumerate(islice(schedule, start)):  # replayed (resume): the last close is where the grid resumes
        opened_after = plan.close
        schedule.observe(given=replay[k] if replay else None)
    if grid is not None:
        grid.open(opened_after)
    for plan in islice(schedule, rounds - start):
        with hold():
            if grid is not None:
                yield from _reach(grid, engine, plan.close, plan.round - 1)
            record, clients = yield from _step(engine, plan)
            finite = engine.finite()
            if finite and (plan.round == rounds - 1 or (plan.round + 1) % eval_every == 0):
                record = yield from evaluating(engine, record)
        if not finite:
            record = replace(record, diverged=1)
        for sink in sinks:
            out = sink(record, clients)
            if inspect.isgenerator(out):  # a sink that asks for an evaluation (per-client rows)
                yield from out
        last = record
        if not finite:
            break
        schedule.observe(engine.reported())
        if grid is not None:
            grid.sync()
        checkpoint(plan.round + 1)
    if last is None:
        raise ValueError(f"no round to run: start {start}, rounds {rounds}")
    if grid is not None:
        if not last.diverged:
            with hold():
                yield from _reach(grid, engine, last.sim_time, last.round, inclusive=True)
        grid.close()
    return last
