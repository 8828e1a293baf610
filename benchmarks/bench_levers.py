"""The straggler levers at population scale (issues 25 and 26, item 4): clock-only runs.

Each case runs ``fedsim run X.yaml --schedule-only`` in a fresh interpreter (wall time and peak
resident memory, as ``bench_population.py``) on 10^6 clients with Markov outages (online 300 s,
offline 100 s), 1,000 rounds (async: 1,000 server updates):

* selection rules that need no losses: ``fastest``, ``tiers`` (``adaptive: false``), window;
* partial work: ``on_outage: resume`` under window and wait, ``on_deadline: partial``;
* async on a time budget (``local_time``), concurrency 1,000, buffer 100;
* the server's link (``system.server.up/down`` with ``system.network``) under every policy, and
  async with concurrency 1,000; these need a model for the bytes: Synthetic(1, 1) logistic
  regression (the data of 10^6 clients are built, not trained).

Target: each < 60 s and < 2 GB peak. ``--quick`` runs 10^5 clients x 100 rounds (a smoke run).

    python benchmarks/bench_levers.py [--clients 1000000] [--rounds 1000] [--per-round 100]
                                      [--cases all|NAME,...] [--quick] [--no-save]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine
from bench_population import timed_cli

SCENARIO = """\
name: levers_bench
seed: 0
rounds: {rounds}
data: {data}
{model}system:
  speed: {{dist: lognormal, median: 5.0, sigma: 0.6}}
  availability: {{model: markov, mean_online: 300, mean_offline: 100}}
  latency: 0.5
{system}round: {round}
algorithm: {{name: {algorithm}, lr: 0.05, batch_size: 10}}
"""
QUADRATIC = "{name: quadratic, clients: %d, dim: 2}"
SYNTHETIC = "{name: synthetic, alpha: 1.0, beta: 1.0, clients: %d}"
#: bandwidths of about 1-10 Mbit/s and a server link of 100 / 50 Mbit/s (100 clients a round share it)
LINK = ("  network: {down: {dist: lognormal, median: 4.0e6, sigma: 0.8}, up: {dist: lognormal, median: 1.5e6, sigma: 0.8}}\n"
        "  server: {down: 1.0e8, up: 5.0e7}\n")
RESUME = "  on_outage: resume\n"


def cases(a) -> dict[str, tuple[str, str, str, str, str]]:
    """name -> (data, model, system extra, round section, algorithm)."""
    k, c = a.per_round, a.concurrency
    quad, syn, logreg = QUADRATIC % a.clients, SYNTHETIC % a.clients, "model: {name: logreg}\n"
    win = "policy: window, window: 10.0, max_local_steps: 60, clients_per_round: %d" % k
    steps = "local_steps: 20, clients_per_round: %d" % k
    return {
        "fastest (window)": (quad, "", "", "{%s, selection: {name: fastest}}" % win, "fednova"),
        "tiers, adaptive false (window)": (quad, "", "", "{%s, selection: {name: tiers, adaptive: false}}" % win,
                                           "fednova"),
        "resume (window)": (quad, "", RESUME, "{%s}" % win, "fednova"),
        "resume (wait)": (quad, "", RESUME, "{policy: wait, %s}" % steps, "fednova"),
        "partial (deadline 8 s)": (quad, "", "", "{policy: deadline, deadline: 8.0, on_deadline: partial, %s}" % steps,
                                   "fednova"),
        "async time budget (C %d, K 100)" % c: (
            quad, "", "", "{policy: async, local_time: 4.0, concurrency: %d, buffer: 100}" % c, "fedbuff"),
        "server link (window)": (syn, logreg, LINK, "{%s}" % win, "fednova"),
        "server link (wait)": (syn, logreg, LINK, "{policy: wait, %s}" % steps, "fednova"),
        "server link (deadline 8 s)": (syn, logreg, LINK, "{policy: deadline, deadline: 8.0, %s}" % steps, "fednova"),
        "server link (overcommit 1.3)": (syn, logreg, LINK, "{policy: overcommit, overcommit: 1.3, %s}" % steps,
                                         "fednova"),
        "server link (async C %d, K 100)" % c: (
            syn, logreg, LINK, "{policy: async, local_steps: 20, concurrency: %d, buffer: 100}" % c, "fedbuff"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--cases", default="all")
    ap.add_argument("--quick", action="store_true", help="10^5 clients x 100 rounds")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.clients, a.rounds = 100_000, 100
    chosen = cases(a)
    if a.cases != "all":
        chosen = {k: v for k, v in chosen.items() if any(k.startswith(n) for n in a.cases.split(","))}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, (data, model, system, rnd, algorithm) in chosen.items():
            path = tmp / "s.yaml"
            path.write_text(SCENARIO.format(rounds=a.rounds, data=data, model=model, system=system, round=rnd,
                                            algorithm=algorithm))
            wall, n, gib = timed_cli(path, tmp / "out")
            rows.append(dict(case=name, clients=a.clients, rounds=a.rounds, rows=n, wall_s=round(wall, 2),
                             peak_gib=round(gib, 3), target="< 60 s, < 2 GB",
                             ok="yes" if wall < 60 and gib < 2 else "NO", **machine()))
            print(rows[-1], flush=True)
            shutil.rmtree(tmp / "out")
    if not a.no_save and not a.quick:
        append("levers", rows, title="The straggler levers at population scale (--schedule-only, issues 25/26)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
