"""Run every speed benchmark once (``make bench``); results are appended to benchmarks/results/.

    python benchmarks/run_all.py [--quick]

Each benchmark runs in its own interpreter (clean thread settings and peak-memory reading) and
appends its rows, with the machine's description (CPU model, cores, torch version, threads,
load), to ``benchmarks/results/<name>.csv`` and ``<name>.md``:

* engine   -- client-steps/s, batched vs one client at a time (bench_engine.py)
* overhead -- share of wall time outside training, Synthetic(1,1) FedNova (bench_overhead.py)
* memory   -- peak resident memory, 1,000 clients of logistic regression (bench_memory.py)
* schedule -- ``--schedule-only`` with 10,000 clients x 1,000 rounds (bench_schedule.py)
* startup  -- ``fedsim run`` of a 1-round scenario vs ``import torch``; import-time breakdown (bench_startup.py)
* concurrent   -- two runs at once vs back to back, logreg / MLP / CNN (bench_concurrent.py)
* compare_jobs -- ``fedsim compare --jobs 2`` vs ``--jobs 1`` (bench_compare_jobs.py)
* vs_loop  -- fedsim vs a per-client torch loop vs Flower's simulation (bench_vs_loop.py; Flower
  from /work/flwr-venv when present)

About 10-15 minutes on a 2-core CPU, most of it the concurrency runs and Flower. ``--quick`` shrinks every benchmark (a smoke run; not recorded).
These are benchmarks, not tests: on a shared machine the absolute numbers move with the load
(the ``load1`` column); the ratios are measured interleaved within one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import run_script

HERE = Path(__file__).resolve().parent

BENCHES = [
    ("engine", ["bench_engine.py"], ["--reps", "1", "--cases", "logreg-synthetic-100,mlp-digits-16"]),
    ("overhead", ["bench_overhead.py"], ["--rounds", "40"]),
    ("memory", ["bench_memory.py"], ["--clients", "200", "--rounds", "1"]),
    ("schedule", ["bench_schedule.py"], ["--clients", "2000", "--rounds", "50", "--simpy-rounds", "1"]),
    ("startup", ["bench_startup.py"], ["--reps", "1", "--clients", "10", "--steps", "2"]),
    ("concurrent", ["bench_concurrent.py"], ["--quick", "--cases", "logreg"]),
    ("compare_jobs", ["bench_compare_jobs.py"], ["--quick"]),
    ("vs_loop", ["bench_vs_loop.py"], ["--clients", "4", "--steps", "2", "--rounds", "2"]),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs, nothing recorded")
    ap.add_argument("--only", default=None, help="comma-separated subset of: " + ", ".join(b[0] for b in BENCHES))
    a = ap.parse_args(argv)
    only = set(a.only.split(",")) if a.only else None
    failed = []
    for name, script, quick in BENCHES:
        if only and name not in only:
            continue
        args = [str(HERE / script[0]), *script[1:]] + (quick + ["--no-save"] if a.quick else [])
        print(f"== {name}", flush=True)
        t = time.perf_counter()
        proc = run_script(args, timeout=3600)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            failed.append(name)
            sys.stdout.write(proc.stderr)
        print(f"   ({time.perf_counter() - t:.0f} s)", flush=True)
    if not a.quick:
        print(f"results appended under {HERE / 'results'}")
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
