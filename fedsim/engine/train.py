"""Execute a round's local work: chunks of clients stepped together with ``torch.func``.

A chunk stacks the global parameters once per client and runs ``vmap(grad_and_value(loss))``
over (params, minibatch) pairs; clients with fewer steps than the longest in the chunk are frozen
by a mask on the whole solver state. Jobs are sorted by step count before chunking, so padding
stays small. ``clients_per_batch = 1`` is the one-client-at-a-time loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch.func import grad_and_value, vmap

from ..algorithms.local import a_norm, init_state, local_step, masked
from ..algorithms.spec import AlgoSpec
from ..rng import seed_int, stream
from .augment import augment_batch, augment_draws
from .workload import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["Task", "CohortResult", "train_cohort", "batch_indices", "auto_chunk"]


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
    loss: torch.Tensor  # mean minibatch loss over each client's steps (float64)
    vhat: Tensors | None  # final AMSGrad v_hat, stacked


def batch_indices(work: Workload, seed: int, task: Task, batch_size: int) -> np.ndarray:
    """Global sample indices (steps, B) for a task: an endless stream of per-epoch permutations.

    Each epoch is a fresh permutation of the client's samples (sampling without replacement,
    reshuffled every epoch); step k takes the next B indices of the stream, so tau = floor(E n_i/B)
    steps consume E epochs. The stream is keyed by (seed, "batches", client, key).
    """
    local = work.client_indices[task.client]
    n = len(local)
    need = task.steps * batch_size
    if need == 0:
        return np.zeros((0, batch_size), dtype=np.int64)
    rng = stream(seed, "batches", task.client, task.key)
    epochs = -(-need // n)
    order = np.concatenate([rng.permutation(n) for _ in range(epochs)])[:need]
    return local[order].reshape(task.steps, batch_size)


def auto_chunk(work: Workload, device: torch.device) -> int:
    """Documented rule: conv nets one client at a time on CPU, 16 on GPU; small models 128."""
    conv = work.module is not None and any(isinstance(m, torch.nn.Conv2d) for m in work.module.modules())
    if conv:
        return 16 if device.type == "cuda" else 1
    return 128


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
) -> CohortResult:
    """Run every task's local steps from ``params``; results come back in task order."""
    n = len(tasks)
    order = sorted(range(n), key=lambda j: (-tasks[j].steps, j))
    max_steps = max((t.steps for t in tasks), default=0)
    lrs = [round_lr * spec.lr_decay**k for k in range(max_steps)]
    out_delta: dict[str, list] = {k: [None] * n for k in params}
    out_vhat: dict[str, list] | None = {k: [None] * n for k in params} if spec.solver == "amsgrad" else None
    losses = torch.zeros(n, dtype=torch.float64)
    grad_fn = work.batched_grad or vmap(grad_and_value(work.loss), randomness="different")
    for start in range(0, n, chunk):
        idx = order[start : start + chunk]
        chunk_tasks = [tasks[j] for j in idx]
        deltas, loss, vhat = _run_chunk(
            work, spec, params, chunk_tasks, lrs, seed, grad_fn, correction, direction, vhat0
        )
        for row, j in enumerate(idx):
            for k in params:
                out_delta[k][j] = deltas[k][row]
                if vhat is not None:
                    out_vhat[k][j] = vhat[k][row]
            losses[j] = loss[row]
    steps = [t.steps for t in tasks]
    ratios = [lr / round_lr for lr in lrs]
    return CohortResult(
        clients=tuple(t.client for t in tasks),
        deltas={k: torch.stack(v) for k, v in out_delta.items()} if n else {},
        a_norm=a_norm(spec, steps, ratios, lr=round_lr) if n else torch.zeros(0, dtype=torch.float64),
        steps=torch.tensor(steps, dtype=torch.float64),
        loss=losses,
        vhat={k: torch.stack(v) for k, v in out_vhat.items()} if (out_vhat and n) else None,
    )


def _stack(t: Tensors, c: int) -> Tensors:
    return {k: v.unsqueeze(0).expand((c,) + v.shape).clone() for k, v in t.items()}


def _run_chunk(work, spec, params, tasks, lrs, seed, grad_fn, correction, direction, vhat0):
    c = len(tasks)
    dev = work.x_train.device
    x0 = _stack(params, c)
    x = {k: v.clone() for k, v in x0.items()}
    st = init_state(spec, x, vhat0)
    corr_list = [correction(t.client) for t in tasks]
    corr = None
    if corr_list[0] is not None:
        corr = {k: torch.stack([cl[k] for cl in corr_list]) for k in params}
    steps = torch.tensor([t.steps for t in tasks], device=dev)
    tmax = int(steps.max().item())
    bs = spec.batch_size
    idx = np.zeros((c, tmax, bs), dtype=np.int64)
    for row, t in enumerate(tasks):
        idx[row, : t.steps] = batch_indices(work, seed, t, bs)
    idx_t = torch.as_tensor(idx, device=dev)
    aug = None
    if work.augment:  # per-client draws keyed (seed, "augment", client, key): chunking-invariant
        draws = [augment_draws(stream(seed, "augment", t.client, t.key), (tmax, bs)) for t in tasks]
        aug = [torch.as_tensor(np.stack([d[i] for d in draws]), device=dev) for i in range(3)]
    torch.manual_seed(seed_int(seed, "dropout", tasks[0].client, tasks[0].key))
    loss_sum = torch.zeros(c, dtype=torch.float64, device=dev)
    for k in range(tmax):
        ib = idx_t[:, k]
        xb, yb = work.x_train[ib], work.y_train[ib]
        if aug is not None:
            xb = augment_batch(xb, aug[0][:, k], aug[1][:, k], aug[2][:, k])
        grads, loss = grad_fn(x, xb, yb)
        nx, ns = local_step(spec, x, grads, st, lrs[k], x0=x0, corr=corr, direction=direction)
        mask = steps > k
        x = masked(mask, nx, x)
        st = masked(mask, ns, st) if st else st
        loss_sum += torch.where(mask, loss.detach().to(torch.float64), 0.0)
    deltas = {k: x[k] - x0[k] for k in params}
    vhat = {k: st["vhat." + k] for k in params} if spec.solver == "amsgrad" else None
    mean_loss = (loss_sum / steps.clamp(min=1)).cpu()
    return deltas, mean_loss, vhat
