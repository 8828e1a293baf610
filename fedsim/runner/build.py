"""Everything a run needs, built once from its Scenario: workload, algorithm, engine, clock."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from ..algorithms.algorithm import Algorithm
from ..clock import Clock, WorkCost
from ..devices.cost import work_cost
from ..engine import distributed
from ..engine.async_run import AsyncEngine
from ..engine.probe import check_ranks
from ..engine.run import SyncEngine
from ..engine.threads import set_threads, thread_budget
from ..engine.chunking import auto_chunk
from ..engine.wire import Wire
from ..engine.workload import build_workload, resolve_device
from ..scenario import Scenario
from ..validate import check_compute_steps, check_device_available
from .clock import build_clock

__all__ = ["Built", "build_run", "adopt_clients", "wire_of", "compressors", "check_compressors"]


@dataclass(frozen=True)
class Built:
    """A scenario's engine (its state at round 0), clock, and the cost of its work (FLOPs of one
    local step, bytes per transfer; None for the quadratic problem, which has no model)."""

    engine: SyncEngine
    clock: Clock
    cost: WorkCost | None
    #: ``eval.per_client``: the sampled clients, tiers and test parts (fedsim.runner.client_evals)
    client_evals: Any = None


def build_run(sc: Scenario, *, model=None, data=None, loss=None) -> Built:
    """Data, model, algorithm, server state, engine and clock for ``sc``; sets torch's threads.

    Everything that can fail on a valid scenario (device, dataset, traces) fails here.

    Args:
        model: The user's model replacing ``sc.model`` (a factory ``(input_shape, num_classes,
            **options) -> nn.Module`` or a module to copy); from ``fedsim.run(model=...)``.
        data: The user's data replacing ``sc.data`` (a :class:`~fedsim.data.FederatedData`, or what
            a dataset factory returns).
        loss: ``loss(outputs, targets) -> scalar mean`` replacing the scenario's ``loss.name``
            (default: cross-entropy).

    An algorithm of the user's is registered by name (``fedsim.register_algorithm``) and named by
    ``sc.algorithm.name`` like fedsim's own.
    """
    check_device_available(sc.engine.device)
    device = resolve_device(sc.engine.device)
    dtype = torch.float64 if sc.engine.dtype == "float64" else torch.float32
    if loss is None:  # loss.name (fedsim.registries.LOSSES); None: the engine's cross-entropy
        from ..losses import scenario_loss

        loss = scenario_loss(sc)
    if loss is not None:  # a user's loss: its failures name it (exit 1 mid-run)
        from ..losses import NamedLoss

        loss = NamedLoss(loss, f"loss {sc.loss.name!r}")
    coupled = sc.system.coupling is not None and sc.system.coupling.strength > 0
    per_client = sc.eval.per_client
    if (coupled or per_client is not None) and data is None:  # built once: trained, scored, evaluated per client
        from ..engine.workload import dataset_for

        data = dataset_for(sc)
    held = None
    if per_client is not None:
        data, held = _held_out(sc, data)
    work = build_workload(sc, device, dtype, model=model, data=data, loss=loss)
    # issue 27 item 3 (data helper): a model whose size follows from an unexpected input shape is named before training
    if work.module is not None:
        from ..models.size import size_note

        note = size_note(sc, work.input_shape, work.num_classes or None, work.module, model)
        if note:
            print(note, file=sys.stderr, flush=True)
    check_ranks(work, distributed.world()[1])  # torchrun: a model with buffers, before the folder
    alg = Algorithm.build(sc.algorithm_spec)  # every part looked up once, for the whole run
    alg.check(work.init_params)  # the pieces' state on one step: one line, exit 2
    check_compressors(sc, work.init_params)  # a compressor's bytes and output for this model: one line, exit 2
    chunk = (
        auto_chunk(work, device, threads=sc.engine.threads or thread_budget())
        if sc.engine.clients_per_batch == "auto"
        else sc.engine.clients_per_batch
    )
    set_threads(sc.engine.threads, work, chunk)
    cls = AsyncEngine if sc.round.policy == "async" else SyncEngine  # FedBuff / FedAsync
    engine = cls(
        work, alg, dict(work.init_params), alg.init(work.init_params), chunk,
        rounds=sc.rounds, seed=sc.seed, train_loss=sc.eval.train_loss, wire=wire_of(sc),
    )
    cost = None
    if work.module is not None:
        cost = work_cost(work.module, work.input_shape, sc.algorithm.batch_size, alg.uses_control_variates,
                         count_flops=sc.system.compute is not None, payload=sc.system.payload_bytes,
                         **compressors(sc))
        check_compute_steps(sc, cost.step_flops)  # issue 21.18: needs the model's FLOPs
    clock = build_clock(sc, work.client_sizes, work.weights, cost=cost, epoch_rule=work.epoch_rule,
                        data=data if coupled else None)
    evals = None
    if per_client is not None:
        from .client_evals import prepare_client_evals

        evals = prepare_client_evals(sc, data, held, clock, device, dtype)
    return Built(engine, clock, cost, evals)


def _held_out(sc: Scenario, data):
    """``(data, held)`` for ``eval.per_client``: with ``holdout``, each client's held-out rows taken
    from its training data (:mod:`fedsim.data.holdout`); data that carry per-client test parts
    (Synthetic, LEAF / TFF files) refuse a holdout, and the quadratic problem has no test data."""
    from ..data import FederatedData, SyntheticPopulation
    from ..data.quadratic import QuadraticProblem
    from ..errors import ScenarioError

    share = sc.eval.per_client.holdout
    if isinstance(data, QuadraticProblem):
        raise ScenarioError("eval.per_client: the quadratic problem has no test data")
    own = isinstance(data, SyntheticPopulation) or (isinstance(data, FederatedData) and data.client_test is not None)
    if share is None:
        return data, None
    if own:
        raise ScenarioError(f"eval.per_client.holdout: {sc.data.name} carries per-client test data; leave holdout unset")
    from ..data.holdout import hold_out

    return hold_out(data, share, sc.data_seed)


def compressors(sc: Scenario) -> dict:
    """``{"uplink": ..., "downlink": ...}``: each link's compressor (None when its key is off), as
    :func:`fedsim.devices.cost.work_cost` takes them."""
    up, down = sc.algorithm.compression, sc.algorithm.downlink_compression
    return {"uplink": None if up is None else up.compressor(), "downlink": None if down is None else down.compressor()}


def wire_of(sc: Scenario) -> Wire | None:
    """What the engine applies to the uploads and the broadcast (None when neither key is set:
    the engine then makes no compression call)."""
    up, down = sc.algorithm.compression, sc.algorithm.downlink_compression
    if up is None and down is None:
        return None
    return Wire(None if up is None else up.value(), None if down is None else down.compressor(), sc.seed,
                None if down is None else down.name)


def check_compressors(sc: Scenario, params) -> None:
    """Each set compressor against the model's parameters ``params``
    (:func:`fedsim.compression.apply.check_compression`: its declared bytes for the model's n and
    b, its output on a probe update): a one-line ScenarioError naming the link's key, before the
    run folder is touched."""
    from ..compression.apply import check_compression
    from ..compression.section import DOWNLINK, UPLINK

    for path, section in ((UPLINK, sc.algorithm.compression), (DOWNLINK, sc.algorithm.downlink_compression)):
        if section is not None:
            check_compression(section.compressor(), params, path, section.name)


def adopt_clients(sc: Scenario, data=None):
    """``(sc, data)`` with the number of clients the data decide.

    When ``data.clients`` is unset for a dataset without a default count (natural partitions: one
    writer or role per client, :attr:`~fedsim.scenario.data.DataConfig.clients_from_data`), the
    data are built here (``data`` when given from Python) and the scenario is validated again with
    ``data.clients`` set to their count, so ``round.clients_per_round`` and the per-client lists are
    checked against it and scenario.yaml records it; a ``data.clients`` given for such a dataset
    must equal that count. Any failure is a one-line ScenarioError, before the run folder is
    touched.
    """
    from ..scenario.data import DEFAULT_CLIENTS

    if sc.data.name in DEFAULT_CLIENTS or sc.data.centers is not None:
        return sc, data
    from ..data.federated import FederatedData
    from ..engine.workload import dataset_for
    from ..errors import ScenarioError
    from ..scenario import parse_scenario

    built = dataset_for(sc) if data is None else data
    n = int(len(built.sizes if isinstance(built, FederatedData) else built.client_sizes))
    if sc.data.clients is not None:
        if sc.data.clients != n:
            raise ScenarioError(f"data.clients: {sc.data.name} has {n} clients; got {sc.data.clients} "
                                "(leave data.clients unset and the data decide)")
        return sc, built
    raw = sc.model_dump(mode="json")
    raw["data"]["clients"] = n
    return parse_scenario(raw), built
