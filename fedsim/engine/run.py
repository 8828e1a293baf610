"""The synchronous engine: execute one round plan (local training -> server update) -> records.

Each stage is a function of explicit values; :class:`SyncEngine` holds only the state a run
carries between rounds (what a checkpoint holds). The round loop is the runner's
(:mod:`fedsim.runner.loop`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

import numpy as np
import torch

from ..algorithms.algorithm import Algorithm
from ..algorithms.state import RoundUpdate, ServerState
from ..clock.feedback import Reported
from ..clock.plan import STATUSES, RoundPlan, aggregation_weights
from ..records import ClientRecord, RoundRecord
from . import distributed
from .distributed import train_cohort_sharded
from .request import EvalRequest, TrainRequest, drive
from .train import Task, train_cohort
from .wire import Wire
from .workload import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["SyncEngine", "to_device", "average_buffers", "train_and_apply", "train_and_apply_steps"]


def _aggregated(plan: RoundPlan) -> dict[int, float]:
    """w_i of each client the round aggregates (``completed`` with steps > 0), by the clock's rule
    :func:`fedsim.clock.plan.aggregation_weights` (the raw weights of selected clients that did
    not report redistributed over those that did); none when the reporting clients' weights are
    all 0."""
    jobs = plan.jobs
    status = np.array([STATUSES.index(j.status) for j in jobs], dtype=np.int64)
    steps = np.array([j.steps for j in jobs], dtype=np.int64)
    w = aggregation_weights(status, steps, np.array([j.weight for j in jobs], dtype=np.float64))
    if not w.any():
        return {}
    done = (status == STATUSES.index("completed")) & (steps > 0)
    return {j.client: float(w[i]) for i, j in enumerate(jobs) if done[i]}


def to_device(x, dev: torch.device):
    """``x`` (a tensor, or dicts of them, at any depth) moved to ``dev``; other values as they are."""
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, dict):
        return {k: to_device(v, dev) for k, v in x.items()}
    return x


def average_buffers(buffers: Tensors, weights: torch.Tensor) -> Tensors:
    """The new global buffers from the reporting clients' final buffers (stacked, one row per
    client): averaged like parameters with the round's weights normalized to sum 1,
    sum_i (w_i / sum_j w_j) b_i; integer buffers (BatchNorm's ``num_batches_tracked``) get that
    mean rounded to the nearest integer (docs/algorithms.md, "Models with buffers")."""
    q = (weights / weights.sum()).to(torch.float64)
    out = {}
    for k, v in buffers.items():
        if v.is_floating_point():
            out[k] = torch.tensordot(q.to(device=v.device, dtype=v.dtype), v, dims=1)
        else:
            out[k] = torch.round(torch.tensordot(q.to(v.device), v.double(), dims=1)).to(v.dtype)
    return out


def train_and_apply(work: Workload, alg: Algorithm, params: Tensors, server: ServerState, tasks, weights: dict,
                    *, lr: float, seed: int, chunk: int, client_p: dict, buffers: Tensors | None = None,
                    train=train_cohort, wire: Wire | None = None):
    """One synchronous round's computation of ``alg``: the tasks' local training from ``params`` (each
    client with its correction, the server's direction and v_hat), then the server update with
    the reporting clients' weights ``weights[client]``. Returns ``(params, server state, cohort
    result)``; the result carries the weights used (``res.weights``, float64, task order) and the
    clients' own deltas (``res.deltas``).

    ``wire`` (docs/compression.md): the clients train from its broadcast of ``params`` (version
    ``server.version``) and the server aggregates its decompressed uploads, each client's
    error-feedback residual kept in the returned state's ``residuals``; the control-variate rule
    reads the clients' own deltas (``RoundUpdate.raw_deltas``).

    The training is asked for (:func:`train_and_apply_steps`) and answered by ``train`` here."""
    return drive(train_and_apply_steps(work, alg, params, server, tasks, weights, lr=lr, seed=seed, chunk=chunk,
                                       client_p=client_p, buffers=buffers, train=train, wire=wire))


def train_and_apply_steps(work: Workload, alg: Algorithm, params: Tensors, server: ServerState, tasks, weights: dict,
                          *, lr: float, seed: int, chunk: int, client_p: dict, buffers: Tensors | None = None,
                          train=train_cohort, wire: Wire | None = None):
    """:func:`train_and_apply` as a generator: yields the round's :class:`TrainRequest` (``train``
    its trainer when answered alone), receives the cohort result, returns what
    :func:`train_and_apply` returns."""
    start = params if wire is None else wire.broadcast(params, server.version)
    res = yield TrainRequest(
        work, alg, start, list(tasks), round_lr=lr, seed=seed, chunk=chunk,
        correction=lambda i: alg.correction(server, i, params),
        direction=server.direction, vhat0=server.vhat, buffers=buffers or None, train=train,
    )
    w = torch.tensor([weights[t.client] for t in tasks], dtype=torch.float64)
    res.weights = w
    deltas, raw = res.deltas, None
    if wire is not None and wire.uplink is not None and tasks:
        deltas, residuals = wire.upload(res.deltas, res.clients, [t.key for t in tasks], server.residuals)
        raw, server = res.deltas, replace(server, residuals=residuals)
    upd = RoundUpdate(
        clients=res.clients, deltas=deltas, weights=w, a_norm=res.a_norm, steps=res.steps,
        lr=lr, num_clients=work.num_clients,
        client_p=client_p, vhat=res.vhat, raw_deltas=raw,
    )
    new_params, new_server = alg.server_update(params, server, upd)
    return new_params, new_server, res


def reported_of(tasks, loss: torch.Tensor, loss_sq: torch.Tensor, batch_size: int) -> Reported:
    """The losses the clients of ``tasks`` report with their updates (float64, task order):
    the mean minibatch loss over the job's steps, the sum of squared per-sample losses and the
    samples processed (steps x batch size)."""
    return Reported(
        client=np.array([t.client for t in tasks], dtype=np.int64),
        key=np.array([t.key for t in tasks], dtype=np.int64),
        loss=loss.to(torch.float64).numpy().copy(),
        loss_sq=loss_sq.to(torch.float64).numpy().copy(),
        samples=np.array([t.steps * batch_size for t in tasks], dtype=np.int64),
    )


def tau_stats(steps: list[int]) -> dict:
    """``tau_mean, tau_min, tau_max`` of the participants' local steps (None when there are none)."""
    if not steps:
        return dict(tau_mean=None, tau_min=None, tau_max=None)
    return dict(tau_mean=float(np.mean(steps)), tau_min=min(steps), tau_max=max(steps))


@dataclass
class SyncEngine:
    """Explicit state of a synchronous run between rounds, and how one round is executed.

    ``rounds`` (the run's length T) sets the lr schedule, ``seed`` the minibatch streams;
    ``train_loss`` asks :meth:`evaluate` for the global training objective (always on quadratic
    data).
    """

    work: Workload
    alg: Algorithm  # the run's algorithm, every part resolved once when the run was built
    params: Tensors
    server: ServerState
    chunk: int
    rounds: int
    seed: int
    train_loss: bool = False
    #: the global model's buffers (BatchNorm statistics); None: the workload's initial ones
    buffers: Tensors | None = field(default=None)
    #: what crosses the wire (algorithm.compression / downlink_compression); None: nothing compressed
    wire: Wire | None = None

    def global_buffers(self) -> Tensors:
        """The global buffers now (empty for a stateless model)."""
        return self.work.buffers if self.buffers is None else self.buffers

    def model_state(self) -> Tensors:
        """The global model as ``functional_call`` takes it: parameters plus buffers (the
        parameters alone, the same dict, for a stateless model)."""
        bufs = self.global_buffers()
        return {**self.params, **bufs} if bufs else self.params

    @cached_property
    def client_p(self) -> dict[int, float]:
        """p_i of every client (FedNova-VR's c = sum_j p_j c_j)."""
        return {i: float(p) for i, p in enumerate(self.work.weights)}

    def step(self, plan: RoundPlan) -> tuple[RoundRecord, list[ClientRecord]]:
        """Execute one round plan; returns its round record (not evaluated) and client records."""
        return drive(self.steps(plan))

    def steps(self, plan: RoundPlan):
        """:meth:`step` as a generator: yields the round's :class:`~fedsim.engine.request.TrainRequest`
        (none when no client reports), receives its result, returns what :meth:`step` returns."""
        alg, work = self.alg, self.work
        lr = alg.spec.round_lr(plan.round, self.rounds)
        weights = _aggregated(plan)
        done = [j for j in plan.jobs if j.client in weights and j.status == "completed"]
        tasks = [Task(j.client, j.steps, j.key) for j in done]
        if work.module is not None and not work.module.training:
            work.module.train()
        train = train_cohort_sharded if distributed.world()[1] > 1 else train_cohort  # torchrun: split over ranks
        bufs = self.global_buffers()
        self.params, self.server, res = yield from train_and_apply_steps(
            work, alg, self.params, self.server, tasks, weights, lr=lr, seed=self.seed, chunk=self.chunk,
            client_p=self.client_p, buffers=bufs, train=train, wire=self.wire,
        )
        if bufs and tasks:
            self.buffers = average_buffers(res.buffers, res.weights)
        self._reported = reported_of(tasks, res.loss, res.loss_sq, alg.spec.batch_size)
        a_of = dict(zip((t.client for t in tasks), res.a_norm.tolist()))
        clients = [
            ClientRecord(
                round=plan.round, client=j.client, status=j.status, steps=j.steps,
                a_norm=a_of.get(j.client, 0.0), start=j.start, end=j.end,
                version=j.version, staleness=j.staleness, weight=weights.get(j.client, 0.0),
                download=j.download, upload=j.upload, resumed=j.resumed, cut=j.cut,
            )
            for j in plan.jobs
        ]
        record = RoundRecord(
            round=plan.round, sim_time=plan.close, participants=len(tasks),
            **tau_stats([t.steps for t in tasks]), lr=lr, available=plan.available,
        )
        return record, clients

    def reported(self) -> Reported | None:
        """What the clients trained in the last :meth:`step` reported with their updates
        (:class:`fedsim.clock.feedback.Reported`), for the server's selection rule."""
        return getattr(self, "_reported", None)

    def state_dict(self) -> dict:
        """Global model and server state, as plain containers of tensors (for checkpoints)."""
        out = {"params": self.params, "server": asdict(self.server)}
        if self.global_buffers():
            out["buffers"] = self.global_buffers()
        return out

    def load_state(self, state: dict) -> None:
        dev = self.work.x_train.device
        self.params = {k: v.to(dev) for k, v in state["params"].items()}
        self.server = ServerState(**to_device(state["server"], dev))
        if "buffers" in state:
            self.buffers = {k: v.to(dev) for k, v in state["buffers"].items()}

    def finite(self) -> bool:
        return all(bool(torch.isfinite(v).all()) for v in self.params.values())

    def evaluate(self, record: RoundRecord) -> RoundRecord:
        """``record`` with the evaluation metrics of the current model (under torchrun every rank
        takes its share of batches)."""
        return drive(self.evaluation(record))

    def evaluation(self, record: RoundRecord):
        """:meth:`evaluate` as a generator: yields the :class:`~fedsim.engine.request.EvalRequest`
        of the current model, receives its metrics, returns the record with them."""
        work = self.work
        if work.module is not None:
            work.module.eval()
        state = self.model_state()
        metrics = dict(work.extra_metrics(self.params)) if work.extra_metrics is not None else {}
        answer = yield EvalRequest(work, state, train_loss=self.train_loss and "train_loss" not in metrics)
        metrics.update(answer)
        return replace(record, **metrics)
