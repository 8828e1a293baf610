"""Many processes: ``torchrun --nproc_per_node=N -m fedsim run X.yaml``.

Every rank builds the same simulation from the same scenario: the same data, initial model and
clock (the clock is a deterministic function of the seed, so no schedule is ever sent). Each
round, the clients that report are split over the ranks, longest job first by expected cost
(LPT: a job's cost is its step count; the next longest job goes to the least loaded rank). Each
rank trains its share with :func:`fedsim.engine.train.train_cohort` and the per-client results
(deltas, v_hat, ||a_i||_1) are combined with ``all_gather`` (gloo on CPU, NCCL on GPU), so
every rank holds the whole cohort's results in task order and runs the identical server update.
Evaluation batches are shared the same way (:mod:`fedsim.engine.evaluate`). Rank 0
writes the run folder; the other ranks write nothing (:mod:`fedsim.runner`).

Results match a single process: the same clients do the same steps from the same model with the
same minibatches, and the server sees the same rows in the same order (float64 runs are
bit-identical in the tests; dropout masks are keyed by (seed, client, key, step), so they do not
depend on the split either).

Across nodes use torchrun's usual flags (``--nnodes``, ``--node_rank``, ``--rdzv-endpoint``); rank
0's node holds the run folder. ``--resume`` reads the checkpoint on rank 0 and broadcasts it
(:func:`fedsim.runner.ranks.agree`).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from .train import CohortResult, Task, train_cohort

__all__ = [
    "init_from_env",
    "shutdown",
    "world",
    "is_main",
    "lpt_assign",
    "train_cohort_sharded",
    "broadcast_object",
    "all_reduce_sum",
]

Tensors = dict[str, torch.Tensor]


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() else None


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when no process group is initialized."""
    dist = _dist()
    if dist is None or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def is_main() -> bool:
    return world()[0] == 0


def init_from_env(device: torch.device) -> bool:
    """Join the process group that torchrun describes (``WORLD_SIZE`` > 1); no-op otherwise.

    Backend: NCCL when ``device`` is CUDA (each rank on ``cuda:LOCAL_RANK``), gloo on CPU (each
    rank then gets ``cores // local ranks`` intra-op threads at most). Returns whether a group
    with more than one rank is active.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    dist = _dist()
    if dist is None:
        raise RuntimeError("torch.distributed is not available in this torch build")
    if dist.is_initialized():
        return dist.get_world_size() > 1
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // max(local, 1))))
        dist.init_process_group("gloo")
    return dist.get_world_size() > 1


def shutdown() -> None:
    dist = _dist()
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()


def lpt_assign(costs: Sequence[float], ranks: int) -> list[list[int]]:
    """Longest processing time first: job indices per rank (deterministic; ties to the lower
    index / lower rank). Each rank's list is in the order the jobs were assigned."""
    load = [0.0] * ranks
    out: list[list[int]] = [[] for _ in range(ranks)]
    for j in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        r = min(range(ranks), key=lambda r: (load[r], r))
        out[r].append(j)
        load[r] += costs[j]
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` from rank ``src`` on every rank (identity in a single process)."""
    rank, size = world()
    if size == 1:
        return obj
    box = [obj if rank == src else None]
    dist = _dist()
    dist.broadcast_object_list(box, src=src, device=_collective_device())
    return box[0]


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Element-wise sum of ``t`` over all ranks (a new tensor on ``t``'s device)."""
    dev = _collective_device()
    buf = t.clone() if dev is None else t.to(dev)
    _dist().all_reduce(buf)
    return buf.to(t.device)


def _collective_device() -> torch.device | None:
    dist = _dist()
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def train_cohort_sharded(
    work,
    alg,
    params: Tensors,
    tasks: Sequence[Task],
    *,
    round_lr: float,
    seed: int,
    chunk: int,
    **kw,
) -> CohortResult:
    """:func:`train_cohort` over all ranks: same arguments, same result on every rank.

    Each rank trains the tasks :func:`lpt_assign` gives it; an ``all_gather`` of the packed
    per-client rows (deltas and v_hat in the parameter dtype) and one of their float64 scalars
    (||a_i||_1 and the reported losses, exactly as each rank's ``train_cohort`` computed them) put every
    client's result back in task order on every rank.
    """
    rank, size = world()
    if size == 1:
        return train_cohort(work, alg, params, tasks, round_lr=round_lr, seed=seed, chunk=chunk, **kw)
    n = len(tasks)
    if n == 0:
        return train_cohort(work, alg, params, tasks, round_lr=round_lr, seed=seed, chunk=chunk, **kw)
    if work.buffers:
        from ..errors import ScenarioError

        raise ScenarioError("model: a model with buffers (BatchNorm statistics) is not supported under torchrun yet")
    groups = lpt_assign([float(t.steps) for t in tasks], size)
    mine = groups[rank]
    local = train_cohort(work, alg, params, [tasks[j] for j in mine], round_lr=round_lr, seed=seed, chunk=chunk, **kw)
    names = list(params)
    with_vhat = alg.keeps_vhat
    dev = next(iter(params.values())).device
    dtype = next(iter(params.values())).dtype
    sizes = [params[k].numel() for k in names]
    width = sum(sizes) * (2 if with_vhat else 1)
    rows = max(len(g) for g in groups)
    packed = torch.zeros((rows, width), dtype=dtype, device=dev)
    scalars = torch.zeros((rows, 3), dtype=torch.float64, device=dev)  # a_norm, loss, loss_sq
    if mine:
        parts = [local.deltas[k].reshape(len(mine), -1) for k in names]
        if with_vhat:
            parts += [local.vhat[k].reshape(len(mine), -1) for k in names]
        packed[: len(mine)] = torch.cat(parts, dim=1)
        scalars[: len(mine), 0] = local.a_norm.to(dev)
        scalars[: len(mine), 1] = local.loss.to(dev)
        scalars[: len(mine), 2] = local.loss_sq.to(dev)
    dist = _dist()
    all_packed = [torch.empty_like(packed) for _ in range(size)]
    all_scalars = [torch.empty_like(scalars) for _ in range(size)]
    dist.all_gather(all_packed, packed)
    dist.all_gather(all_scalars, scalars)
    # back to task order: row i of rank r's block is task groups[r][i]
    where = torch.empty(n, dtype=torch.long)
    for r, g in enumerate(groups):
        for i, j in enumerate(g):
            where[j] = r * rows + i
    flat = torch.cat(all_packed)[where.to(dev)]
    per_client = torch.cat(all_scalars)[where.to(dev)].cpu()
    cols = flat.split(sizes * (2 if with_vhat else 1), dim=1)
    deltas = {k: c.reshape((n,) + params[k].shape) for k, c in zip(names, cols[: len(names)])}
    vhat = None
    if with_vhat:
        vhat = {k: c.reshape((n,) + params[k].shape) for k, c in zip(names, cols[len(names):])}
    return CohortResult(
        clients=tuple(t.client for t in tasks),
        deltas=deltas,
        a_norm=per_client[:, 0].contiguous(),
        steps=torch.tensor([t.steps for t in tasks], dtype=torch.float64),
        vhat=vhat,
        loss=per_client[:, 1].contiguous(),
        loss_sq=per_client[:, 2].contiguous(),
    )
