"""A run's "train these jobs" and "evaluate this model" requests, and the one-run driver that
answers them.

A round of a run is a generator (:meth:`fedsim.engine.run.SyncEngine.steps`,
:func:`fedsim.runner.loop.rounds`, :func:`fedsim.runner.execute.run_cell`): it does everything of
the round itself (clock, server update, evaluation, records, checkpoints) except the clients'
local training, which it *asks for* by yielding a :class:`TrainRequest` and receiving the
:class:`~fedsim.engine.train.CohortResult` (or several at once, :class:`TrainRequests`).
:func:`drive` answers each request with the request's own trainer (``train_cohort``, or the
torchrun split): one run alone. A comparison's stack
(:mod:`fedsim.compare.stack`) answers the requests of several runs with one batched
:func:`~fedsim.engine.train.train_rows` call instead. The loop exists once.

Evaluation is asked for the same way: :class:`EvalRequest` (the global model on the test set and
the evaluation sample's training objective) and :class:`ClientEvalRequest` (on the sampled
clients' own test parts, ``eval.per_client``); alone each is answered by today's functions
(:mod:`fedsim.engine.evaluate`, :mod:`fedsim.engine.client_eval`), in a stack several runs' are
answered by one stacked forward per batch (:mod:`fedsim.engine.stacked_eval`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator

import torch

from .train import CohortResult, Task, train_cohort
from .workload_value import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["TrainRequest", "TrainRequests", "EvalRequest", "ClientEvalRequest", "drive", "evaluating"]


@dataclass
class TrainRequest:
    """The local training of one round of one run: the arguments of ``train`` (``train_cohort``).

    ``work`` is the run's whole workload (the trainer takes its ``for_clients`` of the tasks);
    ``correction(client)`` the client's additive correction (or None)."""

    work: Workload
    alg: Any  # fedsim.algorithms.algorithm.Algorithm
    params: Tensors
    tasks: list[Task]
    round_lr: float
    seed: int
    chunk: int
    correction: Callable[[int], Tensors | None]
    direction: Tensors | None = None
    vhat0: Tensors | None = None
    buffers: Tensors | None = None
    train: Callable[..., CohortResult] = train_cohort

    def run(self) -> CohortResult:
        """The request answered alone, exactly as the run always trained."""
        return self.train(
            self.work.for_clients([t.client for t in self.tasks]), self.alg, self.params, self.tasks,
            round_lr=self.round_lr, seed=self.seed, chunk=self.chunk, correction=self.correction,
            direction=self.direction, vhat0=self.vhat0, **({"buffers": self.buffers} if self.buffers else {}),
        )


@dataclass
class TrainRequests:
    """Several :class:`TrainRequest` of one run that need none of each other's answers (an
    asynchronous server update's cohorts, one per model version reporting in it), asked at once;
    answered with their results in order. Alone each is answered in turn, exactly as when they
    were asked one by one; a stack trains them with the other runs' requests in one step."""

    requests: tuple[TrainRequest, ...]

    def run(self) -> tuple[CohortResult, ...]:
        """Each request answered alone, in order."""
        return tuple(r.run() for r in self.requests)


@dataclass
class EvalRequest:
    """An evaluation of one run's global model: ``params`` its state (parameters, and buffers when
    the model has any) on ``work``'s test set (``test_loss``, ``test_acc``) and, with
    ``train_loss``, the training objective over the evaluation sample. Answered with
    ``{"test_loss": .., "test_acc": .., ["train_loss": ..]}``."""

    work: Workload
    params: Tensors
    train_loss: bool = False

    def run(self) -> dict[str, float]:
        """The request answered alone: :func:`~fedsim.engine.evaluate.global_objective` and
        :func:`~fedsim.engine.evaluate.test_metrics`, as a run always evaluated."""
        from .evaluate import global_objective, test_metrics

        out = {}
        if self.train_loss:
            out["train_loss"] = global_objective(self.work, self.params)
        out["test_loss"], out["test_acc"] = test_metrics(self.work, self.params)
        return out


@dataclass
class ClientEvalRequest:
    """One run's global model ``params`` on each of ``parts`` (the sampled clients' test data,
    ``eval.per_client``); answered with ``(accuracy, mean loss)`` arrays, one value per part."""

    work: Workload
    params: Tensors
    parts: list

    def run(self):
        """Answered alone: :func:`~fedsim.engine.client_eval.client_metrics`."""
        from .client_eval import client_metrics

        return client_metrics(self.work, self.params, self.parts)


def evaluating(engine, record):
    """``engine``'s evaluation of ``record`` as a generator (yields its :class:`EvalRequest`); an
    engine with only ``evaluate`` asks for nothing."""
    steps = getattr(engine, "evaluation", None)
    if steps is None:
        return engine.evaluate(record)
    return (yield from steps(record))


def drive(gen: Generator[Any, Any, Any]):
    """Run generator ``gen`` to its end, answering each request (:class:`TrainRequest`,
    :class:`EvalRequest`, :class:`ClientEvalRequest`) with its own ``run()``; returns what ``gen``
    returns."""
    try:
        req = next(gen)
        while True:
            req = gen.send(req.run())
    except StopIteration as stop:
        return stop.value
