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


def _sample_losses(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per example (B,): over the last dimension of ``out``; for (B, L) token
    targets the mean over the example's L tokens."""
    if y.dim() == 1:
        return F.cross_entropy(out, y, reduction="none")
    k = out.shape[-1]
    return F.cross_entropy(out.reshape(-1, k), y.reshape(-1), reduction="none").view(y.shape[0], -1).mean(1)


@torch.no_grad()
def global_objective(work: Workload, params: Tensors) -> float:
    """sum_i p_i F_i(x), F_i the client's mean loss over its training samples; over the evaluation
    sample S (``work.eval_clients``) when it is not every client: sum_{i in S} p_i F_i / sum_{i in S} p_i.

    ``params``: the model's parameters (and buffers, when it has any). With the user's loss
    (``work.loss_fn``, a minibatch mean) F_i is computed client by client, each client's batches
    weighted by their sizes.
    """
    if work.loss_fn is not None:
        return _objective_by_client(work, params)
    w = work.sample_weights
    rows = work.eval_rows

    def batch(s: int, e: int) -> torch.Tensor:
        pick = slice(s, e) if rows is None else rows[s:e]
        losses = _sample_losses(work.predict(params, work.x_train[pick]), work.y_train[pick])
        return (losses.double() * w[pick]).sum().reshape(1)

    n = work.x_train.shape[0] if rows is None else len(rows)
    return float(_batch_sums(n, 1, w.device, batch)[0])


def _objective_by_client(work: Workload, params: Tensors) -> float:
    held = dict(work.held_clients())
    clients = sorted(held) if work.eval_clients is None else [int(c) for c in work.eval_clients]
    total = p_sum = 0.0
    dev = work.x_train.device
    for c in clients:
        rows = torch.as_tensor(held[c], device=dev)
        f = 0.0
        for s in range(0, len(rows), EVAL_BATCH):
            pick = rows[s:s + EVAL_BATCH]
            f += float(work.loss_fn(work.predict(params, work.x_train[pick]), work.y_train[pick])) * len(pick)
        total += float(work.weights[c]) * f / len(rows)
        p_sum += float(work.weights[c])
    return total / p_sum if work.eval_clients is not None else total


@torch.no_grad()
def test_metrics(work: Workload, params: Tensors) -> tuple[float, float]:
    """(test loss, test accuracy) on the test split; NaN when there is none.

    The loss is the mean over test examples (the user's ``loss_fn`` averaged over batches weighted
    by their sizes); accuracy, the share of targets whose arg-max output is the target, only when
    targets are classes (``work.num_classes``; (B, L) token targets: over all tokens), else NaN.
    """
    if work.x_test is None or work.predict is None or work.x_test.shape[0] == 0:
        return float("nan"), float("nan")
    n = work.x_test.shape[0]
    loss_fn = work.loss_fn

    def batch(s: int, e: int) -> torch.Tensor:
        logits = work.predict(params, work.x_test[s:e])
        yb = work.y_test[s:e]
        if loss_fn is not None:
            loss = loss_fn(logits, yb).double() * (e - s)
        elif yb.dim() == 1:
            loss = F.cross_entropy(logits, yb, reduction="sum").double()
        else:
            loss = _sample_losses(logits, yb).double().sum()
        correct = (logits.argmax(-1) == yb).sum().double() if work.classes else loss.new_zeros(())
        return torch.stack([loss, correct])

    loss, correct = _batch_sums(n, 2, work.x_test.device, batch).tolist()
    return loss / n, (int(correct) / work.y_test.numel() if work.classes else float("nan"))
