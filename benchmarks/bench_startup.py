"""Start-up: ``fedsim run`` of a 1-round scenario against ``python -c "import torch"`` (issue 13).

    python benchmarks/bench_startup.py [--reps 5] [--clients 100] [--steps 20]

Cases, each a fresh interpreter, run ``--reps`` times interleaved (median wall time, peak RSS of
the child from ``wait4``):

* ``python``          -- ``python -c pass`` (the interpreter alone)
* ``import_torch``    -- ``python -c "import torch"`` (the floor of any run)
* ``validate``        -- ``fedsim validate`` of the 1-round scenario
* ``run_bad``         -- ``fedsim run`` of a scenario with an invalid field (must cost what
                         ``validate`` costs: no torch)
* ``run_1round``      -- ``fedsim run`` of Synthetic(1, 1) logistic regression, ``--clients``
                         clients x ``--steps`` steps x 1 round (target: within 1 s of import_torch)

Then ``python -X importtime -m fedsim run`` of the same scenario, its import time summed by top-level
package (self times), to show where start-up goes. Rows (with the machine description) are
appended to ``benchmarks/results/startup.{csv,md}`` and ``startup_imports.csv`` (the breakdown,
also appended to ``startup.md``).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import RESULTS, ROOT, append, machine

TARGET_S = 1.0


def scenario(clients: int, steps: int, speed: str = "5.0") -> str:
    return (
        f"name: startup\nseed: 0\nrounds: 1\ndata: {{name: synthetic, alpha: 1.0, beta: 1.0, clients: {clients}}}\n"
        f"model: {{name: logreg}}\nsystem: {{speed: {speed}, latency: 0.5}}\n"
        f"round: {{policy: wait, local_steps: {steps}}}\nalgorithm: {{name: fedavg, lr: 0.05, batch_size: 10}}\n"
    )


def timed(cmd: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB and exit status of one child."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def import_breakdown(cmd: list[str], top: int = 12) -> list[tuple[str, float]]:
    """Self import time (s) per top-level package of ``python -X importtime`` + ``cmd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
    per = collections.Counter()
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:"):].split("|")
        per[name.strip().split(".")[0]] += int(self_us)
    total = sum(per.values())
    rows = [(k, v / 1e6) for k, v in per.most_common(top)]
    return [("(all imports)", total / 1e6), *rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = Path(tmp) / "one.yaml", Path(tmp) / "bad.yaml"
        good.write_text(scenario(a.clients, a.steps))
        bad.write_text(scenario(a.clients, a.steps, speed="-1.0"))
        out = str(Path(tmp) / "run")
        cases = {
            "python": [py, "-c", "pass"],
            "import_torch": [py, "-c", "import torch"],
            "validate": [py, "-m", "fedsim", "validate", str(good)],
            "run_bad": [py, "-m", "fedsim", "run", str(bad), "--out", out, "--quiet"],
            "run_1round": [py, "-m", "fedsim", "run", str(good), "--out", out, "--quiet", "--force"],
        }
        expect = {"run_bad": 2}
        walls = collections.defaultdict(list)
        rss = collections.defaultdict(list)
        for _ in range(a.reps):  # interleaved: load changes hit every case alike
            for name, cmd in cases.items():
                w, m, rc = timed(cmd)
                if rc != expect.get(name, 0):
                    raise SystemExit(f"{name}: exit {rc} (expected {expect.get(name, 0)}): {' '.join(cmd)}")
                walls[name].append(w)
                rss[name].append(m)
        breakdown = import_breakdown(["-m", "fedsim", "run", str(good), "--out", out, "--quiet", "--force"])
    med = {k: statistics.median(v) for k, v in walls.items()}
    over = med["run_1round"] - med["import_torch"]
    desc = machine()
    rows = []
    print(f"start-up, median of {a.reps} (wall s, peak RSS MB):")
    for name in cases:
        print(f"  {name:<13} {med[name]:6.2f} s  {max(rss[name]):7.0f} MB")
        rows.append({**desc, "case": name, "reps": a.reps, "wall_s": round(med[name], 3),
                     "wall_min_s": round(min(walls[name]), 3), "rss_mb": round(max(rss[name]))})  # fmt: skip
    verdict = "met" if over <= TARGET_S else "NOT met"
    print(f"  run_1round - import_torch = {over:.2f} s (target <= {TARGET_S:.0f} s: {verdict})")
    rows.append({**desc, "case": "run_1round - import_torch", "reps": a.reps, "wall_s": round(over, 3),
                 "wall_min_s": "", "rss_mb": ""})  # fmt: skip
    print("import time of `fedsim run` by top-level package (self, s):")
    for pkg, s in breakdown:
        print(f"  {pkg:<18} {s:6.3f}")
    if not a.no_save:
        append("startup", rows, "Start-up: fedsim run of a 1-round scenario vs import torch (bench_startup.py)")
        imp = [{"date": desc["date"], "load1": desc["load1"], "package": p, "import_s": round(s, 3)} for p, s in breakdown]
        append("startup_imports", imp, "Import time of fedsim run by top-level package (bench_startup.py)")
        with open(RESULTS / "startup.md", "a") as f:
            f.write(f"\nImport time of `fedsim run` by top-level package ({desc['date']}, load {desc['load1']}):\n\n")
            f.write("| package | self import s |\n|---|---|\n")
            f.writelines(f"| {p} | {s:.3f} |\n" for p, s in breakdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
