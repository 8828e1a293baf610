"""Population at the cost of the participants: a 100,000-client Synthetic run against a 1,000-client one.

Both run Synthetic(1,1) with logistic regression, 20 clients per round in a 2 s window, 2 rounds,
evaluation every round (the default evaluation sample: every client up to 1,000, else 1,000 of
them), each in a fresh interpreter; reports wall time and peak resident set size (``ru_maxrss``)
of each and their ratios. Target (issue 11): the big population costs <= 1.5x the small one.

    python benchmarks/bench_population_run.py [--small 1000] [--big 100000] [--rounds 2] [--per-round 20]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine, run_script


def child(clients: int, rounds: int, per_round: int) -> None:
    import torch

    from fedsim.runner import run as run_scenario
    from fedsim.scenario import parse_scenario

    sc = parse_scenario({
        "name": "population", "seed": 0, "rounds": rounds,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": clients},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}},
        "round": {"policy": "window", "window": 2.0, "clients_per_round": per_round},
        "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 10},
    })  # fmt: skip
    out = Path(tempfile.mkdtemp(prefix="fedsim-pop-"))
    t = time.perf_counter()
    try:
        run_scenario(sc, out / "run", progress=False)
    finally:
        wall = time.perf_counter() - t
        shutil.rmtree(out, ignore_errors=True)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_rss_mb": round(peak_kb / 1024, 1), "wall_s": round(wall, 2), "threads": torch.get_num_threads()}))


def measure(clients: int, rounds: int, per_round: int) -> dict:
    proc = run_script([str(Path(__file__).resolve()), "--child", "--clients", str(clients), "--rounds", str(rounds),
                       "--per-round", str(per_round)], timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--big", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--clients", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        child(a.clients, a.rounds, a.per_round)
        return 0
    small, big = measure(a.small, a.rounds, a.per_round), measure(a.big, a.rounds, a.per_round)
    wall_x, rss_x = big["wall_s"] / small["wall_s"], big["peak_rss_mb"] / small["peak_rss_mb"]
    row = dict(case=f"Synthetic(1,1) logreg, {a.per_round} per round, {a.rounds} rounds", small=a.small, big=a.big,
               wall_small_s=small["wall_s"], wall_big_s=big["wall_s"], wall_ratio=round(wall_x, 2),
               rss_small_mb=small["peak_rss_mb"], rss_big_mb=big["peak_rss_mb"], rss_ratio=round(rss_x, 2),
               target="<= 1.5x", ok="yes" if max(wall_x, rss_x) <= 1.5 else "NO")  # fmt: skip
    row.update(machine(big["threads"]))
    print(", ".join(f"{k} {v}" for k, v in row.items() if k not in ("date", "cpu", "torch", "device")), flush=True)
    if not a.no_save:
        append("population_run", [row], "Population at the cost of the participants (100,000 vs 1,000 clients)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
