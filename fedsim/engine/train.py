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

__all__ = ["Task", "CohortResult", "Rows", "train_cohort", "train_rows", "PREGATHER_BYTES"]


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

    Every row here starts from ``params`` with the same lr and seed; :func:`train_rows` is the
    same loop for rows that each carry their own.
    """
    return _train(work, alg, tasks, _Shared(params, round_lr, seed, correction, direction, vhat0), chunk, buffers)


@dataclass(frozen=True)
class Rows:
    """What each row (task) of a cohort carries when the rows do not all share one start: the
    rows of several runs trained in one call (a comparison's stack, :mod:`fedsim.compare.stack`).
    The engine never learns which run a row belongs to.

    Attributes:
        starts: the distinct starting models (unstacked).
        start: per task, the index of its starting model in ``starts``.
        lr: per task, the round's local lr (per-step decay ``lr_decay`` of the algorithm's spec).
        seed: per task, the seed of its minibatch, augmentation and dropout streams.
        corr: per task, its additive correction (None: no correction for any row).
        direction: per start, the server's direction D (None: none for any row).
        vhat0: per start, AMSGrad's starting v_hat (None: none for any row).
    """

    starts: tuple[Tensors, ...]
    start: tuple[int, ...]
    lr: tuple[float, ...]
    seed: tuple[int, ...]
    corr: tuple[Tensors | None, ...] | None = None
    direction: tuple[Tensors | None, ...] | None = None
    vhat0: tuple[Tensors | None, ...] | None = None


def train_rows(work: Workload, alg: Algorithm, tasks: Sequence[Task], rows: Rows, *, chunk: int) -> CohortResult:
    """:func:`train_cohort` for rows that each carry their own start, lr, seed, correction,
    direction and v_hat (:class:`Rows`); results in task order. Row j's arithmetic is the one
    :func:`train_cohort` does for it alone from ``rows.starts[rows.start[j]]`` with lr
    ``rows.lr[j]`` and seed ``rows.seed[j]`` (a per-row lr is a vector broadcast over the leading
    row dimension where the rows' lrs differ; the same float where they are equal); only the
    batch it is stepped in differs. Not for the ``per_client`` path (models with buffers)."""
    n = len(tasks)
    if not (len(rows.start) == len(rows.lr) == len(rows.seed) == n) or (rows.corr is not None and len(rows.corr) != n):
        raise ValueError("train_rows: one start, lr, seed (and correction) per task")
    if work.engine_path == "per_client" or work.buffers:
        raise ValueError("train_rows: a model with buffers trains one run at a time (the per_client path)")
    return _train(work, alg, tasks, rows, chunk, None)


@dataclass(frozen=True)
class _Shared:
    """train_cohort's rows: one start, lr and seed for all."""

    params: Tensors
    round_lr: float
    seed: int
    correction: Callable[[int], Tensors | None]
    direction: Tensors | None
    vhat0: Tensors | None


def _train(work: Workload, alg: Algorithm, tasks: Sequence[Task], rows, chunk: int, buffers) -> CohortResult:
    spec = alg.spec
    n = len(tasks)
    shared = isinstance(rows, _Shared)
    if work.engine_path == "per_client":
        chunk = 1
    bufs0 = (work.buffers if buffers is None else buffers) or None
    order = sorted(range(n), key=lambda j: (-tasks[j].steps, j))
    if work.x_train.device.type == "cpu":
        tune_allocator()
    sites = dropout_plan(work)
    grad_fn = cohort_grad(work, sites)
    keys = list(rows.params if shared else (rows.starts[0] if rows.starts else {}))
    pieces = []
    size = -(-n // -(-n // chunk)) if n else 1  # balanced: ceil(n / number of chunks)
    for start in range(0, n, size):
        idx = order[start : start + size]
        chunk_tasks = [tasks[j] for j in idx]
        pieces.append(_run_chunk(work, alg, chunk_tasks, _chunk_rows(rows, idx, chunk_tasks, spec.lr_decay),
                                 grad_fn, sites, bufs0))
    steps = [t.steps for t in tasks]
    if n == 0:
        z = torch.zeros(0, dtype=torch.float64)
        return CohortResult((), {}, z, z, None, loss=z, loss_sq=z)
    # rows come out in sorted order; one gather puts them back in task order
    back = torch.as_tensor(np.argsort(np.asarray(order)), device=work.x_train.device)
    deltas = {k: _cat([p[0][k] for p in pieces])[back] for k in keys}
    vhat = {k: _cat([p[1][k] for p in pieces])[back] for k in keys} if alg.keeps_vhat else None
    if shared:
        a_norm = alg.a_norm(steps, StepLrs(rows.round_lr, spec.lr_decay).ratios(), lr=rows.round_lr)
    else:  # one shadow run per distinct lr (exactly each row's own)
        a_norm = torch.zeros(n, dtype=torch.float64)
        for lr in dict.fromkeys(rows.lr):
            at = [j for j in range(n) if rows.lr[j] == lr]
            a_norm[at] = alg.a_norm([steps[j] for j in at], StepLrs(lr, spec.lr_decay).ratios(), lr=lr)
    return CohortResult(
        clients=tuple(t.client for t in tasks),
        deltas=deltas,
        a_norm=a_norm,
        steps=torch.tensor(steps, dtype=torch.float64),
        vhat=vhat,
        buffers={k: _cat([p[2][k] for p in pieces])[back] for k in bufs0} if bufs0 else None,
        loss=(_cat([p[3] for p in pieces])[back] / torch.tensor(steps, dtype=torch.float64, device=back.device).clamp(min=1)).cpu(),
        loss_sq=_cat([p[4] for p in pieces])[back].cpu(),
    )


@dataclass
class _ChunkRows:
    """One chunk's per-row values (rows sorted by steps, longest first).

    ``x0``: the rows' starting models stacked (for shared rows a view of the one start, never
    written); ``lr``: a :class:`StepLrs` when every row has the same lr, else the rows' round lrs;
    ``seeds``: per row; ``corr``: stacked corrections or None; ``direction`` / ``vhat0``: the
    one unstacked value for shared rows, stacked per row otherwise (or None)."""

    x0: Tensors
    lr: StepLrs | list[float]
    decay: float
    seeds: list[int]
    corr: Tensors | None
    direction: Tensors | None
    vhat0: Tensors | None
    per_row: bool = False  # direction and v_hat are stacked per row
    lr_vector: torch.Tensor | None = None  # the rows' lrs as a vector (constant lr within the round)


def _stacked(values: list, keys) -> Tensors | None:
    missing = [v is None for v in values]
    if any(missing) != all(missing):
        raise ValueError("train_rows: some rows carry a value that others lack (a correction, direction or v_hat)")
    if values[0] is None:
        return None
    return {k: torch.stack([v[k] for v in values]) for k in keys}


def _chunk_rows(rows, idx: list[int], tasks: list[Task], decay: float) -> _ChunkRows:
    c = len(idx)
    if isinstance(rows, _Shared):
        params = rows.params
        corr_list = [rows.correction(t.client) for t in tasks]
        corr = None
        if corr_list and corr_list[0] is not None:
            corr = {k: torch.stack([cl[k] for cl in corr_list]) for k in params}
        return _ChunkRows({k: v.unsqueeze(0).expand((c,) + v.shape) for k, v in params.items()},
                          StepLrs(rows.round_lr, decay), decay, [rows.seed] * c, corr, rows.direction, rows.vhat0)
    keys = list(rows.starts[0])
    which = [rows.start[j] for j in idx]
    lrs = [rows.lr[j] for j in idx]
    x0 = {k: torch.stack([rows.starts[s][k] for s in which]) for k in keys}
    corr = None if rows.corr is None else _stacked([rows.corr[j] for j in idx], keys)
    direction = None if rows.direction is None else _stacked([rows.direction[s] for s in which], keys)
    vhat0 = None if rows.vhat0 is None else _stacked([rows.vhat0[s] for s in which], keys)
    lr = StepLrs(lrs[0], decay) if len(set(lrs)) == 1 else lrs
    return _ChunkRows(x0, lr, decay, [rows.seed[j] for j in idx], corr, direction, vhat0, per_row=True)


def _step_lr(cr: _ChunkRows, k: int, a: int, like: torch.Tensor):
    """The lr of step ``k`` of the ``a`` live rows: a float when they share one round lr, else a
    vector (each row's round lr times decay**k, computed in double as the float is, then cast)."""
    if isinstance(cr.lr, StepLrs):
        return cr.lr[k]
    if cr.decay == 1.0:  # the same vector every step: made once, its live prefix read
        if cr.lr_vector is None:
            cr.lr_vector = torch.tensor(cr.lr, dtype=torch.float64).to(device=like.device, dtype=like.dtype)
        return cr.lr_vector[:a]
    return torch.tensor([lr * cr.decay**k for lr in cr.lr[:a]], dtype=torch.float64).to(device=like.device,
                                                                                        dtype=like.dtype)


def _cat(ts: list[torch.Tensor]) -> torch.Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts)


def _run_chunk(work, alg: Algorithm, tasks, cr: _ChunkRows, grad_fn, sites, buffers=None):
    """Steps of one chunk (tasks sorted by steps, longest first): (deltas, v_hat, final buffers
    stacked or None, each client's summed minibatch losses, its summed squared per-sample
    losses). With ``buffers`` the chunk is one client, stepping its own copy of them."""
    spec = alg.spec
    c = len(tasks)
    dev = work.x_train.device
    steps = [t.steps for t in tasks]
    if any(a < b for a, b in zip(steps, steps[1:])):
        raise ValueError("_run_chunk: tasks must be sorted by steps, longest first")
    start = cr.x0  # the rows' starting models (shared rows: a view, never written)
    x0 = start
    x = {k: v.clone() for k, v in start.items()}
    st = alg.client_init(x, cr.vhat0)
    corr = cr.corr
    direction = cr.direction
    per_row_direction = direction is not None and cr.per_row
    tmax = steps[0] if c else 0
    bs = spec.batch_size
    if buffers and c != 1:
        raise ValueError("_run_chunk: a model with buffers is stepped one client at a time")
    bufs = {k: v.clone() for k, v in buffers.items()} if buffers else None
    # minibatches and augmentation draws are handled a block of `span` steps at a time, one
    # gather per block: memory stays bounded whatever tau_i is
    per_step = c * bs * work.x_train[0].numel() * work.x_train.element_size()
    span = max(1, PREGATHER_BYTES // max(per_step, 1))
    seeds = cr.seeds
    batches = [BatchStream(work, s, t, bs) for s, t in zip(seeds, tasks)]
    # per-client draws keyed (seed, "augment", client, key), prefix-stable: chunking-invariant
    aug_rngs = [stream(s, "augment", t.client, t.key) for s, t in zip(seeds, tasks)] if work.augment else None
    gens = []
    if sites:  # dropout: each client's noise from its own stream, blocks of `blk` steps (chunking-invariant)
        size = noise_size(sites, bs)
        # the parameters' dtype (= the inputs' for fedsim's own float data; token ids are int64)
        noise_dtype = next(iter(start.values())).dtype
        blk = max(1, NOISE_BLOCK_BYTES // (size * torch.empty(0, dtype=noise_dtype).element_size()))
        for s, t in zip(seeds, tasks):
            g = torch.Generator(device=dev)
            g.manual_seed(seed_int(s, "dropout", t.client, t.key))
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
            if per_row_direction:
                direction = {n: v[:a] for n, v in direction.items()}
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
        x, st = alg.client_step(x, grads, st, _step_lr(cr, k, a, next(iter(x.values()))), x0=x0, corr=corr,
                                direction=direction)
    done_x.append(x)
    done_st.append(st)
    done_x.reverse()
    done_st.reverse()
    final = {k: _cat([d[k] for d in done_x]) for k in start}
    deltas = {k: final[k] - start[k] for k in start}
    vhat = {k: _cat([d["vhat." + k] for d in done_st]) for k in start} if alg.keeps_vhat else None
    return deltas, vhat, None if bufs is None else {k: v.unsqueeze(0) for k, v in bufs.items()}, loss_sum, sq_sum
