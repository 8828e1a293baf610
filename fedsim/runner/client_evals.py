"""Accuracy where the clients are (``eval.per_client``): ``client_evals.csv``
(docs/client-accuracy.md).

The global model is evaluated on each sampled client's own test data
(:mod:`fedsim.engine.client_eval`) on the time grid of ``evals.csv`` (``eval.every_seconds``) or,
without one, after every round that is evaluated (``eval.every`` and the last). Each evaluation
writes one row per group, in long format: ``all`` (every sampled client) and ``tier0`` ..
``tier{T-1}``, the device tiers (speed quantiles of the whole population, tier 0 the slowest).

Columns (:data:`CLIENT_EVAL_COLUMNS`): ``sim_time, round, group, clients`` (clients evaluated in
the group), ``acc_mean, acc_std`` (unweighted mean and population standard deviation of the
clients' accuracies), ``acc_worst10, acc_best10`` (mean accuracy of the ceil(10 %) clients with
the lowest / highest accuracy, q-FFL's and Ditto's "worst 10 %"), ``loss_mean`` (mean of the
clients' mean test losses). Empty cells: no client in the group, or no accuracy (targets that are
not classes).

Sample: ``eval.per_client.clients`` clients drawn uniformly without replacement from the stream
``(data seed, "client-eval")``, sorted; those whose test part is empty are left out. A resumed run
keeps the rows before the round (grid: the time) it resumes from and recomputes the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..engine.request import ClientEvalRequest, drive
from ..report.tables import TableWriter
from ..rng import stream
from .files import write_atomic

__all__ = ["CLIENT_EVAL_COLUMNS", "ClientEvalSetup", "speed_tiers", "summary_rows", "prepare_client_evals",
           "ClientEvals", "sample_clients"]

CLIENT_EVAL_COLUMNS = ["sim_time", "round", "group", "clients", "acc_mean", "acc_std", "acc_worst10", "acc_best10",
                       "loss_mean"]


def speed_tiers(speeds: Sequence[float], tiers: int) -> np.ndarray:
    """Each client's device tier: clients sorted by speed (ties: lower client first) and cut into
    ``tiers`` quantile groups, ``tier = floor(tiers * rank / m)`` (rank 0 the slowest)."""
    s = np.asarray(speeds, dtype=np.float64)
    m = len(s)
    rank = np.empty(m, dtype=np.int64)
    rank[np.argsort(s, kind="stable")] = np.arange(m)
    return (rank * int(tiers)) // m


def sample_clients(m: int, k: int, seed: int) -> np.ndarray:
    """min(k, m) clients, uniform without replacement from ``(seed, "client-eval")``, sorted."""
    if k >= m:
        return np.arange(m, dtype=np.int64)
    return np.sort(stream(seed, "client-eval").choice(m, size=k, replace=False)).astype(np.int64)


def _tail_mean(x: np.ndarray, worst: bool) -> float:
    k = math.ceil(0.1 * len(x))
    s = np.sort(x)
    return float(s[:k].mean() if worst else s[-k:].mean())


def summary_rows(acc: np.ndarray, loss: np.ndarray, tiers: np.ndarray, num_tiers: int) -> list[dict]:
    """The groups' rows (without ``sim_time`` and ``round``): ``all``, then ``tier0`` ..."""
    rows = []
    groups = [("all", np.ones(len(acc), dtype=bool))] + [(f"tier{t}", tiers == t) for t in range(num_tiers)]
    for name, mask in groups:
        a, l = acc[mask], loss[mask]
        row: dict[str, Any] = {"group": name, "clients": int(mask.sum())}
        if len(a) and np.isfinite(a).all():
            row.update(acc_mean=float(a.mean()), acc_std=float(a.std()), acc_worst10=_tail_mean(a, True),
                       acc_best10=_tail_mean(a, False))
        if len(l):
            row["loss_mean"] = float(l.mean())
        rows.append(row)
    return rows


@dataclass(frozen=True, eq=False)
class ClientEvalSetup:
    """The sampled clients, their tiers and test parts (tensors), built with the run."""

    clients: np.ndarray
    tiers: np.ndarray
    num_tiers: int
    parts: list


def prepare_client_evals(sc, data, held, clock, device, dtype) -> ClientEvalSetup:
    """The setup of ``sc.eval.per_client`` for ``data`` (after any holdout; ``held``: a Dataset's
    held-out indices) and the run's ``clock`` (the device speeds the tiers cut)."""
    from ..engine.client_eval import client_test_parts
    from ..errors import ScenarioError

    pc = sc.eval.per_client
    m = clock.num_clients
    sample = sample_clients(m, pc.clients, sc.data_seed)
    try:
        parts = client_test_parts(data, sample.tolist(), device, dtype, held)
    except TypeError:
        raise ScenarioError(f"eval.per_client.holdout: {sc.data.name} has no per-client test data; give the share "
                            "of each client's examples to hold out") from None
    keep = np.array([len(y) > 0 for _, y in parts], dtype=bool)
    if not keep.any():
        raise ScenarioError("eval.per_client: none of the sampled clients has a test example")
    tiers = speed_tiers(clock.speeds, pc.tiers)[sample]
    return ClientEvalSetup(sample[keep], tiers[keep], int(pc.tiers), [p for p, k in zip(parts, keep) if k])


class ClientEvals:
    """Writes ``client_evals.csv``: after evaluated rounds (:meth:`on_round`, a sink) or on the
    grid of an :class:`~fedsim.runner.evals.EvalGrid` (:meth:`wrap`)."""

    def __init__(self, setup: ClientEvalSetup, path: Path, engine):
        self.setup, self.path, self.engine = setup, Path(path), engine
        self.writer: TableWriter | None = None

    # -- evaluation
    def metrics(self) -> list[dict]:
        return drive(self.metrics_steps())

    def metrics_steps(self):
        """:meth:`metrics` as a generator: yields the
        :class:`~fedsim.engine.request.ClientEvalRequest` of the current model."""
        work = self.engine.work
        if work.module is not None:
            work.module.eval()
        acc, loss = yield ClientEvalRequest(work, self.engine.model_state(), self.setup.parts)
        return summary_rows(acc, loss, self.setup.tiers, self.setup.num_tiers)

    # -- the file
    def open(self, keep=None) -> None:
        """Start the table; ``keep(row) -> bool`` (a resumed run): rows of the old file kept."""
        if keep is None:
            self.path.unlink(missing_ok=True)
        elif self.path.is_file():
            import pandas as pd

            old = pd.read_csv(self.path, keep_default_na=False, dtype=str) if self.path.stat().st_size else None
            lines = [",".join(CLIENT_EVAL_COLUMNS) + "\n"]
            if old is not None:
                for _, r in old.iterrows():
                    if keep(float(r["sim_time"]), int(r["round"])):
                        lines.append(",".join(str(r[c]) for c in CLIENT_EVAL_COLUMNS) + "\n")
            write_atomic(self.path, "".join(lines).encode())
        self.writer = TableWriter(self.path, CLIENT_EVAL_COLUMNS)

    def write(self, sim_time: float, round_: int, rows: list[dict]) -> None:
        self.writer.write([{"sim_time": float(sim_time), "round": int(round_), **r} for r in rows])

    def sync(self) -> None:
        if self.writer is not None:
            self.writer.sync()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    # -- hooks
    def on_round(self, record, clients):
        """A sink: after a round that was evaluated (and is finite), one evaluation; a generator
        (yields its request: :func:`fedsim.runner.loop.round_loop` drives it)."""
        if record.diverged or record.test_loss is None:
            return
        rows = yield from self.metrics_steps()
        self.write(record.sim_time, record.round, rows)
        self.sync()

    def wrap(self, grid) -> "_GridWithClients":
        """``grid`` (an EvalGrid) that also evaluates per client at each of its grid times."""
        return _GridWithClients(grid, self)


class _GridWithClients:
    """An :class:`~fedsim.runner.evals.EvalGrid` whose grid times also get per-client rows."""

    def __init__(self, grid, evals: ClientEvals):
        self.grid, self.evals = grid, evals

    def open(self, after: float | None = None) -> None:
        self.grid.open(after)
        self.evals.open(None if after is None else (lambda t, r: t < after))

    def reach(self, engine, t: float, last_round: int, *, inclusive: bool = False) -> None:
        drive(self.reaching(engine, t, last_round, inclusive=inclusive))

    def reaching(self, engine, t: float, last_round: int, *, inclusive: bool = False):
        k0 = self.grid.k
        yield from self.grid.reaching(engine, t, last_round, inclusive=inclusive)
        if self.grid.k > k0:
            rows = yield from self.evals.metrics_steps()  # one model for every grid time passed
            for k in range(k0, self.grid.k):
                self.evals.write(k * self.grid.every, last_round, rows)

    def sync(self) -> None:
        self.grid.sync()
        self.evals.sync()

    def close(self) -> None:
        self.grid.close()
        self.evals.close()
