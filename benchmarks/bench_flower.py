"""Issue 37 item 6: per-round cost of a Flower app (fedsim/flower/example: MLP 64-32-10 on digits,
FedAvg, N nodes, S local steps of batch 32, a ServerApp-side evaluation each round) on

* ``flower``: Flower's own ``run_simulation`` (Ray backend, one actor per CPU),
* ``fedsim_grid``: fedsim's Grid (``fedsim.flower.run``, ideal system: the same work),
* ``fedsim_native``: fedsim's own batched path for the same data and work (``digits``, fedsim's
  ``mlp`` with hidden 32 -- two hidden layers, the example has one -- FedAvg, wait, S steps).

Seconds per round: the Flower runs from the ServerApp's round-0 evaluation to its last (Ray's and
the import's start-up excluded); the native run: the whole run / rounds (its start-up included, so
it is the conservative side). One run each, same machine, one process after another; results in
benchmarks/results/flower.{csv,md}. Under 3 minutes on 2 cores. Usage:
    python benchmarks/bench_flower.py [--nodes 10] [--rounds 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import logging
import time

from _common import append, machine


def _flower_app_rounds(run_fn, rounds: int) -> float:
    from fedsim.flower.example import app

    marks = []
    orig = app._server_eval

    def stamped(rnd, arrays):
        marks.append(time.perf_counter())
        return orig(rnd, arrays)

    app._server_eval = stamped
    try:
        run_fn()
    finally:
        app._server_eval = orig
    return (marks[-1] - marks[0]) / rounds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--note", default="machine shared with other agents: contended figures")
    a = p.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    cfg = {"strategy": "fedavg", "num-server-rounds": a.rounds, "min-nodes": a.nodes, "lr": 0.1, "seed": 0,
           "local-steps": a.steps}
    rows = []

    from flwr.app import Context, RecordDict
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.telemetry import EventType

    import fedsim.flower as ff
    from fedsim.flower.example import app

    def flower():
        ctx = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config=dict(cfg))
        _run_simulation(num_supernodes=a.nodes, client_app=app.client_app, server_app=app.server_app,
                        backend_config={"client_resources": {"num_cpus": 1}}, server_app_context=ctx,
                        exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE)

    ideal = {"seed": 0, "data": {"clients": a.nodes}, "system": {"speed": 1.0},
             "round": {"policy": "wait", "local_steps": a.steps}}

    def grid():
        ff.run(app.server_app, app.client_app, ideal, run_config=dict(cfg))

    t0 = time.perf_counter()
    s_flower = _flower_app_rounds(flower, a.rounds)
    total_flower = time.perf_counter() - t0
    t0 = time.perf_counter()
    s_grid = _flower_app_rounds(grid, a.rounds)
    total_grid = time.perf_counter() - t0

    import fedsim

    native = {"name": "bench_flower_native", "seed": 0, "rounds": a.rounds,
              "data": {"name": "digits", "clients": a.nodes, "iid": True}, "model": {"name": "mlp", "hidden": 32},
              "round": {"policy": "wait", "local_steps": a.steps},
              "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 32}, "eval": {"every": 1}}
    t0 = time.perf_counter()
    fedsim.run(native)
    total_native = time.perf_counter() - t0
    s_native = total_native / a.rounds

    for name, per, total in (("flower_run_simulation", s_flower, total_flower), ("fedsim_grid", s_grid, total_grid),
                             ("fedsim_native_batched", s_native, total_native)):
        rows.append({**machine(), "path": name, "nodes": a.nodes, "rounds": a.rounds, "steps": a.steps,
                     "s_per_round": round(per, 4), "total_s": round(total, 2), "note": a.note})
        print(f"{name:24s} {per:8.4f} s/round  (total {total:.1f} s)")
    append("flower", rows, "Flower app per-round cost: Flower's run_simulation vs fedsim's Grid vs fedsim native")


if __name__ == "__main__":
    main()
