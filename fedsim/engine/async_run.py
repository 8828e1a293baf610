"""The asynchronous engine (``round.policy: async``): FedBuff and FedAsync on the clock.

The clock (``fedsim.clock``) yields one :class:`RoundPlan` per server update: the K completed
arrivals plus the failed / dropped jobs processed since the previous update. Each completed job is
trained from the model version it downloaded (``Job.version``), with the local lr of that version
(``spec.round_lr(version, rounds)``); jobs of one version are trained together in one
``train_cohort`` call. The server rule is :func:`fedsim.algorithms.asynchronous.async_apply`.

Batching by version (issue 18): a plan lists every job that started from the version it replaces
(``RoundPlan.started``). When there are at least ``prefetch_min`` of them (and their updates fit
in ``PREFETCH_BYTES``), they are trained as one cohort as soon as the plan arrives -- they share
the starting model -- and each one's update waits in ``trained`` until the job reports (a job
that fails drops it). With concurrency C and buffer K about K jobs start per version, so cohorts
are as large as in a synchronous round of K clients, instead of K^2 / C per version and update.
Fewer starts train with their update's arrivals of the same version, as before. A client's result
does not depend on the cohort it is trained in, up to the rounding of batched kernels
(tests/test_async_batched.py).

Model versions: ``versions[v]`` holds x^v for every version a job in flight may still need;
after each plan the versions older than ``plan.min_live_version`` are freed. Checkpoints hold
them (``state_dict``), so a resumed run trains in-flight jobs from the same models.

Compression (``wire``, docs/compression.md): jobs of version v train from its broadcast
C_down(x^v) (computed once per version, freed with it; not checkpointed, it is a function of x^v);
the completed jobs of a plan are compressed when they report, in the plan's order (a prefetched
update stays raw in ``trained`` until then), each from its client's residual; FedAsync mixes
toward x^{v_k} + C_up(Delta_k), x^{v_k} the server's full-precision copy.

Rows: ``rounds.csv`` one row per server update (``round`` = update index u, which makes server
version u + 1; ``sim_time`` = the update's time; ``participants`` = K completed arrivals; ``lr`` =
the local lr handed out with version u). ``clients.csv`` one row per job in the clock's processing
order, with ``version``, ``staleness`` and ``weight`` = the job's coefficient c_k in the update
(FedBuff q_k w(s_k), FedAsync a_s; 0 for failed / dropped jobs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import torch

from ..algorithms.asynchronous import Arrivals, NormState, async_apply
from ..algorithms.state import ServerState
from ..clock.plan import RoundPlan
from ..records import ClientRecord, RoundRecord
from . import distributed
from .distributed import train_cohort_sharded
from .run import SyncEngine, reported_of, tau_stats, to_device
from .request import TrainRequest, TrainRequests
from .train import Task, train_cohort

Tensors = dict[str, torch.Tensor]

__all__ = ["AsyncEngine", "PREFETCH_MIN", "PREFETCH_BYTES"]

#: Jobs started from one version that are trained together when the version's plan arrives.
PREFETCH_MIN = 32
#: Most bytes of trained, not yet reported updates held at once.
PREFETCH_BYTES = 512 << 20


def _no_correction(client: int) -> None:
    """Asynchronous local training has no per-client correction."""
    return None


@dataclass
class AsyncEngine(SyncEngine):
    """Explicit state of an asynchronous run between server updates (what a checkpoint holds).

    ``params`` is the current global model x^v with v = ``server.version``; ``versions`` maps every
    version still referenced by a job in flight (v >= the last plan's ``min_live_version``) to its
    model, the current one included.
    """

    versions: dict[int, Tensors] = field(default_factory=dict)
    norm: NormState = field(default_factory=NormState)
    #: key -> (update of the job, its a_norm, loss, loss_sq): trained from ``RoundPlan.started``, not reported yet
    trained: dict[int, tuple[Tensors, float, float, float]] = field(default_factory=dict)
    prefetch_min: int = PREFETCH_MIN
    #: version -> its broadcast C_down(x^v), for the versions still live (with a downlink compressor)
    broadcasts: dict[int, Tensors] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.versions:
            self.versions = {self.server.version: self.params}

    def _start(self, v: int) -> Tensors:
        """The model jobs of version ``v`` train from: x^v, or its broadcast with a downlink compressor."""
        if self.wire is None or self.wire.downlink is None:
            return self.versions[v]
        if v not in self.broadcasts:
            self.broadcasts[v] = self.wire.broadcast(self.versions[v], v)
        return self.broadcasts[v]

    def steps(self, plan: RoundPlan):
        """One server update as a generator: yields a :class:`~fedsim.engine.request.TrainRequest`
        per cohort it trains (the jobs started from this plan's version; then each version's
        jobs not trained yet, all at once as one :class:`~fedsim.engine.request.TrainRequests`
        when there are several), receives the results, returns the round record (not evaluated) and
        client records (:meth:`step` drives it alone)."""
        alg, work = self.alg, self.work
        spec = alg.spec
        if plan.round != self.server.version:
            raise RuntimeError(f"async plan {plan.round} does not follow server version {self.server.version}")
        done = [j for j in plan.jobs if j.status == "completed" and j.steps > 0]
        n = len(done)
        if work.module is not None:
            work.module.train()
        yield from self._prefetch(plan)
        deltas: dict[str, list] = {k: [None] * n for k in self.params}
        starts: dict[str, list] = {k: [None] * n for k in self.params}
        a_norm = torch.zeros(n, dtype=torch.float64)
        loss = torch.zeros(n, dtype=torch.float64)
        loss_sq = torch.zeros(n, dtype=torch.float64)
        groups: dict[int, list[int]] = {}
        for i, j in enumerate(done):
            if j.key in self.trained:
                delta, a_norm[i], loss[i], loss_sq[i] = self.trained.pop(j.key)
                for k in self.params:
                    deltas[k][i] = delta[k]
                    starts[k][i] = self.versions[j.version][k]
            else:
                groups.setdefault(j.version, []).append(i)
        for j in plan.jobs:
            if j.status != "completed":
                self.trained.pop(j.key, None)
        asks = []
        for v, idx in groups.items():
            if v not in self.versions:
                raise RuntimeError(f"model version {v} was freed but job(s) still need it")
            tasks = [Task(done[i].client, done[i].steps, done[i].key) for i in idx]
            # torchrun: every rank holds the same plan, so the groups (and collectives) match
            train = train_cohort_sharded if distributed.world()[1] > 1 else train_cohort
            asks.append(TrainRequest(work, alg, self._start(v), tasks, round_lr=spec.round_lr(v, self.rounds),
                                     seed=self.seed, chunk=self.chunk, correction=_no_correction, train=train))
        # the versions' cohorts need none of each other's results: asked at once (answered in turn alone)
        answers = () if not asks else (yield asks[0] if len(asks) == 1 else TrainRequests(tuple(asks)))
        answers = (answers,) if len(asks) == 1 else answers
        for (v, idx), res in zip(groups.items(), answers, strict=True):
            x_v = self.versions[v]
            for row, i in enumerate(idx):
                a_norm[i], loss[i], loss_sq[i] = res.a_norm[row], res.loss[row], res.loss_sq[row]
                for k in self.params:
                    deltas[k][i] = res.deltas[k][row]
                    starts[k][i] = x_v[k]
        coef = torch.zeros(0, dtype=torch.float64)
        if n:
            stacked = {k: torch.stack(v) for k, v in deltas.items()}
            if self.wire is not None and self.wire.uplink is not None:  # at report time, in the plan's order
                stacked, residuals = self.wire.upload(stacked, [j.client for j in done], [j.key for j in done],
                                                      self.server.residuals)
                self.server = replace(self.server, residuals=residuals)
            arr = Arrivals(
                deltas=stacked,
                starts={k: torch.stack(v) for k, v in starts.items()} if spec.asynchronous == "fedasync" else None,
                weights=torch.tensor([j.weight for j in done], dtype=torch.float64),
                staleness=torch.tensor([j.staleness for j in done], dtype=torch.float64),
                a_norm=a_norm,
            )
            self.params, opt, self.norm, coef = async_apply(alg, self.params, self.server.opt, arr, self.norm)
            self.server = replace(self.server, opt=opt)
        self.server = replace(self.server, version=self.server.version + 1)
        self.versions[self.server.version] = self.params
        for v in [v for v in self.versions if v < plan.min_live_version]:
            del self.versions[v]
            self.broadcasts.pop(v, None)
        by_key = {j.key: i for i, j in enumerate(done)}
        clients = []
        for j in plan.jobs:
            i = by_key.get(j.key) if j.status == "completed" else None
            clients.append(ClientRecord(
                round=plan.round, client=j.client, status=j.status, steps=j.steps,
                a_norm=float(a_norm[i]) if i is not None else 0.0, start=float(j.start), end=float(j.end),
                version=j.version, staleness=j.staleness, weight=float(coef[i]) if i is not None else 0.0,
                download=j.download, upload=j.upload, resumed=j.resumed, cut=j.cut,
            ))
        self._reported = reported_of([Task(j.client, j.steps, j.key) for j in done], loss, loss_sq, spec.batch_size)
        record = RoundRecord(
            round=plan.round, sim_time=float(plan.close), participants=n,
            **tau_stats([j.steps for j in done]), lr=spec.round_lr(plan.round, self.rounds), available=plan.available,
        )
        return record, clients

    def _prefetch(self, plan: RoundPlan):
        """Train the jobs started from this plan's version (``plan.started``) as one cohort, when
        there are at least ``prefetch_min`` and their updates fit in ``PREFETCH_BYTES`` (a
        generator: the training is asked for)."""
        started = plan.started
        if len(started) < max(self.prefetch_min, 1):
            return
        per_job = sum(v.numel() * v.element_size() for v in self.params.values())
        if (len(self.trained) + len(started)) * per_job > PREFETCH_BYTES:
            return
        v = self.server.version
        tasks = [Task(c, steps, key) for c, key, steps in started]
        train = train_cohort_sharded if distributed.world()[1] > 1 else train_cohort
        res = yield TrainRequest(self.work, self.alg, self._start(v), tasks, round_lr=self.alg.spec.round_lr(v, self.rounds),
                                 seed=self.seed, chunk=self.chunk, correction=_no_correction, train=train)
        for row, t in enumerate(tasks):
            self.trained[t.key] = ({k: res.deltas[k][row] for k in self.params}, float(res.a_norm[row]),
                                   float(res.loss[row]), float(res.loss_sq[row]))

    def state_dict(self) -> dict:
        """Current model, server state, the older live versions, normalize_async's sums and the
        trained updates of jobs not reported yet."""
        cur = self.server.version
        return {
            "params": self.params,
            "server": asdict(self.server),
            "versions": {int(v): p for v, p in self.versions.items() if v != cur},
            "norm": [self.norm.pa_sum, self.norm.p_sum],
            "trained": {int(key): ({k: t.clone() for k, t in d.items()}, *rest) for key, (d, *rest) in self.trained.items()},
        }

    def load_state(self, state: dict) -> None:
        dev = self.work.x_train.device
        self.params = {k: v.to(dev) for k, v in state["params"].items()}
        self.server = ServerState(**to_device(state["server"], dev))
        self.versions = {int(v): {k: t.to(dev) for k, t in p.items()} for v, p in state["versions"].items()}
        self.versions[self.server.version] = self.params
        self.broadcasts = {}
        self.norm = NormState(*map(float, state["norm"]))
        # (update, a_norm, loss, loss_sq); checkpoints written before losses were reported hold (update, a_norm)
        self.trained = {int(key): ({k: t.to(dev) for k, t in d.items()}, *map(float, rest), *[math.nan] * (3 - len(rest)))
                        for key, (d, *rest) in state.get("trained", {}).items()}
