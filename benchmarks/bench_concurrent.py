"""Two identical runs at once against the same two back to back (issue 13: at once within 15%).

    python benchmarks/bench_concurrent.py [--cases logreg,mlp,cnn] [--settings policy,no_turns,old]
                                          [--reps 1] [--scale 1.0] [--quick]

Cases (``fedsim run`` in fresh interpreters, each sized to take several seconds alone on 2 cores):

* ``logreg`` -- the issue's: Synthetic(1, 1), 100 clients, 50 per round, FedNova, 5 s windows,
  log-normal speeds, 150 rounds (batched chunks of 128)
* ``mlp``    -- 200-200 MLP on digits, 16 clients, 20 local steps, 40 rounds (batched chunks)
* ``cnn``    -- FedAvg's 2-conv CNN on a CIFAR-10 stand-in (2,000 images), 8 clients, 5 local
  steps, 6 rounds (one client at a time)

Settings:

* ``policy``     -- fedsim's own: the rule's thread count, runs taking turns on the cores
  (``hold_cores``), OpenMP threads spinning 10,000 iterations before they sleep (``GOMP_SPINCOUNT``)
* ``no_turns``   -- the same without turns (``FEDSIM_HOLD_CORES=0``): what the turns do
* ``old``        -- no turns and libgomp's default (spinning) waiting (``OMP_WAIT_POLICY`` set
  empty): the behaviour before issue 13 (same thread counts)
* ``one_thread`` -- ``engine.threads: 1`` (with turns: each run takes one core)
* ``turns_spin`` -- turns, with libgomp's default (spinning 300,000 iterations) waiting
* ``turns_passive`` -- turns, with fully passive waiting (``OMP_WAIT_POLICY=PASSIVE``)

For each (case, setting): wall time of run A then run B (``back_to_back``), of A and B started
together (``at_once``, until both end), their ratio (target <= 1.15), and whether all four runs
wrote the same bytes (rounds.csv, clients.csv, model.pt). Rows with the machine description go to
``benchmarks/results/concurrent.{csv,md}``. Run it on an otherwise idle machine.
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

TARGET = 1.15

CASES = {  # name -> (scenario text with {rounds}, default rounds, quick rounds)
    "logreg": ("name: c_logreg\nseed: 0\nrounds: {rounds}\n"
               "data: {{name: synthetic, alpha: 1.0, beta: 1.0, clients: 100}}\nmodel: {{name: logreg}}\n"
               "system: {{speed: {{dist: lognormal, median: 5.0, sigma: 0.6}}, latency: 0.5}}\n"
               "round: {{policy: window, window: 5.0, clients_per_round: 50, max_local_steps: 60}}\n"
               "algorithm: {{name: fednova, lr: 0.05, batch_size: 10}}\neval: {{every: 10}}\n", 150, 3),
    "mlp": ("name: c_mlp\nseed: 0\nrounds: {rounds}\ndata: {{name: digits, clients: 16}}\nmodel: {{name: mlp}}\n"
            "system: {{speed: 1.0, latency: 0.0}}\nround: {{policy: wait, local_steps: 20}}\n"
            "algorithm: {{name: fedavg, lr: 0.05, batch_size: 10}}\neval: {{every: 10}}\n", 40, 2),
    "cnn": ("name: c_cnn\nseed: 0\nrounds: {rounds}\n"
            "data: {{name: cifar10, standin: true, n_train: 2000, n_test: 200, clients: 8}}\nmodel: {{name: cnn}}\n"
            "system: {{speed: 1.0, latency: 0.0}}\nround: {{policy: wait, local_steps: 5}}\n"
            "algorithm: {{name: fedavg, lr: 0.05, batch_size: 16}}\neval: {{every: 10}}\n", 6, 1),
}  # fmt: skip


def settings() -> dict[str, tuple[list[str], dict]]:
    """name -> (extra ``--set`` overrides, environment changes)."""
    return {
        "policy": ([], {}),
        "no_turns": ([], {"FEDSIM_HOLD_CORES": "0"}),
        "old": ([], {"FEDSIM_HOLD_CORES": "0", "OMP_WAIT_POLICY": ""}),
        "one_thread": (["engine.threads=1"], {}),
        "turns_spin": ([], {"OMP_WAIT_POLICY": ""}),
        "turns_passive": ([], {"OMP_WAIT_POLICY": "PASSIVE"}),
    }


def digest(out: Path) -> str:
    import torch

    h = hashlib.sha256((out / "rounds.csv").read_bytes() + (out / "clients.csv").read_bytes())
    obj = torch.load(out / "model.pt", weights_only=True)
    for k, v in sorted(obj.items()) if isinstance(obj, dict) else [("x", obj)]:
        h.update(k.encode() + v.numpy().tobytes())
    return h.hexdigest()


def start(path: Path, out: Path, sets: list[str], env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "fedsim", "run", str(path), "--out", str(out), "--quiet", "--force"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"fedsim run failed: {err.strip()[-400:]}")


def measure(case: str, rounds: int, sets: list[str], env_extra: dict, tmp: Path) -> dict:
    path = tmp / f"{case}.yaml"
    path.write_text(CASES[case][0].format(rounds=rounds))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    outs = [tmp / f"{case}-{k}" for k in ("seq_a", "seq_b", "par_a", "par_b")]
    t = time.perf_counter()
    for out in outs[:2]:
        finish([start(path, out, sets, env)])
    seq = time.perf_counter() - t
    t = time.perf_counter()
    finish([start(path, out, sets, env) for out in outs[2:]])
    par = time.perf_counter() - t
    same = len({digest(o) for o in outs}) == 1
    return {"back_to_back_s": round(seq, 2), "at_once_s": round(par, 2), "ratio": round(par / seq, 3),
            "same_bytes": same}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="logreg,mlp,cnn")
    ap.add_argument("--settings", default="policy,no_turns,old")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every case's rounds")
    ap.add_argument("--quick", action="store_true", help="a few rounds per case; nothing recorded")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    table = settings()
    desc = machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in a.cases.split(","):
            _, full, quick = CASES[case]
            rounds = quick if a.quick else max(1, round(full * a.scale))
            for name in a.settings.split(","):
                sets, env = table[name]
                for _ in range(a.reps):
                    r = measure(case, rounds, sets, env, Path(tmp))
                    verdict = "met" if r["ratio"] <= TARGET else "NOT met"
                    print(f"{case:<7} {name:<18} back to back {r['back_to_back_s']:7.2f} s  at once {r['at_once_s']:7.2f} s"
                          f"  ratio {r['ratio']:.2f} (target <= {TARGET}: {verdict})  same bytes: {r['same_bytes']}",
                          flush=True)  # fmt: skip
                    rows.append({**desc, "case": case, "rounds": rounds, "setting": name, **r})
    if not (a.no_save or a.quick):
        append("concurrent", rows, "Two runs at once vs back to back (bench_concurrent.py)")
    return 0 if all(r["same_bytes"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
