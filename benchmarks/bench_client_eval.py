"""What ``eval.per_client`` costs (issue 36 item 2): the share of a run's time it takes.

Each case is one run with the key, in this process; the time spent in the per-client evaluation
(the tensor work of each request, :meth:`fedsim.engine.request.ClientEvalRequest.run`, wall and
CPU; the group rows from its arrays are not timed) is measured inside the run,
so ``ratio = run time / (run time - per-client time)`` is the run's time with the key over its
time without, from one run, and other load on the machine stretches both parts alike.

* ``synthetic``: Synthetic(1, 1), 100 clients, logistic regression, 15 window rounds of 20
  clients, evaluated every round, per-client on 50 and on all 100 clients;
* ``digits``: digits, 30 clients, Dirichlet 0.5, CNN, 6 rounds of 10 clients with 10 local
  steps, evaluated every round, ``holdout: 0.2``, per-client on all 30 clients.

Evaluating after every round is the most a run can: evaluating every k rounds divides the
extra by about k.

    python benchmarks/bench_client_eval.py [--no-save]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine

import fedsim

CASES = {
    "synthetic": {
        "name": "bench_client_eval", "seed": 0, "rounds": 15,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 100},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5},
        "round": {"policy": "window", "window": 5.0, "max_local_steps": 20, "clients_per_round": 20},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
        "eval": {"every": 1},
    },
    "digits": {
        "name": "bench_client_eval", "seed": 0, "rounds": 6,
        "data": {"name": "digits", "clients": 30, "partition": {"name": "dirichlet", "alpha": 0.5}},
        "model": {"name": "cnn"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5},
        "round": {"policy": "wait", "local_steps": 10, "clients_per_round": 10},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
        "eval": {"every": 1},
    },
}


def variant(raw: dict, clients: int | None, holdout: float | None) -> dict:
    import copy

    out = copy.deepcopy(raw)
    if clients is not None:
        out["eval"]["per_client"] = {"clients": clients, "tiers": 4, **({"holdout": holdout} if holdout else {})}
    return out


def one(raw: dict) -> dict:
    """Wall and CPU seconds of one run and of its per-client evaluations."""
    from fedsim.engine.request import ClientEvalRequest

    spent = {"wall": 0.0, "cpu": 0.0, "calls": 0}
    inner = ClientEvalRequest.run

    def timed(self):
        t, c = time.perf_counter(), time.process_time()
        try:
            return inner(self)
        finally:
            spent["wall"] += time.perf_counter() - t
            spent["cpu"] += time.process_time() - c
            spent["calls"] += 1

    ClientEvalRequest.run = timed
    try:
        with tempfile.TemporaryDirectory() as d:
            t, c = time.perf_counter(), time.process_time()
            fedsim.run(raw, out=Path(d) / "run")
            wall, cpu = time.perf_counter() - t, time.process_time() - c
    finally:
        ClientEvalRequest.run = inner
    return {"run_wall_s": wall, "run_cpu_s": cpu, "eval_wall_s": spent["wall"], "eval_cpu_s": spent["cpu"],
            "evaluations": spent["calls"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    rows = []
    one(variant(CASES["synthetic"], 5, None))  # warm-up (imports)
    for name, clients, holdout in (("synthetic", 50, None), ("synthetic", 100, None), ("digits", 30, 0.2)):
        r = one(variant(CASES[name], clients, holdout))
        ratio_w = r["run_wall_s"] / (r["run_wall_s"] - r["eval_wall_s"])
        ratio_c = r["run_cpu_s"] / (r["run_cpu_s"] - r["eval_cpu_s"])
        rows.append({**machine(), "case": name, "per_client_clients": clients,
                     **{k: round(v, 3) for k, v in r.items()}, "ratio_wall": round(ratio_w, 4),
                     "ratio_cpu": round(ratio_c, 4)})
        print(f"{name:10s} {clients:4d} clients: run {r['run_wall_s']:.2f} s, per-client {r['eval_wall_s']:.3f} s "
              f"in {r['evaluations']} evaluations; ratio wall {ratio_w:.4f}, cpu {ratio_c:.4f}")
    if not a.no_save:
        append("client_eval", rows, "eval.per_client: share of a run's time (benchmarks/bench_client_eval.py)")


if __name__ == "__main__":
    main()
