"""What a selection rule costs a trained run (issue 25 item 4): ``oort`` against ``uniform``.

10^5 clients, 100 per round, window rounds, logistic regression, the same scenario with
``round.selection: {name: uniform}`` and ``{name: oort}``, each in a fresh interpreter, run one
after the other (alone on the machine), on two workloads:

* ``synthetic``: Synthetic(1, 1), whose client sizes are log-normal (n_k = int(lognormal(4, 2)) +
  50: a few clients hold 10^4-10^5 examples). Oort explores the unexplored clients with the
  largest p_i and its utility grows with |B_i|, so it picks the big clients, and building a
  picked client's data costs in proportion to its size: the ratio includes that.
* ``equal``: every client holds 90 examples (a ``FederatedData`` built in the driver, each
  client's rows drawn on demand from its own generator), so whichever clients a rule picks cost
  the same to build and train: the ratio is the rule's own cost (target: oort within 1.5x).

    python benchmarks/bench_selection.py [--clients 100000] [--rounds 50] [--per-round 100]
                                         [--workloads synthetic,equal] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401
from _common import append, machine, run_script

SCENARIO = """\
name: selection_bench
seed: 0
rounds: {rounds}
{data}model: {{name: logreg}}
system:
  speed: {{dist: lognormal, median: 5.0, sigma: 0.6}}
  availability: {{model: markov, mean_online: 600, mean_offline: 60}}
  latency: 0.5
round: {{policy: window, window: 10.0, max_local_steps: 20, clients_per_round: {per_round}, selection: {{name: {rule}}}}}
algorithm: {{name: fednova, lr: 0.05, batch_size: 10}}
eval: {{every: {rounds}, clients: 100}}
engine: {{threads: 1}}
"""


#: The ``equal`` workload's driver: a FederatedData of equal clients, run through fedsim.run.
DRIVER = """\
import sys
import numpy as np
import fedsim

path, out, m = sys.argv[1], sys.argv[2], int(sys.argv[3])
N, D, C = 90, 60, 10
W = np.random.default_rng(0).normal(size=(D, C))


def draw(rng, n):
    x = rng.normal(size=(n, D)).astype(np.float32)
    return x, np.argmax(x @ W, 1).astype(np.int64)


def client(k):
    return draw(np.random.default_rng([1, k]), N)


data = fedsim.FederatedData(sizes=np.full(m, N, dtype=np.int64), client_data=client,
                            test=draw(np.random.default_rng(2), 1000), num_classes=C, name="equal")
fedsim.run(path, data=data, out=out)
"""

DATA = {"synthetic": "data: {{name: synthetic, alpha: 1.0, beta: 1.0, clients: {clients}}}\n", "equal": ""}


def one(workload: str, rule: str, a, tmp: Path) -> float:
    """Wall seconds of one run in a fresh interpreter."""
    path = tmp / f"{workload}-{rule}.yaml"
    text = SCENARIO.format(data=DATA[workload].format(clients=a.clients), rounds=a.rounds, per_round=a.per_round,
                           rule=rule)
    path.write_text(text)
    out = tmp / f"{workload}-{rule}"
    if workload == "equal":
        driver = tmp / "driver.py"
        driver.write_text(DRIVER)
        args = [str(driver), str(path), str(out), str(a.clients)]
    else:
        args = ["-m", "fedsim", "run", str(path), "--out", str(out), "--quiet"]
    t = time.perf_counter()
    proc = run_script(args, timeout=3600)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--workloads", default="synthetic,equal")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload in a.workloads.split(","):
            walls = {rule: one(workload, rule, a, Path(tmp)) for rule in ("uniform", "oort")}
            ratio = walls["oort"] / walls["uniform"]
            rows.append(dict(workload=workload, clients=a.clients, rounds=a.rounds, per_round=a.per_round,
                             uniform_s=round(walls["uniform"], 2), oort_s=round(walls["oort"], 2),
                             ratio=round(ratio, 3), target="oort <= 1.5x uniform",
                             ok="yes" if ratio <= 1.5 else "NO", **machine(threads=1)))
            print(json.dumps(rows[-1]), flush=True)
    if not a.no_save:
        append("selection", rows, title="A selection rule's cost in a trained run (oort vs uniform, issue 25)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
