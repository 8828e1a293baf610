"""Clock-only mode (``fedsim run X.yaml --schedule-only``): the system trace without training.

Writes ``clients.csv`` (same columns as a full run; ``a_norm`` empty) and ``rounds.csv`` with the
clock's columns (``round, sim_time, participants, tau_mean, tau_min, tau_max``), for planning.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import numpy as np

from .clock import Clock
from .report.tables import CLIENT_COLUMNS, TableWriter
from .runner import prepare_folder
from .scenario import Scenario

__all__ = ["run_schedule", "client_sizes_and_weights"]

SCHEDULE_ROUND_COLUMNS = ["round", "sim_time", "participants", "tau_mean", "tau_min", "tau_max"]


def client_sizes_and_weights(sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """n_i and p_i without building a model (quadratic: n_i = 1, p_i from data.weights)."""
    if sc.data.name == "quadratic":
        m = sc.data.num_clients
        w = np.ones(m) if sc.data.weights is None else np.asarray(sc.data.weights, dtype=np.float64)
        return np.ones(m, dtype=np.int64), w / w.sum()
    from .data import build_dataset
    from .data.partition import PartitionSpec

    d = sc.data
    ds = build_dataset(
        d.name, clients=d.num_clients, partition=PartitionSpec(**d.partition.model_dump()), seed=sc.data_seed,
        root=d.root, download=d.download, standin=d.standin, alpha=d.alpha, beta=d.beta,
        n_train=d.n_train, n_test=d.n_test,
    )
    n = ds.client_sizes.astype(np.int64)
    return n, n / n.sum()


def run_schedule(sc: Scenario, out: Path, *, force: bool = False) -> None:
    out = Path(out)
    prepare_folder(sc, out, force=force)
    sizes, weights = client_sizes_and_weights(sc)
    clock = Clock(sc.system, sc.round, seed=sc.seed, client_sizes=sizes, weights=weights,
                  batch_size=sc.algorithm.batch_size)
    rounds_w = TableWriter(out / "rounds.csv", SCHEDULE_ROUND_COLUMNS)
    clients_w = TableWriter(out / "clients.csv", CLIENT_COLUMNS)
    try:
        for plan in islice(clock.plans(), sc.rounds):
            done = [j.steps for j in plan.jobs if j.status == "completed" and j.steps > 0]
            rounds_w.write([dict(
                round=plan.round, sim_time=plan.close, participants=len(done),
                tau_mean=float(np.mean(done)) if done else None,
                tau_min=min(done) if done else None, tau_max=max(done) if done else None,
            )])
            clients_w.write(
                dict(round=plan.round, client=j.client, status=j.status, steps=j.steps, start=j.start,
                     end=j.end, version=j.version, staleness=j.staleness, weight=j.weight)
                for j in plan.jobs
            )
    finally:
        rounds_w.close()
        clients_w.close()
