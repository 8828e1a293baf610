"""The simulation loop: clock plans -> local training -> server update -> rows.

Small on purpose: each stage is a function of explicit values; this file only wires them and
hands rows to the run-folder writers.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from ..algorithms.server import RoundUpdate, ServerState, client_correction, server_apply, server_init
from ..algorithms.spec import AlgoSpec, resolve
from ..clock import RoundPlan
from ..run.clock import build_clock
from .evaluate import global_objective, test_metrics
from . import distributed
from .distributed import train_cohort_sharded
from .train import Task, auto_chunk, train_cohort
from .threads import default_threads, thread_budget
from .workload import Workload, build_workload, resolve_device

Tensors = dict[str, torch.Tensor]

__all__ = ["Simulation", "RunSummary", "round_weights", "build_simulation"]


@dataclass
class RunSummary:
    rounds: int
    sim_time: float
    test_acc: float
    test_loss: float
    train_loss: float
    diverged: bool
    dist_to_opt: float | None = None
    data: str = ""  # dataset actually used, e.g. "cifar10-standin"


def round_weights(plan: RoundPlan) -> dict[int, float]:
    """Aggregation weight w_i per completed client.

    The clock's raw sampling weights (ALGORITHMS.md section 1) of selected clients that did not
    report are redistributed over those that did, in proportion to their raw weights.
    """
    selected = [j for j in plan.jobs if j.status != "offline"]
    done = [j for j in selected if j.status == "completed" and j.steps > 0]
    s_sel = sum(j.weight for j in selected)
    s_done = sum(j.weight for j in done)
    if s_done <= 0:
        return {}
    return {j.client: j.weight * s_sel / s_done for j in done}


@dataclass
class Simulation:
    """Explicit state of a synchronous run between rounds (what a checkpoint holds)."""

    sc: object
    work: Workload
    spec: AlgoSpec
    params: Tensors
    server: ServerState
    chunk: int

    @cached_property
    def client_p(self) -> dict[int, float]:
        """p_i of every client (FedNova-VR's c = sum_j p_j c_j)."""
        return {i: float(p) for i, p in enumerate(self.work.weights)}

    def step(self, plan: RoundPlan) -> tuple[dict, list[dict]]:
        """Execute one round plan; returns (round row, client rows)."""
        sc, spec, work = self.sc, self.spec, self.work
        lr = spec.round_lr(plan.round, sc.rounds)
        weights = round_weights(plan)
        done = [j for j in plan.jobs if j.client in weights and j.status == "completed"]
        tasks = [Task(j.client, j.steps, j.key) for j in done]
        if work.module is not None and not work.module.training:
            work.module.train()
        train = train_cohort_sharded if distributed.world()[1] > 1 else train_cohort  # torchrun: split over ranks
        res = train(
            work.for_clients([t.client for t in tasks]), spec, self.params, tasks,
            round_lr=lr, seed=sc.seed, chunk=self.chunk,
            correction=lambda i: client_correction(spec, self.server, i, self.params),
            direction=self.server.direction,
            vhat0=self.server.vhat,
        )
        w = torch.tensor([weights[t.client] for t in tasks], dtype=torch.float64)
        upd = RoundUpdate(
            clients=res.clients, deltas=res.deltas, weights=w, a_norm=res.a_norm, steps=res.steps,
            lr=lr, num_clients=work.num_clients,
            client_p=self.client_p, vhat=res.vhat,
        )
        self.params, self.server = server_apply(spec, self.params, self.server, upd)
        a_of = dict(zip((t.client for t in tasks), res.a_norm.tolist()))
        client_rows = [
            dict(
                round=plan.round, client=j.client, status=j.status, steps=j.steps,
                a_norm=a_of.get(j.client, 0.0), start=j.start, end=j.end,
                version=j.version, staleness=j.staleness, weight=weights.get(j.client, 0.0),
            )
            for j in plan.jobs
        ]
        taus = [t.steps for t in tasks]
        row = dict(
            round=plan.round, sim_time=plan.close, participants=len(tasks),
            tau_mean=float(np.mean(taus)) if taus else None,
            tau_min=min(taus) if taus else None, tau_max=max(taus) if taus else None,
            lr=lr, diverged=0,
        )
        return row, client_rows

    def state_dict(self) -> dict:
        """Global model and server state, as plain containers of tensors (for checkpoints)."""
        from dataclasses import asdict

        return {"params": self.params, "server": asdict(self.server)}

    def load_state(self, state: dict) -> None:
        dev = self.work.x_train.device
        self.params = {k: v.to(dev) for k, v in state["params"].items()}
        self.server = ServerState(**_to_device(state["server"], dev))

    def finite(self) -> bool:
        return all(bool(torch.isfinite(v).all()) for v in self.params.values())

    def evaluate(self, row: dict) -> dict:
        """Evaluation metrics into ``row`` (under torchrun every rank takes its share of batches)."""
        work = self.work
        if work.module is not None:
            work.module.eval()
        if self.sc.eval.train_loss or work.is_quadratic:
            row["train_loss"] = global_objective(work, self.params)
        row["test_loss"], row["test_acc"] = test_metrics(work, self.params)
        if work.optimum is not None:
            row["dist_to_opt"] = float(torch.linalg.vector_norm(self.params["x"].double().cpu() - work.optimum))
        return row


def build_simulation(sc) -> tuple[Simulation, Clock]:
    """Workload, algorithm, server state and clock for scenario ``sc``."""
    device = resolve_device(sc.engine.device)
    dtype = torch.float64 if sc.engine.dtype == "float64" else torch.float32
    work = build_workload(sc, device, dtype)
    spec = resolve(sc.algorithm)
    chunk = (
        auto_chunk(work, device, threads=sc.engine.threads or thread_budget())
        if sc.engine.clients_per_batch == "auto"
        else sc.engine.clients_per_batch
    )
    torch.set_num_threads(sc.engine.threads or default_threads(work, chunk))
    cls = Simulation
    if sc.round.policy == "async":  # FedBuff / FedAsync (fedsim/engine/async_run.py)
        from .async_run import AsyncSimulation as cls
    sim = cls(sc, work, spec, dict(work.init_params), server_init(spec, work.init_params), chunk)
    return sim, build_clock(sc, work.client_sizes, work.weights)


def simulate(sc, writers, *, progress=None, start_round: int = 0, sim: Simulation | None = None,
             on_round=None) -> RunSummary:
    """Run rounds ``start_round..sc.rounds-1`` and hand rows to ``writers`` (rounds, clients)."""
    clock = None
    if sim is None:
        sim, clock = build_simulation(sc)
    else:
        clock = build_clock(sc, sim.work.client_sizes, sim.work.weights)
    rounds_w, clients_w = writers
    last = {}
    diverged = False
    t0 = time.perf_counter()
    for plan in islice(clock.plans(), start_round, sc.rounds):
        row, client_rows = sim.step(plan)
        ok = sim.finite()
        final = plan.round == sc.rounds - 1 or not ok
        if ok and (final or (plan.round + 1) % sc.eval.every == 0):
            row = sim.evaluate(row)
        if not ok:
            row["diverged"] = 1
            diverged = True
        clients_w.write(client_rows)
        rounds_w.write([row])
        last = row
        if progress is not None:
            progress(row, time.perf_counter() - t0)
        if on_round is not None:
            on_round(sim, plan)
        if not ok:
            break
    return RunSummary(
        rounds=int(last.get("round", -1)) + 1,
        sim_time=float(last.get("sim_time", 0.0)),
        test_acc=_num(last.get("test_acc")),
        test_loss=_num(last.get("test_loss")),
        train_loss=_num(last.get("train_loss")),
        diverged=diverged,
        dist_to_opt=last.get("dist_to_opt"),
    )


def _to_device(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, dict):
        return {k: _to_device(v, dev) for k, v in x.items()}
    return x


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def progress_printer(name: str, total: int, stream=sys.stderr):
    """A one-line progress display when ``stream`` is a terminal; None otherwise."""
    if not stream.isatty():
        return None

    def show(row: dict, wall: float) -> None:
        acc = row.get("test_acc")
        acc_s = "" if acc is None or (isinstance(acc, float) and math.isnan(acc)) else f" acc {acc:.4f}"
        stream.write(f"\r{name}: round {row['round'] + 1}/{total}  t_sim {row['sim_time']:.1f}s{acc_s}  wall {wall:.1f}s ")
        if row["round"] + 1 == total or row.get("diverged"):
            stream.write("\n")
        stream.flush()

    return show
