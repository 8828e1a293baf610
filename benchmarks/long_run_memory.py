"""Long runs stay flat: resident memory at round 100 and round 2,000 of a small scenario.

Runs 2,000 rounds of Synthetic(1,1) logistic regression (FedNova, 10 clients, window policy,
evaluation every 10 rounds, checkpoint every 100) through the real runner, records VmRSS at
rounds 100 and 2,000 and the peak (VmHWM), and appends the result with the machine's description
to benchmarks/results/long_run_memory.md.

    python benchmarks/long_run_memory.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedsim.engine import run as engine_run
from fedsim.runner import run
from fedsim.scenario import parse_scenario

RESULTS = Path(__file__).resolve().parent / "results" / "long_run_memory.md"


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    sc = parse_scenario({
        "name": "long", "rounds": args.rounds,
        "data": {"name": "synthetic", "clients": 10},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.5}, "latency": 0.1},
        "round": {"policy": "window", "window": 2.0},
        "algorithm": {"name": "fednova", "lr": 0.02, "batch_size": 10},
        "eval": {"every": 10},
        "checkpoint": {"every": 100},
    })
    marks: dict[int, int] = {}
    original = engine_run.SyncEngine.step

    def step(self, plan):
        out = original(self, plan)
        if plan.round + 1 in (100, args.rounds):
            marks[plan.round + 1] = _status_kb("VmRSS")
        return out

    engine_run.SyncEngine.step = step
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run(sc, Path(tmp) / "run", progress=False)
    wall = time.perf_counter() - t0
    peak = _status_kb("VmHWM")
    r100, rend = marks.get(100, -1), marks.get(args.rounds, -1)
    growth = (rend - r100) / r100 * 100 if r100 > 0 else float("nan")
    line = (
        f"| {time.strftime('%Y-%m-%d')} | {machine()} | {args.rounds} | {r100 / 1024:.1f} | "
        f"{rend / 1024:.1f} | {growth:+.2f}% | {peak / 1024:.1f} | {wall:.1f} |\n"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Long-run memory (benchmarks/long_run_memory.py)\n\n"
            "| date | machine | rounds | RSS @100 (MiB) | RSS @end (MiB) | growth | peak RSS (MiB) | wall (s) |\n"
            "|---|---|---|---|---|---|---|---|\n"
        )
    with open(RESULTS, "a") as f:
        f.write(line)
    sys.stdout.write(line)


if __name__ == "__main__":
    main()
