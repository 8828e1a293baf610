"""Everything a run needs, built once from its Scenario: workload, algorithm, engine, clock."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..algorithms.server import server_init
from ..algorithms.spec import resolve
from ..clock import Clock, WorkCost
from ..devices.cost import work_cost
from ..engine.async_run import AsyncEngine
from ..engine.run import SyncEngine
from ..engine.threads import set_threads, thread_budget
from ..engine.train import auto_chunk
from ..engine.workload import build_workload, resolve_device
from ..scenario import Scenario
from ..validate import check_device_available
from .clock import build_clock

__all__ = ["Built", "build_run"]


@dataclass(frozen=True)
class Built:
    """A scenario's engine (its state at round 0), clock, and the cost of its work (FLOPs of one
    local step, bytes per transfer; None for the quadratic problem, which has no model)."""

    engine: SyncEngine
    clock: Clock
    cost: WorkCost | None


def build_run(sc: Scenario) -> Built:
    """Data, model, algorithm, server state, engine and clock for ``sc``; sets torch's threads.

    Everything that can fail on a valid scenario (device, dataset, traces) fails here.
    """
    check_device_available(sc.engine.device)
    device = resolve_device(sc.engine.device)
    dtype = torch.float64 if sc.engine.dtype == "float64" else torch.float32
    work = build_workload(sc, device, dtype)
    spec = resolve(sc.algorithm)
    chunk = (
        auto_chunk(work, device, threads=sc.engine.threads or thread_budget())
        if sc.engine.clients_per_batch == "auto"
        else sc.engine.clients_per_batch
    )
    set_threads(sc.engine.threads, work, chunk)
    cls = AsyncEngine if sc.round.policy == "async" else SyncEngine  # FedBuff / FedAsync
    engine = cls(
        work, spec, dict(work.init_params), server_init(spec, work.init_params), chunk,
        rounds=sc.rounds, seed=sc.seed, train_loss=sc.eval.train_loss,
    )
    cost = None
    if work.module is not None:
        cost = work_cost(work.module, work.input_shape, sc.algorithm.batch_size, spec.uses_control_variates,
                         count_flops=sc.system.compute is not None, payload=sc.system.payload_bytes)
    return Built(engine, build_clock(sc, work.client_sizes, work.weights, cost=cost), cost)
