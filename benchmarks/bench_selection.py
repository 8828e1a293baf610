"""What a selection rule costs a trained run (issue 25 item 4): ``oort`` against ``uniform``.

10^5 clients (Synthetic(1, 1), logistic regression), 100 per round, window rounds, the same
scenario with ``round.selection: {name: uniform}`` and ``{name: oort}``, each in a fresh
interpreter, run one after the other (alone on the machine). Reports both wall times and their
ratio (target: oort within 1.5x of uniform), and the time oort's own select/observe take.

    python benchmarks/bench_selection.py [--clients 100000] [--rounds 50] [--per-round 100] [--no-save]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine, run_script

SCENARIO = """\
name: selection_bench
seed: 0
rounds: {rounds}
data: {{name: synthetic, alpha: 1.0, beta: 1.0, clients: {clients}}}
model: {{name: logreg}}
system:
  speed: {{dist: lognormal, median: 5.0, sigma: 0.6}}
  availability: {{model: markov, mean_online: 600, mean_offline: 60}}
  latency: 0.5
round: {{policy: window, window: 10.0, max_local_steps: 20, clients_per_round: {per_round}, selection: {{name: {rule}}}}}
algorithm: {{name: fednova, lr: 0.05, batch_size: 10}}
eval: {{every: {rounds}, clients: 100}}
engine: {{threads: 1}}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rule in ("uniform", "oort"):
            path = Path(tmp) / f"{rule}.yaml"
            path.write_text(SCENARIO.format(rounds=a.rounds, clients=a.clients, per_round=a.per_round, rule=rule))
            t = time.perf_counter()
            proc = run_script(["-m", "fedsim", "run", str(path), "--out", str(Path(tmp) / rule), "--quiet"],
                              timeout=3600)
            walls[rule] = time.perf_counter() - t
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr)
            print(rule, round(walls[rule], 2), flush=True)
    ratio = walls["oort"] / walls["uniform"]
    row = dict(clients=a.clients, rounds=a.rounds, per_round=a.per_round, uniform_s=round(walls["uniform"], 2),
               oort_s=round(walls["oort"], 2), ratio=round(ratio, 3), target="oort <= 1.5x uniform",
               ok="yes" if ratio <= 1.5 else "NO", **machine(threads=1))
    print(row)
    if not a.no_save:
        append("selection", [row], title="A selection rule's cost in a trained run (oort vs uniform, issue 25)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
