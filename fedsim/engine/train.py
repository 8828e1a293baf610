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
"""

from __future__ import annotations

import math
import os
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

from ..algorithms.algorithm import Algorithm, algorithm
from ..algorithms.lr import StepLrs
from ..algorithms.spec import AlgoSpec
from ..models.dropout import dropout_noise, keyed_dropout_sites, site_shapes
from ..rng import seed_int, stream
from .augment import augment_batch, augment_draws
from .workload_value import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["Task", "CohortResult", "train_cohort", "BatchStream", "batch_indices", "auto_chunk", "cohort_grad",
           "stacked_forward", "per_client_loss"]


@dataclass(frozen=True)
class Task:
    """One client's local work for a round: ``steps`` local steps keyed by ``key``."""

    client: int
    steps: int
    key: int


@dataclass
class CohortResult:
    clients: tuple[int, ...]  # in the order of the input tasks
    deltas: Tensors  # x_i - x^t, stacked (clients, ...)
    a_norm: torch.Tensor  # float64 (clients,)
    steps: torch.Tensor  # float64 (clients,)
    vhat: Tensors | None  # final AMSGrad v_hat, stacked
    buffers: Tensors | None = None  # the clients' final buffers (BatchNorm statistics), stacked
    weights: torch.Tensor | None = None  # w_i the server used (set by engine.run.train_and_apply)


class BatchStream:
    """A task's global sample indices, read a block of steps at a time: an endless stream of
    per-epoch permutations keyed by (seed, "batches", client, key).

    Each epoch is a fresh permutation of the client's samples (sampling without replacement,
    reshuffled every epoch); step k takes the next B indices of the stream, so tau = floor(E n_i/B)
    steps consume E epochs. Permutations are drawn when needed, so reading the steps in blocks
    gives the same indices as reading them at once.
    """

    def __init__(self, work: Workload, seed: int, task: Task, batch_size: int):
        self.local = work.client_indices[task.client]
        self.rng = stream(seed, "batches", task.client, task.key)
        self.batch_size = batch_size
        self.rest = np.zeros(0, dtype=np.int64)  # drawn, not yet read

    def take(self, steps: int) -> np.ndarray:
        """Indices (steps, B) of the next ``steps`` steps."""
        need = steps * self.batch_size
        if need > len(self.rest) and len(self.local) == 0:
            raise ValueError("BatchStream: a client without samples has no minibatches")
        parts, have = [self.rest], len(self.rest)
        while have < need:
            parts.append(self.rng.permutation(len(self.local)))
            have += len(self.local)
        order = np.concatenate(parts)
        self.rest = order[need:]
        return self.local[order[:need]].reshape(steps, self.batch_size)


def batch_indices(work: Workload, seed: int, task: Task, batch_size: int) -> np.ndarray:
    """Global sample indices (steps, B) of all of a task's steps (``BatchStream`` read at once)."""
    return BatchStream(work, seed, task, batch_size).take(task.steps)


#: CPU rule of ``auto_chunk``: a chunk's stacked parameters stay within about this many bytes.
CPU_CHUNK_BYTES = 2 << 20
#: Largest chunk ``auto_chunk`` picks.
MAX_CHUNK = 128


def auto_chunk(work: Workload, device: torch.device, threads: int = 1) -> int:
    """``engine.clients_per_batch: auto``, a documented rule backed by benchmarks/bench_engine.py.

    * The ``per_client`` engine path (models with buffers, or that ``vmap`` refuses): 1.
    * Conv nets: one client at a time on CPU (a conv step is compute-bound; batching the
      convolutions over clients is no faster there, measured, and holds 16x the activations);
      16 on GPU.
    * Closed-form workloads (quadratic) and other models on GPU: ``MAX_CHUNK``.
    * Other models on CPU: as many clients as keep the chunk's stacked parameters within
      ``CPU_CHUNK_BYTES`` (the backward pass and the solver step stream every client's
      parameters each step; past the cache they run at memory speed), between 1 and
      ``MAX_CHUNK``. Logistic regression on Synthetic (2.4 KB a client): 128. The 200-200 MLP on
      digits (212 KB): 9 -- measured (CPU time, 1 thread) 150-170 us per client-step at 8-16,
      190-200 at 32-64, 475 one at a time. Chunks of a cohort are balanced (16 clients with
      chunk 9 run as 8 + 8). The budget grows with the intra-op ``threads`` (each thread has its
      own cache): on both cores the MLP's best chunks were 12-19 clients (chunk 16: 9.0k
      client-steps/s against 7.3k at 9).
    """
    if work.batched_grad is not None:
        return MAX_CHUNK
    if work.engine_path == "per_client":  # buffers, or a module vmap refuses: one client at a time
        return 1
    conv = work.module is not None and any(isinstance(m, torch.nn.Conv2d) for m in work.module.modules())
    if conv:
        return 16 if device.type == "cuda" else 1
    if device.type != "cpu":
        return MAX_CHUNK
    per_client = sum(v.numel() * v.element_size() for v in work.init_params.values())
    return int(min(MAX_CHUNK, max(1, CPU_CHUNK_BYTES * max(threads, 1) // max(per_client, 1))))


#: A chunk's minibatches are gathered a block of steps at a time, about this many bytes a block.
PREGATHER_BYTES = 32 << 20

_MALLOC_TUNED = False


def tune_allocator() -> bool:
    """Keep freed tensor memory in the process heap instead of returning it to the OS (glibc).

    The pure solver step allocates fresh stacked tensors every step; with glibc's default
    policy, blocks above the (dynamic) mmap threshold are mapped and unmapped each time, so every
    step pays page faults on megabytes of fresh memory (measured: ``x - lr * g`` on 16 MLP
    clients 4 ms instead of 1 ms). Raising ``M_MMAP_THRESHOLD`` / ``M_TRIM_THRESHOLD`` makes
    the heap reuse those blocks. Once per process; off with ``FEDSIM_MALLOC_TUNE=0``; no-op
    where glibc's ``mallopt`` is missing. Returns whether it is in effect.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED or os.environ.get("FEDSIM_MALLOC_TUNE", "1") == "0":
        return _MALLOC_TUNED
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 1 << 30) or libc.mallopt(m_mmap_threshold, 32 << 20)
        ok = ok and libc.mallopt(m_trim_threshold, 1 << 30)
        _MALLOC_TUNED = bool(ok)
    except (OSError, AttributeError):
        _MALLOC_TUNED = False
    return _MALLOC_TUNED


class _StackedLinear(torch.autograd.Function):
    """y_c = x_c W_c^T + b_c for every client c: x (C, B, in), W (C, out, in), b (C, out) or None.

    Its own backward so the weight gradient comes out contiguous, (C, out, in) = dy^T x, as the
    solver step wants it: autograd's ``baddbmm`` backward returns a transposed view, and the
    elementwise update on strided views cost more than the matrix products (benchmarks/).
    """

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return torch.bmm(x, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx = torch.bmm(dy, w) if ctx.needs_input_grad[0] else None
        dw = torch.bmm(dy.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        db = dy.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


def stacked_forward(module: nn.Module | None) -> Callable[[Tensors, torch.Tensor], torch.Tensor] | None:
    """Hand-batched forward for ``nn.Sequential`` of Flatten / Linear / ReLU (logreg, MLP).

    Returns ``f(stacked params (C, ...), x (C, B, ...)) -> logits (C, B, K)`` computing each
    client's forward with its own parameters (one ``baddbmm`` per Linear), or None when the
    module holds any other layer (then the engine uses ``vmap``). With the autograd backward it
    measured 2-3x faster per step than ``vmap(grad_and_value(loss))`` on CPU for these small
    models (logreg, 30 clients: 0.29 against 0.83 ms; MLP, 16 clients: 2.8 against 5.8 ms).
    """
    if not isinstance(module, nn.Sequential):
        return None
    plan: list[tuple[str, str]] = []
    for name, m in module.named_children():
        if isinstance(m, nn.Flatten) and m.start_dim == 1 and m.end_dim == -1:
            plan.append(("flatten", name))
        elif isinstance(m, nn.Linear):
            plan.append(("linear", name))
        elif isinstance(m, nn.ReLU):
            plan.append(("relu", name))
        else:
            return None

    def forward(params: Tensors, x: torch.Tensor) -> torch.Tensor:
        h = x
        for kind, name in plan:
            if kind == "flatten":
                h = h.flatten(2)
            elif kind == "relu":
                h = torch.relu(h)
            else:
                h = _StackedLinear.apply(h, params[name + ".weight"], params.get(name + ".bias"))
        return h

    return forward


Sites = list  # [(KeyedDropout module, per-sample input shape)] in forward order


def _split_noise(u: torch.Tensor, b: int, sites: Sites) -> dict:
    """One client's flat step noise (S,) -> {dropout module: noise (B, *shape)}, sites in order."""
    out, off = {}, 0
    for m, shape in sites:
        n = b * math.prod(shape)
        out[m] = u[off : off + n].view((b,) + tuple(shape))
        off += n
    return out


def noise_size(sites: Sites, batch_size: int) -> int:
    """Entries of one client's dropout noise for one step (all sites, whole minibatch)."""
    return batch_size * sum(math.prod(shape) for _, shape in sites)


def cohort_grad(
    work: Workload, sites: Sites | None = None
) -> Callable[..., tuple[Tensors, torch.Tensor]]:
    """``g(stacked params, xb (C, B, ...), yb (C, B), noise=None) -> (per-client grads, per-client loss (C,))``.

    The workload's closed form when it has one (quadratic); otherwise the gradient of
    ``sum_c loss_c`` (cross-entropy, mean over the client's minibatch) with respect to the stacked
    parameters, whose row c is exactly client c's gradient because the losses are independent.
    Equal to ``vmap(grad_and_value(work.loss), randomness="different")`` (tested). With ``sites``
    (the model's dropout sites, ``fedsim.models.dropout``) and ``noise`` (C, S) uniform noise,
    client c's dropout masks are ``noise[c] >= p`` (site by site, ``noise_size``), the same
    whether the client is stepped alone or batched; without noise dropout draws from torch's
    generator, independently per client.
    """
    if work.batched_grad is not None:
        return lambda params, xb, yb, noise=None, buffers=None: work.batched_grad(params, xb, yb)
    fwd = stacked_forward(work.module) if not work.buffers else None
    if fwd is None:
        predict = work.predict

        def keyed(params: Tensors, xb: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
            with dropout_noise(_split_noise(u, xb.shape[0], sites)):
                return predict(params, xb)

        vfwd = vmap(predict, randomness="different")
        vkeyed = vmap(keyed, randomness="different")

        def fwd(params: Tensors, xb: torch.Tensor, noise: torch.Tensor | None = None,
                buffers: Tensors | None = None) -> torch.Tensor:
            if xb.shape[0] == 1:  # one client: the module itself, no batching rules
                p1 = {k: v[0] for k, v in params.items()}
                if buffers:  # the client's own buffers, updated in place by the module
                    p1 = {**p1, **buffers}
                out = predict(p1, xb[0]) if noise is None else keyed(p1, xb[0], noise[0])
                return out.unsqueeze(0)
            return vfwd(params, xb) if noise is None else vkeyed(params, xb, noise)
    else:
        stacked = fwd

        def fwd(params: Tensors, xb: torch.Tensor, noise: torch.Tensor | None = None,
                buffers: Tensors | None = None) -> torch.Tensor:
            return stacked(params, xb)  # Linear/ReLU stacks have no dropout

    client_losses = per_client_loss(work.loss_fn)

    def grad_fn(params: Tensors, xb: torch.Tensor, yb: torch.Tensor, noise: torch.Tensor | None = None,
                buffers: Tensors | None = None):
        leaves = [v.detach().requires_grad_(True) for v in params.values()]
        with torch.enable_grad():
            logits = fwd(dict(zip(params, leaves)), xb, noise, buffers)
            loss = client_losses(logits, yb)
            grads = torch.autograd.grad(loss.sum(), leaves, materialize_grads=True)
        return dict(zip(params, grads)), loss.detach()

    return grad_fn


def per_client_loss(loss_fn: Callable | None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``(outputs (C, B, ...), targets (C, B, ...)) -> (C,)``: each client's mean loss on its
    minibatch. ``loss_fn`` None: cross-entropy over the last dimension of the outputs (targets
    (C, B) classes or (C, B, L) token sequences, mean over all of a client's targets); else the
    user's ``loss_fn(outputs, targets) -> scalar`` per client (``vmap`` over clients, or called
    directly for one client)."""
    if loss_fn is None:

        def cross_entropy(logits: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            k = logits.shape[-1]
            return F.cross_entropy(logits.reshape(-1, k), yb.reshape(-1), reduction="none").view(yb.shape[0], -1).mean(1)

        return cross_entropy
    batched = vmap(loss_fn)

    def custom(logits: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        if logits.shape[0] == 1:
            return loss_fn(logits[0], yb[0]).reshape(1)
        return batched(logits, yb)

    return custom


#: Per client, dropout noise is drawn this many bytes' worth of steps at a time (at least one step).
NOISE_BLOCK_BYTES = 1 << 20

_SITES: "weakref.WeakKeyDictionary[nn.Module, Sites]" = weakref.WeakKeyDictionary()


def dropout_plan(work: Workload) -> Sites | None:
    """The workload model's dropout sites with their per-sample activation shapes, or None when it
    has no dropout in training mode. Plain ``nn.Dropout`` layers become ``KeyedDropout`` (in
    place); shapes come from one dry forward on one training sample (cached per module)."""
    mods = keyed_dropout_sites(work.module) if work.module is not None else []
    if not any(m.training for m in mods):
        return None
    sites = _SITES.get(work.module)
    if sites is None:
        state = {**work.init_params, **{k: v.clone() for k, v in work.buffers.items()}}
        sites = site_shapes(lambda xb: work.predict(state, xb), work.x_train[0])
        _SITES[work.module] = sites
    return sites or None


def train_cohort(
    work: Workload,
    spec: AlgoSpec,
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
    """Run every task's local steps from ``params``; results come back in task order.

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
    alg = algorithm(spec)  # the chains, built once per spec
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
        return CohortResult((), {}, torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64), None)
    # rows come out in sorted order; one gather puts them back in task order
    back = torch.as_tensor(np.argsort(np.asarray(order)), device=work.x_train.device)
    deltas = {k: _cat([p[0][k] for p in pieces])[back] for k in params}
    vhat = {k: _cat([p[1][k] for p in pieces])[back] for k in params} if spec.keeps_vhat else None
    return CohortResult(
        clients=tuple(t.client for t in tasks),
        deltas=deltas,
        a_norm=alg.a_norm(steps, lrs.ratios(), lr=round_lr),
        steps=torch.tensor(steps, dtype=torch.float64),
        vhat=vhat,
        buffers={k: _cat([p[2][k] for p in pieces])[back] for k in bufs0} if bufs0 else None,
    )


def _cat(ts: list[torch.Tensor]) -> torch.Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts)


def _stack(t: Tensors, c: int) -> Tensors:
    return {k: v.unsqueeze(0).expand((c,) + v.shape).clone() for k, v in t.items()}


def _run_chunk(work, alg: Algorithm, params, tasks, lrs, seed, grad_fn, correction, direction, vhat0, sites,
               buffers=None):
    """Steps of one chunk (tasks sorted by steps, longest first): (deltas, v_hat, final buffers
    stacked or None). With ``buffers`` the chunk is one client, stepping its own copy of them."""
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
        grads, _ = grad_fn(x, xb, yb, noise, bufs) if bufs is not None else grad_fn(x, xb, yb, noise)
        x, st = alg.client_step(x, grads, st, lrs[k], x0=x0, corr=corr, direction=direction)
    done_x.append(x)
    done_st.append(st)
    done_x.reverse()
    done_st.reverse()
    final = {k: _cat([d[k] for d in done_x]) for k in params}
    deltas = {k: final[k] - params[k].unsqueeze(0) for k in params}
    vhat = {k: _cat([d["vhat." + k] for d in done_st]) for k in params} if spec.keeps_vhat else None
    return deltas, vhat, None if bufs is None else {k: v.unsqueeze(0) for k, v in bufs.items()}
