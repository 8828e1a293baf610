"""``fedsim compare --jobs 2`` against ``--jobs 1`` on the same grid (issue 13).

    python benchmarks/bench_compare_jobs.py [--jobs 2] [--rounds 40] [--seeds 0,1] [--quick]

The grid: ``scenarios/quickstart.yaml`` (Synthetic(1, 1), 30 clients, logistic regression; its
three variants fednova_window / fedavg_window / fedavg_wait as one axis) x seeds, ``--rounds``
rounds per run. Each ``fedsim compare`` runs in a fresh interpreter into its own folder, ``--jobs
1`` first, then ``--jobs N``; the wall times, their ratio (the speed-up of parallel cells) and
whether every cell's run folder holds the same bytes in both (rounds.csv, clients.csv, model.pt)
go to ``benchmarks/results/compare_jobs.{csv,md}`` with the machine description.
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

import _common
from _common import ROOT, append, machine


def folder_digests(root: Path) -> dict[str, str]:
    """sha256 of each run folder's tables and model under a comparison folder."""
    out = {}
    for rounds in sorted(root.rglob("rounds.csv")):
        d = rounds.parent
        h = hashlib.sha256(rounds.read_bytes() + (d / "clients.csv").read_bytes() + (d / "model.pt").read_bytes())
        out[str(d.relative_to(root))] = h.hexdigest()
    return out


def compare(jobs: int, out: Path, rounds: int, seeds: str) -> float:
    cmd = [sys.executable, "-m", "fedsim", "compare", str(ROOT / "scenarios" / "quickstart.yaml"), "--seeds", seeds,
           "--jobs", str(jobs), "--out", str(out), "--quiet", "--set", f"rounds={rounds}"]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"fedsim compare --jobs {jobs} failed: {proc.stderr.strip()[-400:]}")
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--quick", action="store_true", help="2 rounds, seed 0; nothing recorded")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    rounds, seeds = (2, "0") if a.quick else (a.rounds, a.seeds)
    with tempfile.TemporaryDirectory() as tmp:
        one = compare(1, Path(tmp) / "jobs1", rounds, seeds)
        many = compare(a.jobs, Path(tmp) / f"jobs{a.jobs}", rounds, seeds)
        d1, dn = folder_digests(Path(tmp) / "jobs1"), folder_digests(Path(tmp) / f"jobs{a.jobs}")
    same = bool(d1) and d1 == dn
    print(f"{len(d1)} runs of {rounds} rounds: --jobs 1 {one:.2f} s, --jobs {a.jobs} {many:.2f} s, "
          f"speed-up {one / many:.2f}x, same bytes: {same}")  # fmt: skip
    if not (a.no_save or a.quick):
        row = {**machine(), "runs": len(d1), "rounds": rounds, "jobs": a.jobs, "jobs1_s": round(one, 2),
               "jobsN_s": round(many, 2), "speedup": round(one / many, 3), "same_bytes": same}  # fmt: skip
        append("compare_jobs", [row], "fedsim compare --jobs N vs --jobs 1 (bench_compare_jobs.py)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
