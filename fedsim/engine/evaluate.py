"""Batched evaluation: global training objective and test loss / accuracy.

The training objective covers the workload's evaluation sample of clients (``eval.clients``;
every client up to ``EVAL_CLIENTS``); the test set is the dataset's (Synthetic: the evaluation
sample's test parts).

Data are cut into batches of ``EVAL_BATCH`` samples; under torchrun the batches are shared over
the ranks (batch b on rank b mod world), their partial sums exchanged with one ``all_reduce``
and added up in batch order on every rank, so the result is bit-identical to one process.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from . import distributed
from .workload import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["global_objective", "test_metrics", "EVAL_BATCH"]

EVAL_BATCH = 2048


def _batch_sums(n: int, width: int, device, fn: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """sum over batches [s, e) of ``fn(s, e)`` (float64, ``width`` values), batches split over ranks."""
    rank, world = distributed.world()
    batches = -(-n // EVAL_BATCH)
    part = torch.zeros(batches, width, dtype=torch.float64, device=device)
    for b in range(rank, batches, world):
        part[b] = fn(b * EVAL_BATCH, min(n, (b + 1) * EVAL_BATCH))
    if world > 1:
        part = distributed.all_reduce_sum(part)  # every batch has one contributor: exact
    total = torch.zeros(width, dtype=torch.float64, device=device)
    for b in range(batches):  # batch order, as one process adds them
        total += part[b]
    return total


@torch.no_grad()
def global_objective(work: Workload, params: Tensors) -> float:
    """sum_i p_i F_i(x), F_i the client's mean loss over its training samples; over the evaluation
    sample S (``work.eval_clients``) when it is not every client: sum_{i in S} p_i F_i / sum_{i in S} p_i."""
    if work.is_quadratic:
        per = 0.5 * ((params["x"].unsqueeze(0) - work.x_train) ** 2).sum(1)
        return float((torch.as_tensor(work.weights, dtype=per.dtype, device=per.device) * per).sum())
    w = work.sample_weights
    rows = work.eval_rows

    def batch(s: int, e: int) -> torch.Tensor:
        pick = slice(s, e) if rows is None else rows[s:e]
        losses = F.cross_entropy(work.predict(params, work.x_train[pick]), work.y_train[pick], reduction="none")
        return (losses.double() * w[pick]).sum().reshape(1)

    n = work.x_train.shape[0] if rows is None else len(rows)
    return float(_batch_sums(n, 1, w.device, batch)[0])


@torch.no_grad()
def test_metrics(work: Workload, params: Tensors) -> tuple[float, float]:
    """(test loss, test accuracy) on the test split; NaN when there is none."""
    if work.x_test is None or work.predict is None or work.x_test.shape[0] == 0:
        return float("nan"), float("nan")
    n = work.x_test.shape[0]

    def batch(s: int, e: int) -> torch.Tensor:
        logits = work.predict(params, work.x_test[s:e])
        yb = work.y_test[s:e]
        loss = F.cross_entropy(logits, yb, reduction="sum").double()
        return torch.stack([loss, (logits.argmax(1) == yb).sum().double()])

    loss, correct = _batch_sums(n, 2, work.x_test.device, batch).tolist()
    return loss / n, int(correct) / n
