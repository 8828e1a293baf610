"""Share of wall time spent outside training on the Synthetic(1,1) FedNova scenario.

The scenario is ``scenarios/quickstart.yaml``'s ``fednova_window`` variant (FedProx's Synthetic(1,1),
30 clients, logistic regression, log-normal speeds, 5 s windows, FedNova, evaluation every 2
rounds) run for ``--rounds`` rounds through ``fedsim.runner.run`` (the run folder included). The
wall time of the run (after imports) is split by wrapping, in this process only:

* train -- ``train_cohort`` (local steps of the round's clients, minibatch indices, ||a_i||_1),
* eval -- ``SyncEngine.evaluate`` (training objective and test metrics, every ``eval.every``),
* clock -- drawing the next round plan, server -- ``Algorithm.server_update`` (aggregation, server optimizer),
* io -- run-folder writes (``TableWriter.write``: format, write, flush, fsync per round; the
  fsync part alone is ``fsync_s``),
* other -- everything else (building data and model, bookkeeping rows, progress, checkpoints).

``outside_training`` = (wall - train - eval) / wall: the clock, aggregation, bookkeeping and I/O
of the issue's target (< 5%); ``outside_excl_fsync`` the same without the per-round fsyncs of the
run-folder tables (whose cost depends on the file system); ``outside_incl_eval`` counts
evaluation as overhead too. Imports happen before the timer starts.

    python benchmarks/bench_overhead.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import ROOT, append, machine

import torch


def measure(rounds: int) -> dict:
    import fedsim.engine.run as R
    from fedsim.algorithms.algorithm import Algorithm
    import fedsim.runner.clock as RC
    import fedsim.report.tables as TB
    from fedsim.runner import run as run_scenario
    from fedsim.scenario import expand_variants, load_scenario, read_yaml

    import fedsim.data  # noqa: F401  (imports are start-up, not per-run overhead: done before timing)
    import fedsim.engine.evaluate  # noqa: F401
    import fedsim.models  # noqa: F401

    path = ROOT / "scenarios" / "quickstart.yaml"
    sc = load_scenario(path, [f"rounds={rounds}"])
    sc = dict(expand_variants(sc, read_yaml(path) | {"rounds": rounds}, path.parent))["fednova_window"]
    acc = {"train": 0.0, "eval": 0.0, "clock": 0.0, "server": 0.0, "io": 0.0}
    fsync = {"s": 0.0}
    real_fsync = os.fsync

    def timed_fsync(fd):
        t = time.perf_counter()
        real_fsync(fd)
        fsync["s"] += time.perf_counter() - t

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[name] += time.perf_counter() - t

        return wrapper

    class TimedClock(RC.Clock):
        def plans(self, *a, **k):
            it = super().plans(*a, **k)
            while True:
                t = time.perf_counter()
                plan = next(it)
                acc["clock"] += time.perf_counter() - t
                yield plan

    patches = [(R, "train_cohort", timed("train", R.train_cohort)),
               (R, "train_cohort_sharded", timed("train", R.train_cohort_sharded)),
               (R.SyncEngine, "evaluate", timed("eval", R.SyncEngine.evaluate)),
               (Algorithm, "server_update", timed("server", Algorithm.server_update)),
               (TB.TableWriter, "write", timed("io", TB.TableWriter.write)),
               (RC, "Clock", TimedClock)]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, new in patches:
        setattr(obj, name, new)
    os.fsync = timed_fsync
    out = Path(tempfile.mkdtemp(prefix="fedsim-overhead-"))
    try:
        t = time.perf_counter()
        run_scenario(sc, out / "run", progress=False)
        wall = time.perf_counter() - t
    finally:
        for obj, name, old in saved:
            setattr(obj, name, old)
        os.fsync = real_fsync
        shutil.rmtree(out, ignore_errors=True)
    other = wall - sum(acc.values())
    row = dict(
        scenario="quickstart fednova_window (Synthetic(1,1), 30 clients, logreg)", rounds=rounds,
        wall_s=round(wall, 3), train_s=round(acc["train"], 3), eval_s=round(acc["eval"], 3),
        clock_s=round(acc["clock"], 3), server_s=round(acc["server"], 3), io_s=round(acc["io"], 3),
        other_s=round(other, 3),
        fsync_s=round(fsync["s"], 3),
        outside_training=f"{(wall - acc['train'] - acc['eval']) / wall:.2%}",
        outside_excl_fsync=f"{(wall - acc['train'] - acc['eval'] - fsync['s']) / (wall - fsync['s']):.2%}",
        outside_incl_eval=f"{(wall - acc['train']) / wall:.2%}",
        target="< 5%",
        ok="yes" if (wall - acc["train"] - acc["eval"]) / wall < 0.05 else "NO",
    )
    row.update(machine(torch.get_num_threads()))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    row = measure(a.rounds)
    print(", ".join(f"{k} {v}" for k, v in row.items() if k not in ("date", "cpu", "torch", "device")), flush=True)
    if not a.no_save:
        append("overhead", [row], "Share of wall time outside training (Synthetic(1,1) FedNova)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
