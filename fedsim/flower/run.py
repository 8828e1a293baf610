"""``fedsim.flower.run``: a Flower ServerApp and ClientApp, unchanged, on a scenario's clock.

The scenario gives the system (speeds or a trace, availability, network, slowdowns, the server's
aggregation time) and the round policy; the number of nodes is ``data.clients`` (or
``num_nodes=``); the ServerApp decides the rounds, the sampling and the aggregation. The run folder
holds ``scenario.yaml``, ``rounds.csv`` (one row per exchange: ``round, sim_time, participants,
tau_mean, tau_min, tau_max, available, kind, server_round, start`` and the strategy's aggregated
MetricRecords as ``train.KEY``, ``evaluate.KEY``, ``server.KEY`` columns), ``clients.csv`` (one
row per message, fedsim's client columns) and ``evals.csv`` (the ServerApp-side evaluations
against simulated time: ``loss`` -> ``test_loss``, ``accuracy`` -> ``test_acc``).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import Context, RecordDict
from flwr.serverapp import ServerApp
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy import strategy_utils
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity

from fedsim.clock import WorkCost
from fedsim.errors import ScenarioError
from fedsim.clock.policy import Overcommit
from fedsim.runner.clock import build_clock
from fedsim.scenario import Scenario, parse_scenario
from fedsim.scenario.loading import load_scenario

from .grid import ClockGrid, Exchange
from .timing import NodeTimes

__all__ = ["run", "FlowerRun", "grid_for"]


@dataclass
class FlowerRun:
    """What a run on the Flower grid gives back: the grid's exchanges (times, outcomes, the
    strategy's metrics), the ServerApp's context, and the simulated time at the end."""

    exchanges: list[Exchange]
    context: Context
    sim_time: float
    out: Path | None = None


def _scenario(scenario: Any) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    return parse_scenario(scenario)


def grid_for(scenario: Any, client_app, *, run_config: dict | None = None, num_nodes: int | None = None) -> ClockGrid:
    """The :class:`ClockGrid` of a scenario (a Scenario, a dict or a YAML path)."""
    sc = _scenario(scenario)
    m = num_nodes if num_nodes is not None else sc.data.clients
    if m is None or int(m) < 1:
        raise ScenarioError("data.clients: give the number of Flower nodes (or num_nodes=)")
    if sc.round.local_epochs is not None:
        raise ScenarioError("round.local_epochs: fedsim does not know a Flower app's partition sizes; use round.local_steps")
    if sc.system.compute is not None:
        raise ScenarioError("system.compute: a Flower app's FLOPs per step are unknown; give system.speed (steps per second)")
    clock = build_clock(sc, [1] * int(m), cost=WorkCost(None, 1.0, 1.0, None))
    policy = clock.rule.policy
    k = sc.round.clients_per_round if isinstance(policy, Overcommit) else None
    return ClockGrid(NodeTimes(clock), client_app, run_config=run_config, batch_size=sc.algorithm.batch_size,
                     k_first=k, aggregation_seconds=clock.aggregation_seconds)


@contextmanager
def _on_clock(grid: ClockGrid):
    """While the ServerApp runs: Flower's strategies sleep on the simulated clock, and each
    ``Strategy.start`` on this grid notes its aggregated metrics on the grid's exchanges."""
    sleep, start = strategy_utils.sleep, Strategy.start
    ident = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    # who the ServerApp's messages come from (run_simulation sets the same three)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, grid.run.run_id, SUPERLINK_NODE_ID

    def noted(self, *args, **kwargs):
        if (kwargs["grid"] if "grid" in kwargs else args[0]) is not grid:
            return start(self, *args, **kwargs)
        wrapped = {}
        for name, kind in (("aggregate_train", "train"), ("aggregate_evaluate", "evaluate")):
            orig = getattr(self, name)

            def agg(*a, _orig=orig, _kind=kind, **kw):
                res = _orig(*a, **kw)
                metrics = res[1] if _kind == "train" else res
                if metrics is not None and grid.exchanges:
                    grid.exchanges[-1].metrics.update({f"{_kind}.{k}": v for k, v in metrics.items()})
                return res

            wrapped[name] = agg
        fn = kwargs.get("evaluate_fn")
        if fn is not None:
            def server_eval(rnd, arrays, _fn=fn):
                res = _fn(rnd, arrays)
                if res is not None:
                    grid.server_evals.append((grid.now, rnd, dict(res)))
                return res

            kwargs["evaluate_fn"] = server_eval
        self.__dict__.update(wrapped)
        try:
            return start(self, *args, **kwargs)
        finally:
            for name in wrapped:
                self.__dict__.pop(name, None)

    strategy_utils.sleep = grid.sleep
    Strategy.start = noted
    try:
        yield
    finally:
        strategy_utils.sleep, Strategy.start = sleep, start
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = ident


def run(server_app: ServerApp, client_app, scenario: Any, out: str | Path | None = None, *,
        run_config: dict | None = None, num_nodes: int | None = None, force: bool = False,
        resume: bool = False) -> FlowerRun:
    """Run ``server_app`` against ``client_app`` nodes on the clock of ``scenario``; write the run
    folder ``out`` when given. Python's ``random`` is seeded with the scenario's seed first (Flower's
    strategies sample nodes with it). ``resume``: refused, one line (the strategy's state lives in
    the ServerApp's main function, which fedsim does not hold)."""
    if resume:
        raise ScenarioError("--resume: a Flower run cannot be resumed (its strategy's state lives in the "
                            "ServerApp's main function, outside fedsim); rerun it with --force")
    if not isinstance(server_app, ServerApp) or getattr(server_app, "_main", None) is None:
        raise ScenarioError("server_app: needs a flwr ServerApp with an @app.main() function (the legacy "
                            "strategy=/server_fn= ServerApp is not supported on fedsim's grid)")
    sc = _scenario(scenario)
    grid = grid_for(sc, client_app, run_config=run_config, num_nodes=num_nodes)
    if out is not None:
        from fedsim.runner.folder import check_folder

        check_folder(sc, Path(out), force=force)
    context = Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(),
                      run_config=dict(run_config or {}))
    random.seed(sc.seed)
    with _on_clock(grid):
        server_app(grid=grid, context=context)
    result = FlowerRun(grid.exchanges, context, grid.now, None if out is None else Path(out))
    if out is not None:
        from .folder import write_folder

        write_folder(sc, Path(out), grid, force=force)
    return result
