"""The notebooks' comparison grids stacked (one program per stack, the default) against one
program per run with ``--no-stack --jobs 2`` (issue 35), wall time and peak memory, ratios from
one invocation.

    python benchmarks/bench_compare_grids.py GRID [--seeds 0,1,2] [--modes stacked,jobs2] [--no-save]

GRID is one of
- ``straggler``: analysis/straggler_levers.ipynb's full study: a 10,000-device generated trace,
  Synthetic IID over 10,000 clients, logistic regression, K = 50, five policies x four selectors,
  FedAvg / FedNova / FedBuff, horizon 1,800 s (108 runs with three seeds);
- ``wire``: analysis/wire_and_server.ipynb part (a): digits, MLP 64-500-500-10, five upload
  compressors x FedAvg / FedNova, every run up to 600 simulated s (30 runs);
- ``devices``: scenarios/devices_mlp.yaml and devices_mlp_slownet.yaml, three variants each,
  ``eval.every_seconds=60`` (analysis/devices_study/run_seeds.sh; 18 runs);
- ``hparams``: a 500-cell grid, digits with an MLP (hidden 100), 5 algorithms x 10 learning
  rates x 10 seeds, 20 clients, 5 rounds of 10 clients doing 2 local epochs.

Modes: ``stacked`` (one process), ``stacked_jobs2`` (stacks on two processes, the largest halved
until both are busy), ``jobs2`` (``--no-stack --jobs 2``), ``jobs1`` (``--no-stack``). Each mode
runs ``fedsim compare`` in a fresh interpreter under ``/usr/bin/time`` (wall time and the
largest resident set of the process tree: for ``--jobs 2`` that is the largest single run). The
folders are then compared run by run: clients.csv byte for byte (the clock), rounds.csv / evals.csv
byte for byte or else their largest difference (docs/comparisons.md "Stacks"). Recorded to
``benchmarks/results/compare_grids.{csv,md}`` with the machine description. Run it alone: both
modes share the machine's cores.

``--filed REV`` runs two modes instead: the grid with the code at git revision ``REV`` (unpacked
from ``git archive`` into the temporary folder) and ``--jobs 2``, as the grid ran when an issue
was filed there (issue 35: the code before stacks, ``f9acf61``, where ``--jobs 2`` ran one program
per run), against this code stacked with ``--jobs 2``; recorded to
``results/compare_filed.{csv,md}``, the files compared the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from _common import ROOT, append, machine

MBIT = 1e6


def straggler(tmp: Path, seeds: list[int]) -> tuple[dict, list[str]]:
    """analysis/straggler_levers.ipynb, full size (its cell 4)."""
    devices, k, window, deadline, local_time, buffer, horizon = 10_000, 50, 30.0, 30.0, 30.0, 10, 1800.0
    trace = tmp / f"population_{devices}.csv"
    subprocess.run([sys.executable, "-m", "fedsim", "trace", "generate", "--clients", str(devices), "--seed", "0",
                    "--days", "1", "--session-start-hours", "0.5", "--out", str(trace)],
                   check=True, capture_output=True, cwd=ROOT, env=_env())
    sync = {"round.local_epochs": 1}
    policies = {
        "wait": {"round.policy": "wait", **sync},
        "deadline+partial": {"round.policy": "deadline", "round.deadline": deadline, "round.on_deadline": "partial",
                             "system.on_outage": "resume", **sync},
        "window": {"round.policy": "window", "round.window": window, **sync},
        "overcommit": {"round.policy": "overcommit", "round.overcommit": 1.3, **sync},
        "async": {"round.policy": "async", "round.concurrency": k, "round.buffer": buffer, "round.local_time": local_time},
    }
    rounds_for = {"wait": {"uniform": 12, "oort": 30, "tiers": 30, "fastest": 30},
                  "deadline+partial": {"uniform": 66, "oort": 75, "tiers": 75, "fastest": 75},
                  "overcommit": {"uniform": 90, "oort": 90, "tiers": 90, "fastest": 90}}

    def rounds(policy, sel):
        if policy == "window":
            return int(round(horizon / window))
        if policy == "async":
            return int(math.ceil(1.15 * horizon * k / (local_time * buffer)))
        return rounds_for[policy][sel]

    variants = {}
    for policy, keys in policies.items():
        for sel in (["uniform", "oort", "tiers", "fastest"] if policy != "async" else ["uniform", "fastest"]):
            for nova in ([False, True] if policy == "async" else [False]):
                name = f"{'async_nova' if nova else policy}.{sel}".replace("+", "_")
                variants[name] = {**keys, "round.selection": {"name": sel}, "rounds": rounds(policy, sel),
                                  **({"algorithm.normalize_async": True} if nova else {})}
    scenario = {
        "name": "straggler_levers",
        "data": {"name": "synthetic", "iid": True, "clients": devices},
        "model": {"name": "logreg"},
        "system": {"trace": str(trace)},
        "round": {"clients_per_round": k, "max_local_steps": 40},
        "algorithm": {"lr": 0.2, "batch_size": 10},
        "eval": {"every": 100_000, "every_seconds": 60.0, "train_loss": False, "clients": 300},
        "engine": {"threads": 1},
        "variants": variants,
    }
    return scenario, ["--algorithms", "fedavg,fednova,fedbuff", "--seeds", _csv(seeds), "--target", "0.65"]


def wire(tmp: Path, seeds: list[int]) -> tuple[dict, list[str]]:
    """analysis/wire_and_server.ipynb part (a): rounds per compressor from the clock, as there."""
    import fedsim
    import numpy as np

    horizon = 600.0
    network = {"down": {"dist": "lognormal", "median": 20 * MBIT, "sigma": 1.0},
               "up": {"dist": "lognormal", "median": 10 * MBIT, "sigma": 1.0}}
    base = {
        "name": "wire", "seed": 0,
        "data": {"name": "digits", "clients": 50, "partition": {"name": "dirichlet", "alpha": 0.5}},
        "model": {"name": "mlp", "hidden": 500},
        "system": {"speed": {"dist": "lognormal", "median": 4.0, "sigma": 0.5}, "network": network, "latency": 0.05},
        "round": {"policy": "wait", "clients_per_round": 10, "local_epochs": 2},
        "algorithm": {"lr": 0.05, "batch_size": 10},
        "eval": {"every": 100000, "every_seconds": 10.0, "train_loss": False},
        "engine": {"threads": 1},
    }
    compressors = {"none": {"name": "none"}, "topk1": {"name": "topk", "ratio": 0.01},
                   "topk1_ef": {"name": "topk", "ratio": 0.01, "error_feedback": True},
                   "qsgd4bit": {"name": "qsgd", "levels": 7}, "fp16": {"name": "fp16"}}
    need = {}
    for name, comp in compressors.items():
        for seed in seeds:
            sc = {**base, "seed": seed, "rounds": int(horizon),
                  "algorithm": {**base["algorithm"], "compression": comp}}
            t = fedsim.schedule(sc).rounds["sim_time"].to_numpy()
            need[name] = max(need.get(name, 0), int(np.searchsorted(t, horizon)) + 1)
    scenario = {**base, "rounds": 1, "variants": {name: {"algorithm.compression": comp, "rounds": need[name]}
                                                  for name, comp in compressors.items()}}
    return scenario, ["--algorithms", "fedavg,fednova", "--seeds", _csv(seeds), "--target", "0.92"]


def devices(tmp: Path, seeds: list[int]) -> list[tuple[dict, list[str]]]:
    """scenarios/devices_mlp*.yaml as analysis/devices_study/run_seeds.sh runs them."""
    out = []
    for name in ("devices_mlp", "devices_mlp_slownet"):
        path = ROOT / "scenarios" / f"{name}.yaml"
        sc = yaml.safe_load(path.read_text())
        trace = (path.parent / sc["system"]["trace"]).resolve()
        sc["system"] = {**sc["system"], "trace": str(trace)}
        out.append((sc, ["--seeds", _csv(seeds), "--set", "eval.every_seconds=60"]))
    return out


def hparams(tmp: Path, seeds: list[int]) -> tuple[dict, list[str]]:
    """lr x seed x algorithm on digits with an MLP: 5 x 10 x 10 = 500 cells."""
    scenario = {
        "name": "hparams", "seed": 0, "rounds": 5,
        "data": {"name": "digits", "clients": 20, "seed": 0, "partition": {"name": "dirichlet", "alpha": 0.5}},
        "model": {"name": "mlp", "hidden": 100},
        "system": {"speed": {"dist": "lognormal", "median": 4.0, "sigma": 0.5}, "latency": 0.05},
        "round": {"policy": "wait", "clients_per_round": 10, "local_epochs": 2},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
        "eval": {"every": 5},
    }
    lrs = ",".join(f"{v:g}" for v in (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3))
    return scenario, ["--algorithms", "fedavg,fednova,fedprox,scaffold,fedadam", "--grid", f"algorithm.lr={lrs}",
                      "--seeds", _csv(seeds)]


GRIDS = {"straggler": (straggler, [0, 1, 2]), "wire": (wire, [0, 1, 2]), "devices": (devices, [0, 1, 2]),
         "hparams": (hparams, list(range(10)))}
MODES = {"stacked": [], "stacked_jobs2": ["--jobs", "2"], "jobs2": ["--no-stack", "--jobs", "2"], "jobs1": ["--no-stack"]}


def _csv(xs) -> str:
    return ",".join(str(x) for x in xs)


def _env(root: Path = ROOT) -> dict:
    return {**os.environ, "PYTHONPATH": str(root)}


def commit_of(rev: str) -> str:
    """The full commit id ``rev`` names in this repository; exits with a one-line error when it
    names none (a revision is never read as one of git's options)."""
    got = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                         cwd=ROOT, capture_output=True, text=True)
    if got.returncode != 0 or rev.startswith("-"):
        raise SystemExit(f"--filed: {rev!r} names no commit of this repository")
    return got.stdout.strip()


def code_at(commit: str, dest: Path) -> Path:
    """fedsim's tree at ``commit`` (a full id, :func:`commit_of`), unpacked into ``dest`` (``git
    archive``: the repository itself is left as it is)."""
    dest.mkdir(parents=True)
    tar = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest


def compare(spec: Path, args: list[str], out: Path, extra: list[str], root: Path = ROOT) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one ``fedsim compare`` (its largest process), of the
    fedsim in ``root`` (default: this checkout)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stats = out.parent / f"{out.name}.time"
    cmd = ["/usr/bin/time", "-f", "%e %M", "-o", str(stats), sys.executable, "-m", "fedsim", "compare", str(spec),
           *args, "--out", str(out), "--quiet", *extra]
    proc = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fedsim compare {' '.join(extra)} failed: {proc.stderr.strip()[-600:]}")
    wall, rss_kib = stats.read_text().split()[-2:]
    return float(wall), int(rss_kib) / 1024


def digests(root: Path, name: str) -> dict[str, str]:
    return {str(p.parent.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob(name))}


def max_diff(a: Path, b: Path, name: str) -> float:
    """Largest absolute difference of the numeric columns of ``name`` over the runs of a and b."""
    import numpy as np
    import pandas as pd

    worst = 0.0
    for p in sorted(a.rglob(name)):
        x, y = pd.read_csv(p), pd.read_csv(b / p.relative_to(a))
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return math.inf
        num = x.select_dtypes("number").columns
        d = np.abs(x[num].to_numpy(float) - y[num].to_numpy(float))
        both_nan = np.isnan(x[num].to_numpy(float)) & np.isnan(y[num].to_numpy(float))
        d[both_nan] = 0.0
        worst = max(worst, float(np.nanmax(d, initial=0.0)) if not np.isnan(d).any() else math.inf)
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid", choices=sorted(GRIDS))
    ap.add_argument("--seeds", help="comma-separated seeds (default: the notebook's)")
    ap.add_argument("--modes", default="stacked,stacked_jobs2,jobs2",
                    help="of stacked, stacked_jobs2, jobs2, jobs1 (default: the first three; the last is the reference)")
    ap.add_argument("--filed", metavar="REV",
                    help="instead: the code at git revision REV with --jobs 2 (its one program per run) against "
                         "this code stacked with --jobs 2, recorded to results/compare_filed")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.filed:
        modes = ["filed_jobs2", "stacked_jobs2"]
        if a.modes != ap.get_default("modes"):
            ap.error("--filed runs its own two modes; leave --modes out")
        commit = commit_of(a.filed)
    else:
        modes = a.modes.split(",")
    build, default_seeds = GRIDS[a.grid]
    seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else default_seeds
    with tempfile.TemporaryDirectory(prefix="fedsim-bench-") as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        parts = build(tmp, seeds)
        parts = parts if isinstance(parts, list) else [parts]
        setup = time.perf_counter() - t
        specs = []
        for i, (scenario, args) in enumerate(parts):
            spec = tmp / f"grid{i}.yaml"
            spec.write_text(yaml.safe_dump(scenario, sort_keys=False))
            specs.append((spec, args))
        wall, rss = {}, {}
        filed = code_at(commit, tmp / "filed_code") if a.filed else None
        for mode in modes:
            wall[mode], rss[mode] = 0.0, 0.0
            for i, (spec, args) in enumerate(specs):
                extra, root = (["--jobs", "2"], filed) if mode == "filed_jobs2" else (MODES[mode], ROOT)
                w, r = compare(spec, args, tmp / mode / f"part{i}", extra, root=root)
                wall[mode] += w
                rss[mode] = max(rss[mode], r)
                print(f"  {mode} part {i}: {w:.1f} s, peak {r:.0f} MiB", flush=True)
        ref = modes[-1]
        runs = len(digests(tmp / ref, "rounds.csv"))
        same = {m: {f: digests(tmp / m, f) == digests(tmp / ref, f) for f in ("clients.csv", "rounds.csv", "evals.csv")}
                for m in modes}
        diff = {m: max(max_diff(tmp / m, tmp / ref, "rounds.csv"), max_diff(tmp / m, tmp / ref, "evals.csv"))
                for m in modes}
    base = "jobs2" if "jobs2" in modes else "filed_jobs2" if a.filed else ref
    print(f"{a.grid}: {runs} runs, seeds {_csv(seeds)} (set-up {setup:.1f} s, not timed)")
    for m in modes:
        print(f"  {m:8s} {wall[m]:8.1f} s  peak {rss[m]:7.0f} MiB  x{wall[base] / wall[m]:.2f} vs {base}; vs {ref}: "
              f"clients.csv same {same[m]['clients.csv']}, rounds.csv same {same[m]['rounds.csv']}, "
              f"evals.csv same {same[m]['evals.csv']}, largest difference {diff[m]:.3g}")
    ok = all(same[m]["clients.csv"] for m in modes)
    if a.filed and not a.no_save:
        row = {**machine(), "grid": a.grid, "runs": runs, "seeds": _csv(seeds), "filed": commit[:7],
               "filed_jobs2_s": round(wall["filed_jobs2"], 1), "stacked_jobs2_s": round(wall["stacked_jobs2"], 1),
               "filed_jobs2_MiB": round(rss["filed_jobs2"]), "stacked_jobs2_MiB": round(rss["stacked_jobs2"]),
               "x": round(wall["filed_jobs2"] / wall["stacked_jobs2"], 2), "clients_same": ok,
               "rounds_same": same["filed_jobs2"]["rounds.csv"], "evals_same": same["filed_jobs2"]["evals.csv"],
               "largest_diff": f"{diff['filed_jobs2']:.3g}"}
        append("compare_filed", [row], "A grid with the code an issue was filed on (--jobs 2) vs stacked --jobs 2 now")
    elif not a.no_save and "stacked" in modes and len(modes) > 1:
        row = {**machine(), "grid": a.grid, "runs": runs, "seeds": _csv(seeds),
               **{f"{m}_s": round(wall[m], 1) for m in modes}, **{f"{m}_MiB": round(rss[m]) for m in modes},
               **{f"x_{m}": round(wall[base] / wall[m], 2) for m in modes if m != base}, "clients_same": ok,
               "rounds_same": same["stacked"]["rounds.csv"], "largest_diff": f"{diff['stacked']:.3g}"}
        append("compare_grids", [row], "The notebooks' grids, stacked vs --no-stack --jobs 2 (bench_compare_grids.py)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
