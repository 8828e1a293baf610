"""Client-steps per second: batched chunks vs one client at a time, measured in one run.

For each case the same cohort (same clients, same unequal tau_i, same minibatches) is trained
from the same global model by ``fedsim.engine.train.train_cohort`` with the chunk that
``engine.clients_per_batch: auto`` picks, with the whole cohort as one chunk, and with
``chunk = 1`` (the engine's one-client-at-a-time loop), interleaved ``--reps`` times so load
changes on a shared machine hit all alike; medians give the rates, ``ratio`` = auto / one.
A third column is a plain PyTorch loop (module + ``torch.optim.SGD``, one client after another,
as FedML / FedNova's reference code do) for reference.

Cohorts have unequal work: tau_i spread evenly from S/2 to S (the engine retires clients whose
steps are done, so padding costs nothing). Threads follow the engine's rule
(``fedsim.engine.threads.default_threads``: one thread for a small model stepped one client at a
time, the thread budget for batched chunks and conv nets); where
that is fewer than the machine's cores, the ``*_allcores`` columns repeat auto and one-at-a-time
with ``engine.threads`` = every core (``ratio_allcores`` = auto on every core / the better of the
two one-at-a-time runs).

    python benchmarks/bench_engine.py [--cases logreg-synthetic-100,...] [--reps 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import _common  # noqa: F401  (puts the repo on sys.path)
from _common import append, machine, median

import time

import fedsim  # noqa: F401  (before torch: its OpenMP settings apply, as in a real run)
import torch
import torch.nn.functional as F

from fedsim.engine.threads import default_threads
from fedsim.engine.batches import batch_indices
from fedsim.engine.train import Task, train_cohort
from fedsim.runner.build import build_run
from fedsim.scenario import parse_scenario

WINDOW = dict(policy="window", window=5.0)

#: name -> (scenario, clients per round, S (max local steps), target ratio batched / one-at-a-time)
CASES = {
    "logreg-synthetic-100": (
        dict(data=dict(name="synthetic", alpha=1.0, beta=1.0, clients=100), model=dict(name="logreg"),
             algorithm=dict(name="fednova", lr=0.01, batch_size=10)), 100, 20, 15.0),
    "mlp-digits-16": (
        dict(data=dict(name="digits", clients=64), model=dict(name="mlp"),
             algorithm=dict(name="fedavg", lr=0.05, batch_size=10)), 16, 20, 3.0),
    "mlp-digits-64": (
        dict(data=dict(name="digits", clients=64), model=dict(name="mlp"),
             algorithm=dict(name="fedavg", lr=0.05, batch_size=10)), 64, 20, None),
    "cnn-cifar10standin-16": (
        dict(data=dict(name="cifar10", standin=True, clients=16, n_train=4000, n_test=500),
             model=dict(name="cnn"), algorithm=dict(name="fedavg", lr=0.05, batch_size=16)), 16, 2, None),
    "vgg11-cifar10standin-16": (  # GPU only
        dict(data=dict(name="cifar10", standin=True, clients=16, n_train=4000, n_test=500),
             model=dict(name="vgg11"), algorithm=dict(name="fedavg", lr=0.05, batch_size=32)), 16, 10, None),
}
CPU_CASES = ["logreg-synthetic-100", "mlp-digits-16", "mlp-digits-64", "cnn-cifar10standin-16"]


def tasks_for(n: int, s: int) -> list[Task]:
    """n clients 0..n-1, tau_i spread evenly over [S/2, S] (round key 0)."""
    return [Task(i, max(1, round(s * (0.5 + 0.5 * i / max(n - 1, 1)))), 0) for i in range(n)]


def torch_loop(work, spec, params, tasks, lr: float, seed: int) -> None:
    """Reference: the usual per-client loop with a module and torch.optim.SGD (same minibatches)."""
    model = copy.deepcopy(work.module).train()
    named = dict(model.named_parameters())
    for t in tasks:
        with torch.no_grad():
            for k, p in named.items():
                p.copy_(params[k])
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        idx = torch.as_tensor(batch_indices(work, seed, t, spec.batch_size), device=work.x_train.device)
        for k in range(t.steps):
            xb, yb = work.x_train[idx[k]], work.y_train[idx[k]]
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        _ = {k: p.detach() - params[k] for k, p in named.items()}


def measure(case: str, reps: int, device: str) -> dict:
    raw, n, s, target = CASES[case]
    raw = dict(raw, round=WINDOW, engine=dict(device=device))
    sim = build_run(parse_scenario(raw)).engine
    work, alg, params = sim.work, sim.alg, sim.params
    spec = alg.spec
    tasks = tasks_for(n, s)
    steps = sum(t.steps for t in tasks)
    cuda = work.x_train.device.type == "cuda"

    def clock():
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    auto = min(sim.chunk, n)  # engine.clients_per_batch: auto

    def engine_threads(chunk, fn):  # each mode under the engine's own thread rule (default_threads)
        def run():
            torch.set_num_threads(default_threads(work, chunk))
            fn()
        return run

    runs = {
        "auto": engine_threads(auto, lambda: train_cohort(work, alg, params, tasks, round_lr=spec.lr, seed=0,
                                                          chunk=auto)),
        "cohort": engine_threads(n, lambda: train_cohort(work, alg, params, tasks, round_lr=spec.lr, seed=0,
                                                         chunk=n)),
        "one": engine_threads(1, lambda: train_cohort(work, alg, params, tasks, round_lr=spec.lr, seed=0,
                                                      chunk=1)),
        "torch_loop": engine_threads(1, lambda: torch_loop(work, spec, params, tasks, spec.lr, 0)),
    }
    if auto in (1, n):  # the same run as "one" or "cohort": measured once
        del runs["auto"]
    threads = default_threads(work, auto)  # the engine's rule for the batched mode
    cores = os.cpu_count() or 1
    if not cuda and threads < cores:  # the same engine with engine.threads = every core
        def with_cores(fn):
            def run():
                torch.set_num_threads(cores)
                fn()
            return run

        runs["auto_allcores"] = with_cores(lambda: train_cohort(work, alg, params, tasks, round_lr=spec.lr, seed=0,
                                                                chunk=auto))
        runs["one_allcores"] = with_cores(lambda: train_cohort(work, alg, params, tasks, round_lr=spec.lr, seed=0,
                                                               chunk=1))
    warm = [Task(0, 2, 1), Task(1, 1, 1)]  # touch every code path once
    train_cohort(work, alg, params, warm, round_lr=spec.lr, seed=0, chunk=2)
    train_cohort(work, alg, params, warm, round_lr=spec.lr, seed=0, chunk=1)
    torch_loop(work, spec, params, warm, spec.lr, 0)
    for fn in runs.values():  # steady state: every mode once at full size (first-touch page faults)
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            t = clock()
            fn()
            times[name].append(clock() - t)
    rate = {k: steps / median(v) for k, v in times.items()}
    rate.setdefault("auto", rate["one"] if auto == 1 else rate["cohort"])
    ratio = rate["auto"] / rate["one"]
    row = dict(
        case=case, clients=n, client_steps=steps, batch_size=spec.batch_size, reps=reps, auto_chunk=auto,
        auto_steps_s=round(rate["auto"], 1), cohort_steps_s=round(rate["cohort"], 1),
        one_steps_s=round(rate["one"], 1), torch_loop_steps_s=round(rate["torch_loop"], 1),
        ratio=round(ratio, 2), ratio_cohort=round(rate["cohort"] / rate["one"], 2),
        ratio_vs_torch_loop=round(rate["auto"] / rate["torch_loop"], 2),
        auto_allcores_steps_s=round(rate["auto_allcores"], 1) if "auto_allcores" in rate else "",
        one_allcores_steps_s=round(rate["one_allcores"], 1) if "one_allcores" in rate else "",
        ratio_allcores=(round(rate["auto_allcores"] / max(rate["one"], rate["one_allcores"]), 2)
                        if "auto_allcores" in rate else ""),
        target=target if target is not None else "",
        ok="" if target is None else ("yes" if ratio >= target else "NO"),
    )
    row.update(machine(threads, str(work.x_train.device)))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=None, help="comma-separated; default: the CPU cases (+ VGG-11 on GPU)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = a.cases.split(",") if a.cases else CPU_CASES + (["vgg11-cifar10standin-16"] if device == "cuda" else [])
    rows = []
    for case in cases:
        reps = a.reps if not case.startswith(("cnn", "vgg")) or device == "cuda" else max(1, a.reps - 1)
        row = measure(case, reps, device)
        rows.append(row)
        print(f"{case:24s} auto(chunk {row['auto_chunk']}) {row['auto_steps_s']:>9} "
              f"cohort {row['cohort_steps_s']:>9} one {row['one_steps_s']:>8} loop {row['torch_loop_steps_s']:>8} "
              f"client-steps/s  ratio {row['ratio']}x (cohort {row['ratio_cohort']}x, vs loop "
              f"{row['ratio_vs_torch_loop']}x) {row['ok']}"
              + (f" | every core: auto {row['auto_allcores_steps_s']} one {row['one_allcores_steps_s']} "
                 f"ratio {row['ratio_allcores']}x" if row["auto_allcores_steps_s"] != "" else ""), flush=True)
    if not a.no_save:
        append("engine", rows, "Client-steps per second: batched vs one client at a time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
