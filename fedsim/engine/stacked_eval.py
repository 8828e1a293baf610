"""Several runs' evaluations answered together: one stacked forward per batch of the shared data.

A comparison's stack (:mod:`fedsim.compare.stack`) gathers the waiting
:class:`~fedsim.engine.request.EvalRequest` (and :class:`~fedsim.engine.request.ClientEvalRequest`)
of its runs; those on the same data whose model is a Flatten / Linear / ReLU stack are answered
here: the runs' models stacked on a leading run dimension, each batch of ``EVAL_BATCH`` examples
goes through :func:`~fedsim.engine.stacked.stacked_forward` once (one ``baddbmm`` per Linear over
the runs, the batch broadcast), and each run's slice of the outputs is reduced exactly as
:mod:`fedsim.engine.evaluate` (and :mod:`fedsim.engine.client_eval`) reduce a run's own outputs:
the same functions on the same values, in the same order. Only the matrix products (and the
per-example cross-entropy of the training objective, computed row by row) are shared; every sum
is a run's own.

The engine never learns what a run is: a request is a model state and what to compute.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from . import distributed
from . import evaluate as _evaluate
from .request import ClientEvalRequest, EvalRequest
from .stacked import stacked_forward

Tensors = dict[str, torch.Tensor]

__all__ = ["eval_key", "evaluate_together", "client_metrics_together", "EVAL_STACK_BYTES"]

#: The most bytes of one layer's activations a stacked forward holds (runs are taken in chunks
#: under it): large enough for the 24 logistic regressions of benchmarks/bench_compare_stack.py in
#: two chunks, small enough that an MLP's hidden activations stay in cache (a 24-run MLP of width
#: 64 measured slower in one chunk than in chunks of 8 on the 2-core machine).
EVAL_STACK_BYTES = 8 * 2**20


def eval_key(req) -> tuple | None:
    """Which requests :func:`evaluate_together` / :func:`client_metrics_together` may answer
    together (equal keys), or None when this one is answered alone: a model that is not a Flatten
    / Linear / ReLU stack (buffers, other layers), the user's own loss, torchrun, or a workload
    without a test set."""
    work = req.work
    if distributed.world()[1] > 1 or work.loss_fn is not None or work.extra_metrics is not None:
        return None
    if work.buffers or work.predict is None or work.module is None or work.engine_path != "batched":
        return None
    if set(req.params) != {k for k, _ in work.module.named_parameters()}:
        return None
    if _forward(work) is None:
        return None
    p = next(iter(req.params.values()))
    shapes = tuple((k, tuple(v.shape)) for k, v in sorted(req.params.items()))
    if isinstance(req, ClientEvalRequest):
        return ("client", id(req.parts), shapes, p.dtype, p.device)
    if work.x_test is None or work.x_test.shape[0] == 0:
        return None
    return ("eval", id(work.x_train), id(work.x_test), req.train_loss, shapes, p.dtype, p.device)


def _forward(work):
    fwd = getattr(work, "_stacked_eval_forward", None)
    if fwd is None:
        fwd = stacked_forward(work.module) or False
        object.__setattr__(work, "_stacked_eval_forward", fwd)
    return fwd or None


def _chunks(reqs: Sequence, width: int) -> list[Sequence]:
    """``reqs`` cut so that each chunk's activations (runs x EVAL_BATCH x ``width`` values) stay
    under :data:`EVAL_STACK_BYTES`."""
    p = next(iter(reqs[0].params.values()))
    per_run = _evaluate.EVAL_BATCH * max(1, width) * p.element_size()
    n = max(1, EVAL_STACK_BYTES // per_run)
    return [reqs[i:i + n] for i in range(0, len(reqs), n)]


def _width(work, params: Tensors) -> int:
    """The widest layer input or output of the model (values per example)."""
    w = int(np.prod(work.x_test.shape[1:])) if work.x_test is not None else 1
    for v in params.values():
        if v.dim() == 2:
            w = max(w, int(v.shape[0]), int(v.shape[1]))
    return w


def _stack(reqs: Sequence) -> Tensors:
    return {k: torch.stack([r.params[k] for r in reqs]) for k in reqs[0].params}


def _logits(fwd, stacked: Tensors, x: torch.Tensor, runs: int) -> torch.Tensor:
    """(runs, B, K): every run's outputs on the batch ``x`` (B, ...)."""
    return fwd(stacked, x.unsqueeze(0).expand(runs, *x.shape))


def _same_objective(reqs: Sequence[EvalRequest]) -> bool:
    """Whether every request's training objective reads the same rows with the same weights."""
    w0, r0 = reqs[0].work.sample_weights, reqs[0].work.eval_rows
    for req in reqs[1:]:
        w, r = req.work.sample_weights, req.work.eval_rows
        if (r is None) != (r0 is None) or not torch.equal(w, w0) or (r is not None and not torch.equal(r, r0)):
            return False
    return True


@torch.no_grad()
def evaluate_together(reqs: Sequence[EvalRequest]) -> list[dict[str, float]]:
    """Each request's answer (what :meth:`EvalRequest.run` returns), the forward stacked over the
    requests; every request has the same :func:`eval_key`. The training objective needs the same
    evaluation sample in every run (checked; else each request is answered alone)."""
    if reqs[0].train_loss and not _same_objective(reqs):
        return [r.run() for r in reqs]
    out: list[dict[str, float]] = []
    work = reqs[0].work
    fwd = _forward(work)
    for chunk in _chunks(reqs, _width(work, reqs[0].params)):
        stacked = _stack(chunk)
        res = [{} for _ in chunk]
        if chunk[0].train_loss:
            for d, v in zip(res, _objective(work, fwd, stacked, len(chunk))):
                d["train_loss"] = v
        for d, (loss, acc) in zip(res, _test(work, fwd, stacked, len(chunk))):
            d["test_loss"], d["test_acc"] = loss, acc
        out += res
    return out


def _sums(n: int, runs: int, width: int, device, fn) -> torch.Tensor:
    """:func:`fedsim.engine.evaluate._batch_sums` for ``runs`` runs at once (one process): ``fn(s, e)``
    returns (runs, width) float64 sums of batch [s, e), added up in batch order per run."""
    batch = _evaluate.EVAL_BATCH
    batches = -(-n // batch)
    part = torch.zeros(runs, batches, width, dtype=torch.float64, device=device)
    for b in range(batches):
        part[:, b] = fn(b * batch, min(n, (b + 1) * batch))
    total = torch.zeros(runs, width, dtype=torch.float64, device=device)
    for b in range(batches):
        total += part[:, b]
    return total


def _objective(work, fwd, stacked: Tensors, runs: int) -> list[float]:
    """:func:`fedsim.engine.evaluate.global_objective` (cross-entropy) of each run."""
    w = work.sample_weights
    rows = work.eval_rows

    def batch(s: int, e: int) -> torch.Tensor:
        pick = slice(s, e) if rows is None else rows[s:e]
        logits = _logits(fwd, stacked, work.x_train[pick], runs)
        y, wp = work.y_train[pick], w[pick]
        if y.dim() == 1:  # per-example cross-entropy: row by row, the same values in one call over all runs
            losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.repeat(runs), reduction="none")
            losses = losses.view(runs, -1)
        else:
            losses = [_evaluate._sample_losses(logits[r], y) for r in range(runs)]
        return torch.stack([(losses[r].double() * wp).sum() for r in range(runs)])[:, None]

    n = work.x_train.shape[0] if rows is None else len(rows)
    return [float(v) for v in _sums(n, runs, 1, w.device, batch)[:, 0]]


def _test(work, fwd, stacked: Tensors, runs: int) -> list[tuple[float, float]]:
    """:func:`fedsim.engine.evaluate.test_metrics` (cross-entropy) of each run."""
    n = work.x_test.shape[0]

    def batch(s: int, e: int) -> torch.Tensor:
        logits = _logits(fwd, stacked, work.x_test[s:e], runs)
        yb = work.y_test[s:e]
        out = []
        for r in range(runs):
            lr = logits[r]
            if yb.dim() == 1:
                loss = F.cross_entropy(lr, yb, reduction="sum").double()
            else:
                loss = _evaluate._sample_losses(lr, yb).double().sum()
            correct = (lr.argmax(-1) == yb).sum().double() if work.classes else loss.new_zeros(())
            out.append(torch.stack([loss, correct]))
        return torch.stack(out)

    total = _sums(n, runs, 2, work.x_test.device, batch).tolist()
    return [(loss / n, int(correct) / work.y_test.numel() if work.classes else float("nan")) for loss, correct in total]


@torch.no_grad()
def client_metrics_together(reqs: Sequence[ClientEvalRequest]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each request's :func:`fedsim.engine.client_eval.client_metrics`, the forward stacked over the
    requests (the same parts: equal :func:`eval_key`)."""
    from .client_eval import client_metrics

    parts = reqs[0].parts
    sizes = [len(y) for _, y in parts]
    if not parts or sum(sizes) == 0:
        return [client_metrics(r.work, r.params, r.parts) for r in reqs]
    work = reqs[0].work
    fwd = _forward(work)
    x = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    seg = torch.repeat_interleave(torch.arange(len(parts), device=y.device), torch.as_tensor(sizes, device=y.device))
    n = np.asarray(sizes, dtype=np.float64)
    numel = np.asarray([p[1].numel() for p in parts], dtype=np.float64)
    width = max([int(np.prod(x.shape[1:]))] + [int(d) for v in reqs[0].params.values() if v.dim() == 2 for d in v.shape])
    out = []
    for chunk in _chunks(reqs, width):
        runs = len(chunk)
        stacked = _stack(chunk)
        total = [torch.zeros(len(parts), dtype=torch.float64, device=y.device) for _ in chunk]
        hits = [torch.zeros(len(parts), dtype=torch.float64, device=y.device) for _ in chunk]
        for s in range(0, len(y), _evaluate.EVAL_BATCH):
            xb, yb, sb = x[s:s + _evaluate.EVAL_BATCH], y[s:s + _evaluate.EVAL_BATCH], seg[s:s + _evaluate.EVAL_BATCH]
            logits = _logits(fwd, stacked, xb, runs)
            for r in range(runs):
                lr = logits[r]
                if yb.dim() == 1:
                    per = F.cross_entropy(lr, yb, reduction="none")
                else:
                    k = lr.shape[-1]
                    per = F.cross_entropy(lr.reshape(-1, k), yb.reshape(-1), reduction="none").view(yb.shape[0], -1).mean(1)
                total[r].index_add_(0, sb, per.double())
                if work.classes:
                    eq = lr.argmax(-1) == yb
                    hits[r].index_add_(0, sb, (eq if eq.dim() == 1 else eq.sum(1)).double())
        for r in range(runs):
            acc = np.full(len(parts), np.nan)
            with np.errstate(invalid="ignore", divide="ignore"):
                loss = np.where(n > 0, total[r].cpu().numpy() / n, np.nan)
                if work.classes:
                    acc = np.where(n > 0, hits[r].cpu().numpy() / numel, np.nan)
            out.append((acc, loss))
    return out
