"""The LEAF datasets: memory of the per-user index, and client-steps/s of LEAF's models on CPU.

1. ``memory``: a generated LEAF FEMNIST folder (``--writers`` writers of ``--samples`` examples,
   train/test 9:1, LEAF's file layout and number format) is opened by fedsim's reader (index only)
   and a cohort's worth of writers (``--cohort``) is read, in a fresh interpreter; the same folder is
   then loaded the way LEAF's own ``model_utils.read_data`` does (``json.load`` of every file, kept).
   Peak RSS above the interpreter's RSS after imports, for each.
2. ``speed``: ``leaf_cnn`` on 1x28x28 images (62 classes) and ``char_lstm`` on 80-character
   sequences (80 classes), batch 10 (LEAF's default), a cohort of ``--clients`` clients with
   unequal local steps (S/2 .. S), trained by fedsim's engine (``fedsim.engine.train.train_cohort``,
   FedAvg's SGD) with the chunk ``engine.clients_per_batch: auto`` picks, the whole cohort as one
   chunk (vmap across clients) and one client at a time. The clients' data come from a
   FederatedData (``client_data(k)``), stacked into the engine's Workload.

    python benchmarks/bench_datasets.py [memory|speed|all] [--writers 300 --samples 100 --cohort 10]
                                        [--clients 8 --steps 10 --reps 3] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo on sys.path)
from _common import append, machine, median, run_script

import numpy as np


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    """This process's peak RSS (VmHWM: per address space, so not inherited through exec as
    ``ru_maxrss`` is)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# ---------------------------------------------------------------- a LEAF FEMNIST folder
def _pixel_text(rng: np.random.Generator, n: int) -> list[str]:
    """n images as LEAF writes them: 784 floats, mostly 1.0 (white), ink as k/255 in full repr."""
    out = []
    for _ in range(n):
        ink = rng.random(784) < 0.2
        vals = np.where(ink, rng.integers(0, 255, 784) / 255.0, 1.0)
        out.append("[" + ", ".join(repr(float(v)) for v in vals) + "]")
    return out


def write_femnist(root: Path, writers: int, samples: int, per_file: int = 100, seed: int = 0) -> int:
    """LEAF's layout: train/ and test/ files of up to ``per_file`` writers each. Returns bytes written."""
    rng = np.random.default_rng(seed)
    n_test = max(1, samples // 10)
    total = 0
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
    for f in range(0, writers, per_file):
        users = [f"f{u:04d}_{u % 100:02d}" for u in range(f, min(writers, f + per_file))]
        for split, n in (("train", samples - n_test), ("test", n_test)):
            parts = []
            for u in users:
                x = ", ".join(_pixel_text(rng, n))
                y = ", ".join(str(int(v)) for v in rng.integers(0, 62, n))
                parts.append(f'"{u}": {{"x": [{x}], "y": [{y}]}}')
            text = (f'{{"users": {json.dumps(users)}, "num_samples": {json.dumps([n] * len(users))}, '
                    f'"user_data": {{{", ".join(parts)}}}}}')
            path = root / split / f"all_data_{f // per_file}_niid_0_keep_0_{split}_9.json"
            path.write_text(text)
            total += len(text)
    return total


def _memory_child(mode: str, root: str, cohort: int) -> None:
    """Runs in a fresh interpreter; prints one JSON line."""
    import fedsim.data.femnist as femnist  # noqa: F401  (imports before the baseline)

    base = rss_mib()
    t = time.perf_counter()
    if mode == "index":
        fd = femnist.load_femnist(root, validate_bytes=0)
        opened = time.perf_counter() - t
        held = []
        for k in np.linspace(0, fd.num_clients - 1, cohort).astype(int):
            held.append(fd.client_data(int(k)))
            held.append(fd.client_test(int(k)))
        clients = fd.num_clients
    else:  # LEAF's models/utils/model_utils.read_data: json.load every file, keep user_data
        data = {}
        for split in ("train", "test"):
            for p in sorted(Path(root, split).glob("*.json")):
                with open(p) as fh:
                    data.setdefault(split, {}).update(json.load(fh)["user_data"])
        opened = time.perf_counter() - t
        clients = len(data["train"])
    print(json.dumps(dict(mode=mode, clients=clients, open_s=round(opened, 2),
                          peak_mib=round(peak_mib() - base, 1), held_mib=round(rss_mib() - base, 1))))


def memory(writers: int, samples: int, cohort: int, save: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        size = write_femnist(Path(tmp), writers, samples)
        for mode in ("index", "json_load_all"):
            r = run_script([__file__, "_child", mode, tmp, str(cohort)], timeout=3600)
            if r.returncode != 0:
                raise SystemExit(r.stderr)
            row = dict(writers=writers, samples=samples, json_mib=round(size / 2**20, 1), cohort=cohort,
                       **json.loads(r.stdout.strip().splitlines()[-1]))
            row.update(machine())
            rows.append(row)
            print(f"{mode:14s} {writers} writers x {samples} ({row['json_mib']} MiB of JSON): open "
                  f"{row['open_s']} s, peak +{row['peak_mib']} MiB, held +{row['held_mib']} MiB", flush=True)
    if save:
        append("datasets_memory", rows, "LEAF FEMNIST: memory of fedsim's per-user index vs loading every file")
    return rows


# ---------------------------------------------------------------- client-steps/s
def _federated(kind: str, clients: int, per_client: int):
    from fedsim.data.federated import FederatedData

    rng = np.random.default_rng(0)
    parts = []
    for _ in range(clients):
        if kind == "leaf_cnn":
            x = rng.random((per_client, 1, 28, 28), dtype=np.float32)
            y = rng.integers(0, 62, per_client)
        else:
            x = rng.integers(0, 80, (per_client, 80))
            y = rng.integers(0, 80, per_client)
        parts.append((x, y))
    return FederatedData.from_clients(parts, client_test=parts, num_classes=62 if kind == "leaf_cnn" else 80,
                                      name=kind)


def _workload(fd, kind: str):
    """The engine's Workload over the FederatedData's clients (all held), with LEAF's model."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call

    from fedsim.engine.workload import Workload
    from fedsim.models.leaf import char_lstm, leaf_cnn

    xs, ys, idx, start = [], [], [], 0
    for k in range(fd.num_clients):
        x, y = fd.client_data(k)
        xs.append(x)
        ys.append(y)
        idx.append(np.arange(start, start + len(y)))
        start += len(y)
    x = torch.as_tensor(np.concatenate(xs))
    y = torch.as_tensor(np.concatenate(ys), dtype=torch.long)
    torch.manual_seed(0)
    module = leaf_cnn((1, 28, 28), 62) if kind == "leaf_cnn" else char_lstm((80,), 80)
    params = {k: v.detach().clone() for k, v in module.named_parameters()}

    def predict(p, xb):
        return functional_call(module, p, (xb,))

    def loss(p, xb, yb):
        return F.cross_entropy(predict(p, xb), yb)

    return Workload(name=kind, x_train=x, y_train=y, x_test=None, y_test=None, client_indices=idx,
                    weights=fd.weights, init_params=params, loss=loss, predict=predict, module=module,
                    num_classes=fd.num_classes)


def _spec(batch_size: int):
    import dataclasses

    from fedsim.runner.build import build_run
    from fedsim.scenario import parse_scenario

    raw = dict(data=dict(name="digits", clients=4), model=dict(name="logreg"), round=dict(policy="window", window=5.0),
               algorithm=dict(name="fedavg", lr=0.01, batch_size=batch_size))
    return dataclasses.replace(build_run(parse_scenario(raw)).engine.alg.spec, batch_size=batch_size)


def speed(clients: int, steps: int, reps: int, save: bool) -> list[dict]:
    import fedsim  # noqa: F401  (before torch: its OpenMP settings apply)
    import torch

    from fedsim.engine.threads import default_threads
    from fedsim.engine.chunking import auto_chunk
    from fedsim.algorithms.algorithm import algorithm
    from fedsim.engine.train import Task, train_cohort

    spec = _spec(10)
    alg = algorithm(spec)
    rows = []
    for kind in ("leaf_cnn", "char_lstm"):
        fd = _federated(kind, clients, per_client=10 * steps)
        work = _workload(fd, kind)
        tasks = [Task(i, max(1, round(steps * (0.5 + 0.5 * i / max(clients - 1, 1)))), 0) for i in range(clients)]
        total = sum(t.steps for t in tasks)
        auto = min(auto_chunk(work, torch.device("cpu"), default_threads(work, clients)), clients)
        modes = {"auto": auto, "cohort": clients, "one": 1}
        if auto in (1, clients):
            del modes["auto"]
        params = work.init_params

        def run(chunk):
            torch.set_num_threads(default_threads(work, chunk))
            train_cohort(work, alg, params, tasks, round_lr=spec.lr, seed=0, chunk=chunk)

        warm = [Task(0, 1, 1), Task(1, 1, 1)]
        for chunk in (1, 2):
            torch.set_num_threads(default_threads(work, chunk))
            train_cohort(work, alg, params, warm, round_lr=spec.lr, seed=0, chunk=chunk)
        times: dict[str, list[float]] = {m: [] for m in modes}
        errors: dict[str, str] = {}
        for _ in range(reps):
            for m, chunk in modes.items():
                if m in errors:
                    continue
                t = time.perf_counter()
                try:
                    run(chunk)
                except Exception as err:  # noqa: BLE001 - a path the engine cannot batch: recorded
                    errors[m] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
                    continue
                times[m].append(time.perf_counter() - t)
        rate = {m: (total / median(v) if v else None) for m, v in times.items()}
        rate.setdefault("auto", rate["one"] if auto == 1 else rate["cohort"])
        row = dict(model=kind, params=sum(v.numel() for v in params.values()), clients=clients, client_steps=total,
                   batch_size=10, reps=reps, auto_chunk=auto,
                   **{f"{m}_steps_s": ("" if r is None else round(r, 1)) for m, r in rate.items()},
                   failed="; ".join(f"{m}: {e}" for m, e in errors.items()))
        row.update(machine())
        rows.append(row)
        print(f"{kind:10s} auto(chunk {auto}) {row['auto_steps_s']} cohort {row['cohort_steps_s']} "
              f"one {row['one_steps_s']} client-steps/s {row['failed']}", flush=True)
    if save:
        append("datasets_speed", rows, "LEAF's models: client-steps/s on CPU, batched vs one client at a time")
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_child":
        _memory_child(argv[1], argv[2], int(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="all", choices=("memory", "speed", "all"))
    ap.add_argument("--writers", type=int, default=300)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--cohort", type=int, default=10)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.what in ("memory", "all"):
        memory(a.writers, a.samples, a.cohort, not a.no_save)
    if a.what in ("speed", "all"):
        speed(a.clients, a.steps, a.reps, not a.no_save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
