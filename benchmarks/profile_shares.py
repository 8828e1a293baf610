"""Where a stacked comparison's wall time goes, from a py-spy sampling profile (issue 35's floor).

    pip install py-spy
    py-spy record -r 50 -f raw -o stack.raw -- python -m fedsim compare GRID.yaml ARGS --quiet
    python benchmarks/profile_shares.py GRID stack.raw [more.raw ...] --runs-profiled N [--save]
    py-spy record -r 50 -f raw -o alone.raw -- python -m fedsim compare GRID.yaml ARGS --no-stack --quiet
    python benchmarks/profile_shares.py GRID alone.raw --runs-profiled N --alone [--save]

(``GRID.yaml`` and ``ARGS``: what ``bench_compare_grids.py GRID --seeds 0`` runs stacked.)

Each sample is put in the first of these parts that its stack passes through (py-spy's samples
with no Python frame, a line of a bare count, are left out):

- ``data``: generating Synthetic clients on demand and copying a request's clients into one
  tensor (``SyntheticPopulation.gather``, ``Workload._copied_in``);
- ``compression``: compressing the uploads (``compress_cohort``);
- ``training``: the local steps (``train_rows``, batched across runs; ``train_cohort``, a run alone);
- ``evaluation``: the evaluations (``evaluate_together``, ``client_metrics_together``; alone,
  ``EvalRequest.run``, ``ClientEvalRequest.run``);
- ``imports``: importing modules;
- ``rest``: everything else -- each run's clock, selection, server update and table writes.

``training``, ``evaluation`` and ``compression`` are tensor arithmetic that every run needs,
stacked or not (each row of a stack has its own weights, so a stacked step still does every
run's products; what it saves is per-call cost, which ``--alone`` below measures), so the stacked
program's seconds of it bound what stacking can gain on this machine unless that arithmetic gets
faster: scaled from the profiled runs to the grid's, divided by two when the runs use one thread
(two processes could share them out) and by one when they already use both cores, they are the
least wall time (``floor_s``) this way of running the grid could take, and ``jobs2_s`` (the grid's
last ``--no-stack --jobs 2`` time in ``results/compare_grids.csv``) over it is the largest
speed-up stacking could give (``best_x``). ``--save`` appends the row to
``results/stack_profile.{csv,md}``.

With ``--alone`` the profile is of the same runs each run alone (``--no-stack``, one process),
and the arithmetic is compared run for run: its seconds per run alone (``alone_s``) over its
seconds per run in the grid's last stacked profile (``stacked_s``) is what stacking saved of the
arithmetic itself (``saved_x``; 1 means that a stacked step of many runs costs the sum of their
steps). ``--save`` appends that row to ``results/alone_profile.{csv,md}``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

#: Torch threads a run of each grid uses here (bench_compare_grids.py: ``engine.threads: 1``, or
#: the default, both cores for batched chunks).
THREADS = {"straggler": 1, "wire": 1, "devices": 2, "hparams": 2}
ARITHMETIC = ("compression", "training", "evaluation")

PARTS = {
    "data": ("SyntheticPopulation.gather ", "Workload._copied_in "),
    "compression": ("compress_cohort ",),
    "training": ("train_rows ", "train_cohort "),
    "evaluation": ("evaluate_together ", "client_metrics_together ", "EvalRequest.run ", "ClientEvalRequest.run "),
    "imports": ("_find_and_load ",),
}


def part_of(stack: str) -> str:
    """The part a sampled stack (py-spy raw: frames ``name (file:line)`` joined by ``;``) counts in."""
    frames = stack.split(";")
    for part, names in PARTS.items():
        if any(f.startswith(n) for f in frames for n in names):
            return part
    return "rest"


def shares(lines, rate: float) -> dict[str, float]:
    """Seconds per part of py-spy raw ``lines`` sampled at ``rate`` per second."""
    seconds: Counter = Counter()
    for i, line in enumerate(lines, 1):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            if not line.strip():
                continue
            raise ValueError(f"line {i} is not py-spy's raw format (frames, a space, a sample count)")
        if stack:  # a bare count: samples with no Python frame, not counted
            seconds[part_of(stack)] += int(count) / rate
    return {p: seconds.get(p, 0.0) for p in [*PARTS, "rest"]}


def floor(parts: dict[str, float], runs_profiled: int, runs: int, threads: int) -> float:
    """Seconds of tensor arithmetic of the whole grid on this machine's two cores."""
    return sum(parts[p] for p in ARITHMETIC) * runs / runs_profiled / (2 if threads == 1 else 1)


def arithmetic_per_run(parts: dict[str, float], runs_profiled: int) -> float:
    """Seconds of tensor arithmetic per profiled run."""
    return sum(parts[p] for p in ARITHMETIC) / runs_profiled


def recorded(grid: str, name: str = "compare_grids") -> dict:
    """The grid's last row of ``results/<name>.csv`` (compare_grids: its runs, its baseline's
    seconds; stack_profile: its stacked profile)."""
    with open(Path(__file__).parent / "results" / f"{name}.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["grid"] == grid][-1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid", choices=sorted(THREADS))
    ap.add_argument("raw", nargs="+", help="py-spy record -f raw outputs (their seconds are added)")
    ap.add_argument("--runs-profiled", type=int, required=True, help="runs in the profiled comparisons")
    ap.add_argument("--rate", type=float, default=50.0, help="py-spy's -r (samples per second)")
    ap.add_argument("--alone", action="store_true", help="the profiles are of --no-stack runs")
    ap.add_argument("--save", action="store_true")
    a = ap.parse_args(argv)
    got: Counter = Counter()
    if not a.rate > 0:
        ap.error("--rate: must be a positive number of samples per second")
    if a.runs_profiled < 1:
        ap.error("--runs-profiled: must be at least 1 (the runs the profiles are of)")
    for path in a.raw:
        try:
            with open(path) as f:
                got.update(shares(f, a.rate))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            ap.exit(2, f"profile_shares: {path}: {err}\n")
    total = sum(got.values())
    for part in [*PARTS, "rest"]:
        print(f"{part:12s} {got[part]:8.1f} s  {100 * got[part] / total:5.1f}%")
    if a.alone:
        return _alone(a, got, total)
    row = recorded(a.grid)
    runs, threads, jobs2 = int(row["runs"]), THREADS[a.grid], float(row["jobs2_s"])
    low = floor(got, a.runs_profiled, runs, threads)
    print(f"{'total':12s} {total:8.1f} s; the grid's arithmetic on two cores: {low:.1f} s, "
          f"--no-stack --jobs 2 {jobs2:.1f} s: at most {jobs2 / low:.2f}x")
    if a.save:
        _save("stack_profile", threads, {"grid": a.grid, "runs": runs, "runs_profiled": a.runs_profiled,
                                         **_seconds(got, total), "floor_s": round(low, 1), "jobs2_s": jobs2,
                                         "best_x": round(jobs2 / low, 2)},
              "Where a stack's time goes (py-spy), and the least time the grid's arithmetic takes")
    return 0


def _alone(a, got: Counter, total: float) -> int:
    """``--alone``: the profiled runs' arithmetic per run against the grid's last stacked profile."""
    stacked = recorded(a.grid, "stack_profile")
    alone = arithmetic_per_run(got, a.runs_profiled)
    per_stacked = arithmetic_per_run({p: float(stacked[f"{p}_s"]) for p in ARITHMETIC}, int(stacked["runs_profiled"]))
    if not per_stacked > 0:
        sys.exit(f"profile_shares: the {a.grid} grid's stacked profile ({stacked['date']}) has no arithmetic")
    print(f"{'total':12s} {total:8.1f} s; arithmetic per run alone {alone:.3f} s, stacked {per_stacked:.3f} s "
          f"(profile of {stacked['date']}): stacking saved {alone / per_stacked:.2f}x of it")
    if a.save:
        _save("alone_profile", THREADS[a.grid], {
            "grid": a.grid, "runs_profiled": a.runs_profiled, **_seconds(got, total), "alone_s": round(alone, 4),
            "stacked_s": round(per_stacked, 4), "stacked_profile": stacked["date"],
            "saved_x": round(alone / per_stacked, 2)},
            "Each run alone (py-spy): its arithmetic per run against the stacked profile's")
    return 0


def _seconds(got: Counter, total: float) -> dict:
    return {**{f"{p}_s": round(got[p], 1) for p in [*PARTS, "rest"]}, "total_s": round(total, 1)}


def _save(name: str, threads: int, row: dict, title: str) -> None:
    """Append ``row``, after the machine's description, to ``results/<name>.{csv,md}``."""
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import append, machine

    append(name, [{**machine(threads), **row}], title)


if __name__ == "__main__":
    sys.exit(main())
