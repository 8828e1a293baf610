"""FedBuff throughput at concurrency 1,000 against a window run's batched throughput (issue 18, item 4).

Full runs (training, no evaluation until the last update) of Synthetic(1,1) logistic regression
over a population of 100,000 clients, log-normal speeds (median 5 steps/s), 0.5 s transfers,
20 local steps per job:

* ``fedbuff``: ``round.policy: async``, concurrency 1,000, buffer 100, 50 server updates;
* ``window``: FedNova in 5 s windows with ``--window-cohort`` clients per round (default 100,
  the clients a FedBuff update aggregates; also run with 1,000, the clients in flight), capped at
  20 local steps, enough rounds for about the same number of client-steps.

Each runs in a fresh interpreter; the reported figure is trained client-steps (completed jobs'
steps) per second of the whole run loop (clock, training, server updates; the one evaluation at
the end excluded). Target: FedBuff within 2x of the window run.

    python benchmarks/bench_fedbuff.py [--clients 100000] [--concurrency 1000] [--buffer 100]
                                       [--updates 50] [--window-cohort 100,1000] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import islice
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine, run_script


def child(policy: str, clients: int, concurrency: int, buffer: int, rounds: int, cohort: int) -> None:
    import torch

    from fedsim.runner.build import build_run
    from fedsim.scenario import parse_scenario

    rnd = ({"policy": "async", "concurrency": concurrency, "buffer": buffer, "local_steps": 20}
           if policy == "fedbuff" else
           {"policy": "window", "window": 5.0, "clients_per_round": cohort, "max_local_steps": 20})
    sc = parse_scenario({
        "name": "fedbuff_bench", "seed": 0, "rounds": rounds,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": clients},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5},
        "round": rnd,
        "algorithm": {"name": "fedbuff" if policy == "fedbuff" else "fednova", "lr": 0.05, "batch_size": 10},
    })  # fmt: skip
    built = build_run(sc)
    eng = built.engine
    steps = 0
    t = time.perf_counter()
    for plan in islice(built.clock.plans(), rounds):
        eng.step(plan)
        steps += sum(j.steps for j in plan.jobs if j.status == "completed")
    wall = time.perf_counter() - t
    print(json.dumps({"wall_s": round(wall, 2), "client_steps": steps, "steps_per_s": round(steps / wall, 1),
                      "chunk": eng.chunk, "threads": torch.get_num_threads()}))


def measure(policy: str, a, rounds: int, cohort: int = 0) -> dict:
    proc = run_script([str(Path(__file__).resolve()), "--child", policy, "--clients", str(a.clients),
                       "--concurrency", str(a.concurrency), "--buffer", str(a.buffer), "--updates", str(rounds),
                       "--cohort", str(cohort)], timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--buffer", type=int, default=100)
    ap.add_argument("--updates", type=int, default=50)
    ap.add_argument("--window-cohort", default="100,1000")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cohort", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.clients, a.concurrency, a.buffer, a.updates, a.cohort)
        return 0
    fb = measure("fedbuff", a, a.updates)
    rows = []
    for cohort in (int(x) for x in a.window_cohort.split(",")):
        rounds = max(1, round(fb["client_steps"] / (20 * cohort)))  # about the same client-steps
        win = measure("window", a, rounds, cohort)
        ratio = win["steps_per_s"] / fb["steps_per_s"]
        rows.append(dict(
            case=f"Synthetic(1,1) logreg, {a.clients} clients", fedbuff=f"C {a.concurrency}, K {a.buffer}, {a.updates} updates",
            fedbuff_steps=fb["client_steps"], fedbuff_wall_s=fb["wall_s"], fedbuff_steps_per_s=fb["steps_per_s"],
            window=f"{cohort} per round, {rounds} rounds", window_steps=win["client_steps"], window_wall_s=win["wall_s"],
            window_steps_per_s=win["steps_per_s"], window_over_fedbuff=round(ratio, 2), target="<= 2x",
            ok="yes" if ratio <= 2 else "NO", chunk=fb["chunk"],
        ))  # fmt: skip
        rows[-1].update(machine(fb["threads"]))
        print(", ".join(f"{k} {v}" for k, v in rows[-1].items() if k not in ("date", "cpu", "torch", "device")),
              flush=True)
    if not a.no_save:
        append("fedbuff", rows, "FedBuff throughput at concurrency 1,000 (issue 18)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
