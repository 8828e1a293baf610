"""A run's "train these jobs" request, and the one-run driver that answers it.

A round of a run is a generator (:meth:`fedsim.engine.run.SyncEngine.steps`,
:func:`fedsim.runner.loop.rounds`, :func:`fedsim.runner.execute.run_cell`): it does everything of
the round itself (clock, server update, evaluation, records, checkpoints) except the clients'
local training, which it *asks for* by yielding a :class:`TrainRequest` and receiving the
:class:`~fedsim.engine.train.CohortResult`. :func:`drive` answers each request with the request's
own trainer (``train_cohort``, or the torchrun split): one run alone. A comparison's stack
(:mod:`fedsim.compare.stack`) answers the requests of several runs with one batched
:func:`~fedsim.engine.train.train_rows` call instead. The loop exists once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator

import torch

from .train import CohortResult, Task, train_cohort
from .workload_value import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["TrainRequest", "drive"]


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


def drive(gen: Generator[TrainRequest, CohortResult, Any]):
    """Run generator ``gen`` to its end, answering each request with :meth:`TrainRequest.run`;
    returns what ``gen`` returns."""
    try:
        req = next(gen)
        while True:
            req = gen.send(req.run())
    except StopIteration as stop:
        return stop.value
