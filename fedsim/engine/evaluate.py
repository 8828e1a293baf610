"""Batched evaluation: global training objective and test loss / accuracy."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .workload import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["global_objective", "test_metrics", "EVAL_BATCH"]

EVAL_BATCH = 2048


@torch.no_grad()
def global_objective(work: Workload, params: Tensors) -> float:
    """sum_i p_i F_i(x), F_i the client's mean loss over its training samples."""
    if work.is_quadratic:
        per = 0.5 * ((params["x"].unsqueeze(0) - work.x_train) ** 2).sum(1)
        return float((torch.as_tensor(work.weights, dtype=per.dtype, device=per.device) * per).sum())
    w = work.sample_weights
    total = torch.zeros((), dtype=torch.float64, device=w.device)
    for s in range(0, work.x_train.shape[0], EVAL_BATCH):
        xb, yb = work.x_train[s : s + EVAL_BATCH], work.y_train[s : s + EVAL_BATCH]
        losses = F.cross_entropy(work.predict(params, xb), yb, reduction="none")
        total += (losses.double() * w[s : s + EVAL_BATCH]).sum()
    return float(total)


@torch.no_grad()
def test_metrics(work: Workload, params: Tensors) -> tuple[float, float]:
    """(test loss, test accuracy) on the test split; NaN when there is none."""
    if work.x_test is None or work.predict is None or work.x_test.shape[0] == 0:
        return float("nan"), float("nan")
    loss = torch.zeros((), dtype=torch.float64, device=work.x_test.device)
    correct = 0
    n = work.x_test.shape[0]
    for s in range(0, n, EVAL_BATCH):
        xb, yb = work.x_test[s : s + EVAL_BATCH], work.y_test[s : s + EVAL_BATCH]
        logits = work.predict(params, xb)
        loss += F.cross_entropy(logits, yb, reduction="sum").double()
        correct += int((logits.argmax(1) == yb).sum())
    return float(loss) / n, correct / n
