"""Peak resident memory for 1,000 clients of logistic regression.

Runs Synthetic(1,1) with 1,000 clients (about 400k samples: FedProx's generator), logistic
regression, a 5 s window with log-normal speeds, *every* client in every round (so the engine
steps all 1,000 in chunks of ``auto``), evaluation every round, in a fresh interpreter, and
reads its peak resident set size (``ru_maxrss``: data, model, torch and Python together).

    python benchmarks/bench_memory.py [--clients 1000] [--rounds 3]
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


def child(clients: int, rounds: int) -> None:
    import torch

    from fedsim.runner import run as run_scenario
    from fedsim.scenario import parse_scenario

    sc = parse_scenario({
        "name": "memory", "seed": 0, "rounds": rounds,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": clients},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5},
        "round": {"policy": "window", "window": 5.0, "max_local_steps": 60},
        "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 10},
    })
    out = Path(tempfile.mkdtemp(prefix="fedsim-mem-"))
    t = time.perf_counter()
    try:
        run_scenario(sc, out / "run", progress=False)
        import pandas as pd

        rounds_df = pd.read_csv(out / "run" / "rounds.csv")
        info = (out / "run" / "info.yaml").read_text()
    finally:
        wall = time.perf_counter() - t
        shutil.rmtree(out, ignore_errors=True)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "peak_rss_mb": round(peak_kb / 1024, 1), "wall_s": round(wall, 2),
        "participants": int(rounds_df["participants"].iloc[-1]),
        "train_samples": int([ln for ln in info.splitlines() if ln.startswith("train_samples")][0].split()[-1]),
        "chunk": int([ln for ln in info.splitlines() if ln.startswith("clients_per_batch")][0].split()[-1]),
        "threads": torch.get_num_threads(),
    }))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        child(a.clients, a.rounds)
        return 0
    proc = run_script([str(Path(__file__).resolve()), "--child", "--clients", str(a.clients), "--rounds", str(a.rounds)],
                      timeout=1800)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    row = dict(case=f"logreg Synthetic(1,1), {a.clients} clients, all per round", rounds=a.rounds,
               participants=res["participants"], train_samples=res["train_samples"], chunk=res["chunk"],
               peak_rss_mb=res["peak_rss_mb"], wall_s=res["wall_s"], target="< 2048 MB",
               ok="yes" if res["peak_rss_mb"] < 2048 else "NO")
    row.update(machine(res["threads"]))
    print(", ".join(f"{k} {v}" for k, v in row.items() if k not in ("date", "cpu", "torch", "device")), flush=True)
    if not a.no_save:
        append("memory", [row], "Peak resident memory, 1,000 clients of logistic regression")
    return 0


if __name__ == "__main__":
    sys.exit(main())
