"""Clock-only mode: ``fedsim run X.yaml --schedule-only`` for 10,000 clients x 1,000 window rounds.

Times the real command (a fresh interpreter: imports, clock, writing ``clients.csv`` -- 10 million
rows, about 600 MB -- and ``rounds.csv``) on a scenario of 10,000 always-online clients with
log-normal speeds, every client in every round, window policy. Also times the clock alone on its
SimPy path (clients with Markov outages, where the vectorised window path does not apply) for a
few rounds, as a per-round cost.

    python benchmarks/bench_schedule.py [--clients 10000] [--rounds 1000] [--simpy-rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine, run_script

SCENARIO = """\
name: schedule_bench
seed: 0
rounds: {rounds}
data: {{name: quadratic, clients: {clients}, dim: 2}}
system:
  speed: {{dist: lognormal, median: 5.0, sigma: 0.6}}
  latency: 0.5
round: {{policy: window, window: 5.0, max_local_steps: 60}}
algorithm: {{name: fednova, lr: 0.05, batch_size: 10}}
"""


def timed_cli(yaml_path: Path, out: Path, extra: list[str]) -> tuple[float, int]:
    t = time.perf_counter()
    proc = run_script(["-m", "fedsim", "run", str(yaml_path), "--schedule-only", "--out", str(out), "--force", *extra],
                      timeout=1800)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    rows = sum(1 for _ in open(out / "clients.csv", "rb")) - 1
    return wall, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--simpy-rounds", type=int, default=5)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fedsim-schedule-"))
    rows = []
    try:
        path = tmp / "s.yaml"
        path.write_text(SCENARIO.format(rounds=a.rounds, clients=a.clients))
        wall, n = timed_cli(path, tmp / "out", [])
        size_mb = (tmp / "out" / "clients.csv").stat().st_size / 2**20
        rows.append(dict(case=f"window, always online (vectorised clock), {a.clients} clients", rounds=a.rounds,
                         rows=n, csv_mb=round(size_mb), wall_s=round(wall, 2),
                         per_round_ms=round(1000 * wall / a.rounds, 2), target="< 60 s",
                         ok="yes" if wall < 60 else "NO"))
        shutil.rmtree(tmp / "out")
        if a.simpy_rounds:  # the clock alone, in this process: per-round cost of the SimPy path
            import numpy as np

            from fedsim.runner.clock import build_clock
            from fedsim.scenario import load_scenario

            sc = load_scenario(path, ["system.availability={model: markov, mean_online: 600, mean_offline: 60}"])
            clock = build_clock(sc, np.ones(a.clients, dtype=np.int64))
            it = clock.tables()
            t = time.perf_counter()
            n = sum(len(next(it)) for _ in range(a.simpy_rounds))
            wall = time.perf_counter() - t
            rows.append(dict(case=f"clock only: window, Markov outages (SimPy path), {a.clients} clients",
                             rounds=a.simpy_rounds, rows=n, csv_mb="", wall_s=round(wall, 2),
                             per_round_ms=round(1000 * wall / a.simpy_rounds, 2), target="", ok=""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for row in rows:
        row.update(machine(1))
        print(", ".join(f"{k} {v}" for k, v in row.items() if k not in ("date", "cpu", "torch", "device")), flush=True)
    if not a.no_save:
        append("schedule", rows, "Clock-only mode (--schedule-only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
