"""Execute a round's local work: chunks of clients stepped together with ``torch.func``.

A chunk stacks the global parameters once per client (leading client dimension) and computes every
client's minibatch gradient in one call: plain Linear/ReLU stacks (logreg, MLP) by a hand-batched
forward (``baddbmm``), any other model by ``vmap(functional_call)`` with dropout masks from noise
drawn per client (keyed by seed, client, key; ``fedsim.models.dropout``); the backward pass is one
``autograd.grad`` of the sum of the clients' (independent) mean losses, which is exactly each
client's own gradient. One chunk holds clients with unequal tau_i: jobs are sorted by step count
(longest first) before chunking, and a client whose steps are done *retires* from the chunk with
its whole solver state (parameters, momentum, Adam moments, v_hat), so later steps neither touch
nor compute for it -- the same result as masking the whole state update, without the padding work.
``clients_per_batch = 1`` is the one-client-at-a-time loop (no ``vmap``; conv nets call the module
directly).

The ``per_client`` engine path (``Workload.engine_path``, decided once before the run by
:mod:`fedsim.engine.probe`: models with buffers such as BatchNorm, or that ``vmap`` refuses such
as ``nn.LSTM``) is that loop with chunk 1, carrying each client's own copy of the round's global
buffers through its steps (the module updates them in place) and returning them
(``CohortResult.buffers``). The loss is the workload's (``loss_fn``; default cross-entropy over
the last dimension, so targets may be (B,) classes or (B, L) token sequences).

The pieces live in their own modules: minibatch streams (:mod:`~fedsim.engine.batches`), the chunk
policy (:mod:`~fedsim.engine.chunking`), allocator tuning (:mod:`~fedsim.engine.allocator`), the
stacked Linear kernel (:mod:`~fedsim.engine.stacked`), the loss and gradient builders
(:mod:`~fedsim.engine.gradients`) and the dropout plan (:mod:`~fedsim.engine.dropout_plan`); this
module is the cohort loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..algorithms.algorithm import Algorithm
from ..algorithms.lr import StepLrs
from ..rng import seed_int, stream
from .allocator import tune_allocator
from .augment import augment_batch, augment_draws
from .batches import BatchStream, Task
from .dropout_plan import NOISE_BLOCK_BYTES, dropout_plan, noise_size
from .gradients import cohort_grad
from .workload_value import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["Task", "CohortResult", "train_cohort", "PREGATHER_BYTES"]


@dataclass
class CohortResult:
    clients: tuple[int, ...]  # in the order of the input tasks
    deltas: Tensors  # x_i - x^t, stacked (clients, ...)
    a_norm: torch.Tensor  # float64 (clients,)
    steps: torch.Tensor  # float64 (clients,)
    vhat: Tensors | None  # final AMSGrad v_hat, stacked
    buffers: Tensors | None = None  # the clients' final buffers (BatchNorm statistics), stacked
    weights: torch.Tensor | None = None  # w_i the server used (set by engine.run.train_and_apply)
    #: float64 (clients,): the mean over the job's steps of its minibatch loss (what a client reports)
    loss: torch.Tensor | None = None
    #: float64 (clients,): sum over the job's samples of the squared per-sample loss (Oort's utility)
    loss_sq: torch.Tensor | None = None


#: A chunk's minibatches are gathered a block of steps at a time, about this many bytes a block.
PREGATHER_BYTES = 32 << 20


def train_cohort(
    work: Workload,
    alg: Algorithm,
    params: Tensors,
    tasks: Sequence[Task],
    *,
    round_lr: float,
    seed: int,
    chunk: int,
    correction: Callable[[int], Tensors | None] = lambda i: None,
    direction: Tensors | None = None,
    vhat0: Tensors | None = None,
    buffers: Tensors | None = None,
) -> CohortResult:
    """Run every task's local steps of algorithm ``alg`` from ``params``; results come back in task
    order.

    ``buffers``: the global model's buffers at the round's start (default the workload's initial
    ones); each client trains from its own copy and ``CohortResult.buffers`` holds their final
    values. A workload on the ``per_client`` path runs with chunk 1 whatever ``chunk`` says.

    Tasks are sorted by steps (longest first) and cut into balanced chunks of at most ``chunk``
    clients; each chunk is stepped together (``_run_chunk``). ``chunk = 1`` is the
    one-client-at-a-time loop. The result does not depend on ``chunk`` (up to floating-point
    rounding of batched kernels; tests/test_batched_equivalence.py), with dropout too: each
    client's masks come from uniform noise drawn from its own stream ``(seed, "dropout", client,
    key)`` (a ``torch.Generator`` on the training device, ``NOISE_BLOCK_BYTES`` of steps at a
    time) and fed to the forward as a batched input (``fedsim.models.dropout``), so they are a
    function of (seed, client, key, step) only -- the same for any chunking or torchrun rank
    count. Models without dropout (or in eval mode) draw no noise.
    """
    spec = alg.spec
    n = len(tasks)
    if work.engine_path == "per_client":
        chunk = 1
    bufs0 = (work.buffers if buffers is None else buffers) or None
    order = sorted(range(n), key=lambda j: (-tasks[j].steps, j))
    lrs = StepLrs(round_lr, spec.lr_decay)  # read per step: nothing stored per step
    if work.x_train.device.type == "cpu":
        tune_allocator()
    sites = dropout_plan(work)
    grad_fn = cohort_grad(work, sites)
    pieces = []
    size = -(-n // -(-n // chunk)) if n else 1  # balanced: ceil(n / number of chunks)
    for start in range(0, n, size):
        chunk_tasks = [tasks[j] for j in order[start : start + size]]
        pieces.append(
            _run_chunk(work, alg, params, chunk_tasks, lrs, seed, grad_fn, correction, direction, vhat0, sites, bufs0)
        )
    steps = [t.steps for t in tasks]
    if n == 0:
        z = torch.zeros(0, dtype=torch.float64)
        return CohortResult((), {}, z, z, None, loss=z, loss_sq=z)
    # rows come out in sorted order; one gather puts them back in task order
    back = torch.as_tensor(np.argsort(np.asarray(order)), device=work.x_train.device)
    deltas = {k: _cat([p[0][k] for p in pieces])[back] for k in params}
    vhat = {k: _cat([p[1][k] for p in pieces])[back] for k in params} if alg.keeps_vhat else None
    return CohortResult(
        clients=tuple(t.client for t in tasks),
        deltas=deltas,
        a_norm=alg.a_norm(steps, lrs.ratios(), lr=round_lr),
        steps=torch.tensor(steps, dtype=torch.float64),
        vhat=vhat,
        buffers={k: _cat([p[2][k] for p in pieces])[back] for k in bufs0} if bufs0 else None,
        loss=(_cat([p[3] for p in pieces])[back] / torch.tensor(steps, dtype=torch.float64, device=back.device).clamp(min=1)).cpu(),
        loss_sq=_cat([p[4] for p in pieces])[back].cpu(),
    )


def _cat(ts: list[torch.Tensor]) -> torch.Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts)


def _stack(t: Tensors, c: int) -> Tensors:
    return {k: v.unsqueeze(0).expand((c,) + v.shape).clone() for k, v in t.items()}


def _run_chunk(work, alg: Algorithm, params, tasks, lrs, seed, grad_fn, correction, direction, vhat0, sites,
               buffers=None):
    """Steps of one chunk (tasks sorted by steps, longest first): (deltas, v_hat, final buffers
    stacked or None, each client's summed minibatch losses, its summed squared per-sample
    losses). With ``buffers`` the chunk is one client, stepping its own copy of them."""
    spec = alg.spec
    c = len(tasks)
    dev = work.x_train.device
    steps = [t.steps for t in tasks]
    if any(a < b for a, b in zip(steps, steps[1:])):
        raise ValueError("_run_chunk: tasks must be sorted by steps, longest first")
    x0 = {k: v.unsqueeze(0).expand((c,) + v.shape) for k, v in params.items()}  # a view, never written
    x = _stack(params, c)
    st = alg.client_init(x, vhat0)
    corr_list = [correction(t.client) for t in tasks]
    corr = None
    if corr_list[0] is not None:
        corr = {k: torch.stack([cl[k] for cl in corr_list]) for k in params}
    tmax = steps[0] if c else 0
    bs = spec.batch_size
    if buffers and c != 1:
        raise ValueError("_run_chunk: a model with buffers is stepped one client at a time")
    bufs = {k: v.clone() for k, v in buffers.items()} if buffers else None
    # minibatches and augmentation draws are handled a block of `span` steps at a time, one
    # gather per block: memory stays bounded whatever tau_i is
    per_step = c * bs * work.x_train[0].numel() * work.x_train.element_size()
    span = max(1, PREGATHER_BYTES // max(per_step, 1))
    batches = [BatchStream(work, seed, t, bs) for t in tasks]
    # per-client draws keyed (seed, "augment", client, key), prefix-stable: chunking-invariant
    aug_rngs = [stream(seed, "augment", t.client, t.key) for t in tasks] if work.augment else None
    gens = []
    if sites:  # dropout: each client's noise from its own stream, blocks of `blk` steps (chunking-invariant)
        size = noise_size(sites, bs)
        # the parameters' dtype (= the inputs' for fedsim's own float data; token ids are int64)
        noise_dtype = next(iter(params.values())).dtype
        blk = max(1, NOISE_BLOCK_BYTES // (size * torch.empty(0, dtype=noise_dtype).element_size()))
        for t in tasks:
            g = torch.Generator(device=dev)
            g.manual_seed(seed_int(seed, "dropout", t.client, t.key))
            gens.append(g)
    noise_all = noise = None
    # a = clients still stepping at step k: a prefix of the chunk (host ints, no device sync)
    a = live = c
    done_x: list[Tensors] = []
    done_st: list[Tensors] = []
    # the losses each client reports: running float64 sums, the live clients being a prefix
    loss_sum = torch.zeros(c, dtype=torch.float64, device=dev)
    sq_sum = torch.zeros(c, dtype=torch.float64, device=dev)
    for k in range(tmax):
        while a > 0 and steps[a - 1] <= k:
            a -= 1
        if k % span == 0:  # the next block's minibatches, for the clients still stepping
            nb = min(span, tmax - k)
            idx = np.zeros((a, nb, bs), dtype=np.int64)
            for row in range(a):
                idx[row, : min(steps[row], k + nb) - k] = batches[row].take(min(steps[row], k + nb) - k)
            idx_t = torch.as_tensor(idx, device=dev)
            x_blk, y_blk = work.x_train[idx_t], work.y_train[idx_t]
            if aug_rngs is not None:
                draws = [augment_draws(aug_rngs[row], (nb, bs)) for row in range(c)]
                aug = [torch.as_tensor(np.stack([d[i] for d in draws]), device=dev) for i in range(3)]
        if a < live:  # rows a..live finished: retire their whole state, step only the prefix
            done_x.append({n: v[a:] for n, v in x.items()})
            done_st.append({n: v[a:] for n, v in st.items()})
            x = {n: v[:a] for n, v in x.items()}
            st = {n: v[:a] for n, v in st.items()}
            x0 = {n: v[:a] for n, v in x0.items()}
            corr = None if corr is None else {n: v[:a] for n, v in corr.items()}
            live = a
        j = k % span
        xb, yb = x_blk[:a, j], y_blk[:a, j]
        if aug_rngs is not None:
            xb = augment_batch(xb, aug[0][:a, j], aug[1][:a, j], aug[2][:a, j], fill=work.pad_fill)
        if gens:
            if k % blk == 0:  # every live client draws its next block (full blocks: same stream for any tau_i)
                noise_all = torch.empty((a, blk, size), dtype=noise_dtype, device=dev)
                for row in range(a):
                    torch.rand((blk, size), generator=gens[row], dtype=noise_all.dtype, device=dev, out=noise_all[row])
            noise = noise_all[:a, k % blk]
        grads, loss, loss_sq = grad_fn(x, xb, yb, noise, bufs) if bufs is not None else grad_fn(x, xb, yb, noise)
        loss_sum[:a] += loss.to(torch.float64)
        sq_sum[:a] += loss_sq.to(torch.float64)
        x, st = alg.client_step(x, grads, st, lrs[k], x0=x0, corr=corr, direction=direction)
    done_x.append(x)
    done_st.append(st)
    done_x.reverse()
    done_st.reverse()
    final = {k: _cat([d[k] for d in done_x]) for k in params}
    deltas = {k: final[k] - params[k].unsqueeze(0) for k in params}
    vhat = {k: _cat([d["vhat." + k] for d in done_st]) for k in params} if alg.keeps_vhat else None
    return deltas, vhat, None if bufs is None else {k: v.unsqueeze(0) for k, v in bufs.items()}, loss_sum, sq_sum
