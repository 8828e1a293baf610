"""The global model on each sampled client's own test data (``eval.per_client``;
docs/client-accuracy.md): the tensor work.

* :func:`client_test_parts`: the sampled clients' test parts as tensors on the run's device and
  dtype, normalized as the run's training data: LEAF / TFF / HDF5 / Parquet per-user test parts
  (``FederatedData.client_test``), Synthetic's per-client 10 % split, or the rows a holdout kept
  back (:mod:`fedsim.data.holdout`).
* :func:`client_metrics`: per client, its test accuracy (share of arg-max hits) and mean loss,
  computed in batches of ``EVAL_BATCH`` like the pooled test metrics
  (:func:`fedsim.engine.evaluate.test_metrics`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .evaluate import EVAL_BATCH

__all__ = ["client_test_parts", "client_metrics"]

Part = tuple[torch.Tensor, torch.Tensor]


def client_test_parts(data: Any, clients: Sequence[int], device, dtype, held=None) -> list[Part]:
    """Test parts of ``clients`` (in that order) of ``data`` (a FederatedData with
    ``client_test``, a SyntheticPopulation, or a Dataset with ``held`` indices per client)."""
    from ..data import Dataset, FederatedData, SyntheticPopulation

    if isinstance(data, FederatedData) and data.client_test is not None:
        from .from_data import fetcher

        fetch = fetcher(data, device, dtype, test=True)
        return [_as_float(*fetch([int(k)]), dtype) for k in clients]
    if isinstance(data, SyntheticPopulation):
        out = []
        for k in clients:
            _, _, x, y = data.gather([int(k)])
            out.append((torch.as_tensor(x).to(device=device, dtype=dtype), torch.as_tensor(y, device=device)))
        return out
    if isinstance(data, Dataset) and held is not None:
        mean = std = None
        if data.mean is not None:
            mean = torch.as_tensor(data.mean, dtype=dtype, device=device).view(1, -1, 1, 1)
            std = torch.as_tensor(data.std, dtype=dtype, device=device).view(1, -1, 1, 1)
        out = []
        for k in clients:
            ix = np.asarray(held[int(k)], dtype=np.int64)
            x = torch.as_tensor(data.x_train[ix]).to(device=device, dtype=dtype)
            if mean is not None:
                x = (x - mean) / std
            out.append((x, torch.as_tensor(data.y_train[ix], dtype=torch.long, device=device)))
        return out
    raise TypeError(f"no per-client test data in {type(data).__name__}")


def _as_float(x, y, dtype) -> Part:
    """(x, y) with x a plain tensor (a palette's rows read out)."""
    if not isinstance(x, torch.Tensor):
        x = x[torch.arange(len(y))]
    return x, y


@torch.no_grad()
def client_metrics(work, params, parts: Sequence[Part]) -> tuple[np.ndarray, np.ndarray]:
    """(accuracy, mean loss) of the model ``params`` on each part: accuracy = share of targets
    whose arg-max output is the target (NaN when targets are not classes), loss = the mean
    cross-entropy over the part's examples ((B, L) token targets: each example's mean over its
    tokens), or with the run's own ``loss_fn`` (a minibatch mean) its batches weighted by size.

    With cross-entropy the parts are evaluated together: concatenated, cut into batches of
    ``EVAL_BATCH`` examples, and each example's loss and hits added to its client's sums in
    float64 (one model call per batch, not per client)."""
    acc = np.full(len(parts), np.nan)
    loss = np.full(len(parts), np.nan)
    sizes = [len(y) for _, y in parts]
    if not parts or sum(sizes) == 0:
        return acc, loss
    if work.loss_fn is not None:
        return _by_client(work, params, parts)
    x = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    seg = torch.repeat_interleave(torch.arange(len(parts), device=y.device),
                                  torch.as_tensor(sizes, device=y.device))
    total = torch.zeros(len(parts), dtype=torch.float64, device=y.device)
    hits = torch.zeros(len(parts), dtype=torch.float64, device=y.device)
    for s in range(0, len(y), EVAL_BATCH):
        xb, yb, sb = x[s:s + EVAL_BATCH], y[s:s + EVAL_BATCH], seg[s:s + EVAL_BATCH]
        logits = work.predict(params, xb)
        if yb.dim() == 1:
            per = F.cross_entropy(logits, yb, reduction="none")
        else:
            k = logits.shape[-1]
            per = F.cross_entropy(logits.reshape(-1, k), yb.reshape(-1), reduction="none").view(yb.shape[0], -1).mean(1)
        total.index_add_(0, sb, per.double())
        if work.classes:
            eq = logits.argmax(-1) == yb
            hits.index_add_(0, sb, (eq if eq.dim() == 1 else eq.sum(1)).double())
    n = np.asarray(sizes, dtype=np.float64)
    numel = np.asarray([p[1].numel() for p in parts], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.where(n > 0, total.cpu().numpy() / n, np.nan)
        if work.classes:
            acc = np.where(n > 0, hits.cpu().numpy() / numel, np.nan)
    return acc, loss


def _by_client(work, params, parts: Sequence[Part]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`client_metrics` with the run's own loss: client by client, batch by batch."""
    acc = np.full(len(parts), np.nan)
    loss = np.full(len(parts), np.nan)
    for i, (x, y) in enumerate(parts):
        n = len(y)
        if n == 0:
            continue
        total = correct = 0.0
        for s in range(0, n, EVAL_BATCH):
            xb, yb = x[s:s + EVAL_BATCH], y[s:s + EVAL_BATCH]
            logits = work.predict(params, xb)
            total += float(work.loss_fn(logits, yb)) * len(yb)
            if work.classes:
                correct += float((logits.argmax(-1) == yb).sum())
        loss[i] = total / n
        if work.classes:
            acc[i] = correct / y.numel()
    return acc, loss
