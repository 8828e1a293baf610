"""Population scale: ``fedsim run X.yaml --schedule-only`` on a million clients with Markov outages.

Issue 11's targets: 1,000,000 clients with Markov outages, 100 clients per round, 1,000 window
rounds in < 60 s and < 2 GB peak; the same with a 100,000-device trace. Each case runs the real
command in a fresh interpreter and reports its wall time and peak resident memory (ru_maxrss).
The trace case writes a generated trace first (each device online in a few intervals of a
2400-s day, speeds log-normal); its writing is not timed.

Issue 18's targets (``--policies wait,deadline,overcommit,async``, results in
``results/population_policies.*``): the same 10^6 clients (Markov, online 300 s / offline 100 s)
with 1,000 clients per round x 1,000 rounds under ``wait``, ``deadline`` (8 s) and
``overcommit`` (1.3), and ``async`` with concurrency 1,000, buffer 100 x 1,000 server updates,
each < 60 s and < 2 GB; and the same on a 10^5-device trace written by ``fedsim trace generate
--days 2 --session-start-hours 0`` (Synthetic(1,1) logistic regression, batch 10; deadline 60 s).

    python benchmarks/bench_population.py [--clients 1000000] [--rounds 1000] [--per-round 100]
                                          [--trace-clients 100000] [--policies window]
                                          [--cohort 1000] [--concurrency 1000] [--buffer 100] [--no-save]
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
name: population_bench
seed: 0
rounds: {rounds}
data: {{name: quadratic, clients: {clients}, dim: 2}}
system:
  {system}
  latency: 0.5
round: {{policy: window, window: 10.0, clients_per_round: {per_round}, max_local_steps: 60}}
algorithm: {{name: fednova, lr: 0.05, batch_size: 10}}
"""

MARKOV = "speed: {dist: lognormal, median: 5.0, sigma: 0.6}\n  availability: {model: markov, mean_online: 600, mean_offline: 60}"

#: Runs the command line in this interpreter and prints its own peak RSS (KiB) last.
PROBE = ("import resource, sys; from fedsim.cli import main; rc = main(sys.argv[1:]); "
         "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)")


def write_trace(path: Path, clients: int, seed: int = 0) -> None:
    """A day of 2400 s per device: online in 1-3 random intervals, log-normal speed while online."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = ["client,start,end,online,speed"]
    for c in range(clients):
        cuts = np.sort(rng.choice(np.arange(1, 24), size=2 * rng.integers(1, 4), replace=False)) * 100.0
        speed = float(np.exp(rng.normal(np.log(5.0), 0.6)))
        for s, e in zip(cuts[::2], cuts[1::2]):
            lines.append(f"{c},{s:g},{e:g},1,{speed:.6g}")
        lines.append(f"{c},{cuts[-1]:g},2400,0,0")
    path.write_text("\n".join(lines) + "\n")


POLICY_SCENARIO = """\
name: population_policies
seed: 0
rounds: {rounds}
data: {data}
{model}system:
  {system}
  latency: 0.5
round: {round}
algorithm: {{name: {algorithm}, lr: 0.05, batch_size: 10}}
"""

MARKOV_18 = ("speed: {dist: lognormal, median: 5.0, sigma: 0.6}\n"
             "  availability: {model: markov, mean_online: 300, mean_offline: 100}")


def policy_round(policy: str, a, deadline: float) -> tuple[str, str]:
    """(round section, algorithm) of one issue-18 case."""
    work = "local_steps: 20"
    if policy == "async":
        return f"{{policy: async, {work}, concurrency: {a.concurrency}, buffer: {a.buffer}}}", "fedbuff"
    extra = {"wait": "", "deadline": f", deadline: {deadline}", "overcommit": ", overcommit: 1.3"}[policy]
    return f"{{policy: {policy}, {work}, clients_per_round: {a.cohort}{extra}}}", "fednova"


def generate_trace(path: Path, clients: int) -> None:
    """A device trace of ``clients`` devices by ``fedsim trace generate`` (2 days, sessions starting
    around midnight so that the run, which starts at t = 0, sees about half the devices online;
    with the default 10 h start few are online in the first hours and async runs starve)."""
    proc = run_script(["-m", "fedsim", "trace", "generate", "--out", str(path), "--clients", str(clients),
                       "--days", "2", "--session-start-hours", "0"], timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)


def policy_cases(a, tmp: Path) -> list[dict]:
    policies = [p for p in a.policies.split(",") if p != "window"]
    if not policies:
        return []
    trace = tmp / "devices.csv"
    generate_trace(trace, a.trace_clients)
    worlds = [
        (f"{a.clients} clients, Markov 300/100", "{name: quadratic, clients: %d, dim: 2}" % a.clients, "", MARKOV_18, 8.0),
        (f"{a.trace_clients}-device trace (fedsim trace generate)",
         "{name: synthetic, alpha: 1.0, beta: 1.0, clients: %d}" % a.trace_clients, "model: {name: logreg}\n",
         f"trace: {trace}", 60.0),
    ]
    rows = []
    for world, data, model, system, deadline in worlds:
        for policy in policies:
            rnd, algorithm = policy_round(policy, a, deadline)
            path = tmp / "p.yaml"
            path.write_text(POLICY_SCENARIO.format(rounds=a.rounds, data=data, model=model, system=system, round=rnd,
                                                   algorithm=algorithm))
            wall, n, gib = timed_cli(path, tmp / "out")
            size = f"C {a.concurrency}, K {a.buffer}" if policy == "async" else f"{a.cohort} per round"
            rows.append(dict(case=world, policy=policy, size=size, rounds=a.rounds, rows=n, wall_s=round(wall, 2),
                             peak_gib=round(gib, 3), target="< 60 s, < 2 GB",
                             ok="yes" if wall < 60 and gib < 2 else "NO"))
            print(rows[-1], flush=True)
            shutil.rmtree(tmp / "out")
    return rows


def timed_cli(yaml_path: Path, out: Path) -> tuple[float, int, float]:
    t = time.perf_counter()
    proc = run_script(["-c", PROBE, "run", str(yaml_path), "--schedule-only", "--out", str(out), "--force"],
                      timeout=3600)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    rss_kib = int(proc.stdout.split("MAXRSS")[-1].split()[0])
    rows = sum(1 for _ in open(out / "clients.csv", "rb")) - 1
    return wall, rows, rss_kib / 2**20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--trace-clients", type=int, default=100_000)
    ap.add_argument("--policies", default="window", help="comma list of window, wait, deadline, overcommit, async")
    ap.add_argument("--cohort", type=int, default=1000, help="clients per round of wait / deadline / overcommit")
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--buffer", type=int, default=100)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fedsim-population-"))
    trace = tmp / "trace.csv"
    cases = []
    if "window" in a.policies.split(","):
        write_trace(trace, a.trace_clients)
        cases = [
            (f"{a.clients} clients, Markov outages", a.clients, MARKOV),
            (f"{a.trace_clients}-device trace", a.trace_clients, f"trace: {trace}"),
        ]
    rows = []
    try:
        policy_rows = policy_cases(a, tmp)
        for case, clients, system in cases:
            path = tmp / "s.yaml"
            path.write_text(SCENARIO.format(rounds=a.rounds, clients=clients, per_round=a.per_round, system=system))
            wall, n, gib = timed_cli(path, tmp / "out")
            rows.append(dict(case=case, rounds=a.rounds, per_round=a.per_round, rows=n, wall_s=round(wall, 2),
                             peak_gib=round(gib, 3), target="< 60 s, < 2 GB",
                             ok="yes" if wall < 60 and gib < 2 else "NO"))
            shutil.rmtree(tmp / "out")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for row in rows:
        row.update(machine(1))
        print(", ".join(f"{k} {v}" for k, v in row.items() if k not in ("date", "cpu", "torch", "device")), flush=True)
    for row in policy_rows:
        row.update(machine(1))
    if not a.no_save:
        append("population", rows, "Population scale (--schedule-only)")
        append("population_policies", policy_rows, "Every round policy at population scale (--schedule-only, issue 18)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
