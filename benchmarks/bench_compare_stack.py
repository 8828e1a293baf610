"""A comparison stacked (one program, its runs' training batched) against one program per run,
``--jobs 2`` and ``--jobs 1`` (issue 35).

    python benchmarks/bench_compare_stack.py [--rounds 3] [--quick] [--no-save]

The grid: Synthetic(1, 1) with 100 clients and a fixed data seed (so every run shares the data),
logistic regression, 20 clients a round doing 10 local steps (policy wait), 4 algorithms (fedavg,
fednova, fedprox, scaffold) x 3 lrs x 2 seeds = 24 runs. Each ``fedsim compare`` runs in a fresh
interpreter into its own folder: stacked (the default), ``--no-stack --jobs 2``, ``--no-stack``.
Printed: the wall times and their ratios from this one invocation, and whether the folders agree
(clients.csv of every run byte-identical in all three; rounds.csv and model.pt byte-identical
between the two unstacked ones, and stacked vs unstacked -- with torch's default threads the
stacked float32 training may differ in the last bits, docs/comparisons.md "Stacks"). Recorded
to ``benchmarks/results/compare_stack.{csv,md}`` with the machine description.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from _common import ROOT, append, machine

SCENARIO = {
    "name": "bench_stack", "seed": 0, "rounds": 5,
    "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 100, "seed": 0},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5},
    "round": {"policy": "wait", "local_steps": 10, "clients_per_round": 20},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
    "eval": {"every": 5},
}
AXES = ["--algorithms", "fedavg,fednova,fedprox,scaffold", "--grid", "algorithm.lr=0.02,0.05,0.1", "--seeds", "0,1"]


def digests(root: Path, name: str) -> dict[str, str]:
    return {str(p.parent.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob(name))}


def compare(path: Path, out: Path, rounds: int, extra: list[str], axes: list[str]) -> float:
    cmd = [sys.executable, "-m", "fedsim", "compare", str(path), *axes, "--out", str(out), "--quiet",
           "--set", f"rounds={rounds}", *extra]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"fedsim compare {' '.join(extra)} failed: {proc.stderr.strip()[-400:]}")
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 rounds, 6 runs; nothing recorded")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    rounds = 2 if a.quick else a.rounds
    axes = AXES[:2] + ["--grid", "algorithm.lr=0.05", "--seeds", "0"] if a.quick else AXES
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "s.yaml"
        path.write_text(yaml.safe_dump(SCENARIO))
        modes = {"stacked": [], "jobs2": ["--no-stack", "--jobs", "2"], "jobs1": ["--no-stack"]}
        wall = {m: compare(path, tmp / m, rounds, extra, axes) for m, extra in modes.items()}
        d = {m: {f: digests(tmp / m, f) for f in ("clients.csv", "rounds.csv", "model.pt")} for m in modes}
    runs = len(d["jobs1"]["rounds.csv"])
    clients_same = d["stacked"]["clients.csv"] == d["jobs1"]["clients.csv"] == d["jobs2"]["clients.csv"]
    unstacked_same = d["jobs1"] == d["jobs2"]
    stacked_same = d["stacked"] == d["jobs1"]
    print(f"{runs} runs of {rounds} rounds (a machine shared with other jobs): stacked {wall['stacked']:.1f} s, "
          f"--jobs 2 {wall['jobs2']:.1f} s, --jobs 1 {wall['jobs1']:.1f} s; stacked is "
          f"{wall['jobs2'] / wall['stacked']:.2f}x faster than --jobs 2, {wall['jobs1'] / wall['stacked']:.2f}x than "
          f"--jobs 1; clients.csv same in all: {clients_same}; unstacked folders same: {unstacked_same}; "
          f"stacked folders byte-identical: {stacked_same}")
    if not (a.no_save or a.quick):
        row = {**machine(), "runs": runs, "rounds": rounds, "stacked_s": round(wall["stacked"], 2),
               "jobs2_s": round(wall["jobs2"], 2), "jobs1_s": round(wall["jobs1"], 2),
               "vs_jobs2": round(wall["jobs2"] / wall["stacked"], 3), "vs_jobs1": round(wall["jobs1"] / wall["stacked"], 3),
               "clients_same": clients_same, "stacked_bytes_same": stacked_same}
        append("compare_stack", [row], "fedsim compare stacked vs --no-stack --jobs 2 / --jobs 1 (bench_compare_stack.py)")
    return 0 if clients_same and unstacked_same else 1


if __name__ == "__main__":
    sys.exit(main())
