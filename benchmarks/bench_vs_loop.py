"""fedsim vs a plain per-client PyTorch loop vs Flower's simulation mode (issue 13, item 4).

    python benchmarks/bench_vs_loop.py [--clients 100] [--steps 20] [--rounds 5] [--flwr-python PY]

The workload of the issue: FedAvg, logistic regression on Synthetic(1, 1) (60 features, 10
classes, the same data for all three), every client in every round, ``--steps`` local SGD steps of
batch 10 at lr 0.05, ``--rounds`` rounds; 100 x 20 x 5 = 10,000 client-steps. Each contender runs
in a fresh interpreter, timed end to end (interpreter start, imports, data, training) and, where it
can say so, the training alone:

* ``fedsim``     -- ``python -m fedsim run`` of that scenario (policy wait, no evaluation but the
                    final one); its training time is the wall time of ``rounds`` rounds minus a
                    1-round run's (same start-up).
* ``torch_loop`` -- the usual simulator: one ``nn.Linear``, ``torch.optim.SGD``, one client after
                    another, weighted average of the client models (this file's ``loop`` mode).
* ``flower``     -- Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend,
                    ``FedAvg``, one ``NumPyClient`` per client doing the same torch loop), run by
                    ``--flwr-python`` (a separate venv: ``pip install "flwr[simulation]"``); torch
                    comes from this interpreter's site-packages. Skipped, with the reason recorded,
                    when that interpreter or Flower is missing.

Appends rows (machine description included) to ``benchmarks/results/vs_loop.{csv,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import ROOT, append, machine  # noqa: E402

LR, BATCH = 0.05, 10


def scenario(clients: int, steps: int, rounds: int) -> str:
    return (
        f"name: vs_loop\nseed: 0\nrounds: {rounds}\n"
        f"data: {{name: synthetic, alpha: 1.0, beta: 1.0, clients: {clients}}}\nmodel: {{name: logreg}}\n"
        f"system: {{speed: 1.0, latency: 0.0}}\nround: {{policy: wait, local_steps: {steps}}}\n"
        f"algorithm: {{name: fedavg, lr: {LR}, batch_size: {BATCH}}}\neval: {{every: {rounds}, train_loss: false}}\n"
    )


# --------------------------------------------------------------------------- workers (fresh interpreters)
def client_arrays(clients: int):
    """Per-client (x, y) float32/int64 arrays of fedsim's Synthetic(1, 1), and the test set."""
    from fedsim.data import synthetic

    ds = synthetic(1.0, 1.0, clients=clients, dim=60, seed=0)
    return [(ds.x_train[i], ds.y_train[i]) for i in ds.client_indices], (ds.x_test, ds.y_test)


def local_sgd(model, x, y, steps: int, seed: int):
    """``steps`` SGD steps on minibatches of ``BATCH`` drawn with replacement (a seeded generator)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(steps):
        idx = torch.randint(0, len(y), (BATCH,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


def loop_worker(clients: int, steps: int, rounds: int) -> dict:
    import torch

    torch.set_num_threads(1)
    data, _ = client_arrays(clients)
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
    n = sum(len(y) for _, y in data)
    torch.manual_seed(0)
    glob = torch.nn.Linear(60, 10)
    t = time.perf_counter()
    for r in range(rounds):
        acc = {k: torch.zeros_like(v) for k, v in glob.state_dict().items()}
        for i, (x, y) in enumerate(data):
            local = torch.nn.Linear(60, 10)
            local.load_state_dict(glob.state_dict())
            local_sgd(local, x, y, steps, seed=r * clients + i)
            for k, v in local.state_dict().items():
                acc[k] += v * (len(y) / n)
        glob.load_state_dict(acc)
    return {"train_s": time.perf_counter() - t}


def flower_worker(clients: int, steps: int, rounds: int) -> dict:
    import numpy as np
    import torch
    from flwr.client import NumPyClient
    from flwr.clientapp import ClientApp
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    torch.set_num_threads(1)
    data, _ = client_arrays(clients)
    torch.manual_seed(0)
    init = [v.detach().numpy().copy() for v in torch.nn.Linear(60, 10).state_dict().values()]

    class Client(NumPyClient):
        def __init__(self, cid: int):
            self.cid = cid

        def fit(self, parameters, config):
            model = torch.nn.Linear(60, 10)
            model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in zip(("weight", "bias"), parameters)})
            x, y = data[self.cid]
            local_sgd(model, torch.from_numpy(x), torch.from_numpy(y), steps, seed=self.cid)
            return [v.detach().numpy().copy() for v in model.state_dict().values()], len(y), {}

    def client_fn(context: Context):
        return Client(int(context.node_config["partition-id"])).to_client()

    def server_fn(context: Context):
        strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients,
                          min_available_clients=clients, initial_parameters=ndarrays_to_parameters(init))  # fmt: skip
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    t = time.perf_counter()
    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
                   num_supernodes=clients, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})  # fmt: skip
    return {"train_s": time.perf_counter() - t}


# --------------------------------------------------------------------------- driver
def timed_run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    return time.perf_counter() - t, proc


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--flwr-python", default="/work/flwr-venv/bin/python")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--worker", choices=["loop", "flower"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:  # inside a fresh interpreter
        sys.path.insert(0, str(ROOT))
        fn = loop_worker if a.worker == "loop" else flower_worker
        print(json.dumps(fn(a.clients, a.steps, a.rounds)), flush=True)
        return 0

    sizes = ["--clients", str(a.clients), "--steps", str(a.steps), "--rounds", str(a.rounds)]
    rows, notes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        walls = {}
        for rounds in (a.rounds, 1):
            path = Path(tmp) / f"s{rounds}.yaml"
            path.write_text(scenario(a.clients, a.steps, rounds))
            wall, proc = timed_run([sys.executable, "-m", "fedsim", "run", str(path), "--out", str(Path(tmp) / f"r{rounds}"),
                                    "--quiet"], a.timeout)  # fmt: skip
            if proc.returncode != 0:
                raise SystemExit(f"fedsim failed: {proc.stderr.strip()[-500:]}")
            walls[rounds] = wall
        rows.append(("fedsim", walls[a.rounds], walls[a.rounds] - walls[1] if a.rounds > 1 else float("nan")))
        wall, proc = timed_run([sys.executable, __file__, "--worker", "loop", *sizes], a.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"torch loop failed: {proc.stderr.strip()[-500:]}")
        rows.append(("torch_loop", wall, last_json(proc.stdout).get("train_s", float("nan"))))
        flwr = Path(a.flwr_python)
        if not flwr.exists():
            notes["flower"] = f"not run: {flwr} does not exist (pip install 'flwr[simulation]' into a venv)"
        else:
            # torch and fedsim from this interpreter, after Flower's own packages, in every process
            # Ray starts too (they inherit PYTHONPATH, whose sitecustomize appends the paths)
            hook = Path(tmp) / "hook"
            hook.mkdir()
            extra = [str(ROOT), sysconfig.get_paths()["purelib"]]
            (hook / "sitecustomize.py").write_text(f"import sys\nsys.path.extend({extra!r})\n")
            env = {**os.environ, "PYTHONPATH": str(hook)}
            try:
                wall, proc = timed_run([str(flwr), __file__, "--worker", "flower", *sizes], a.timeout, env)
                res = last_json(proc.stdout)
                if proc.returncode != 0 or not res:
                    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                    notes["flower"] = f"failed (exit {proc.returncode}): {tail[:300]}"
                else:
                    rows.append(("flower", wall, res["train_s"]))
            except subprocess.TimeoutExpired:
                notes["flower"] = f"timed out after {a.timeout:.0f} s"
    m = machine(threads=None)
    out = []
    print(f"{a.clients} clients x {a.steps} steps x {a.rounds} rounds of logistic regression "
          f"({a.clients * a.steps * a.rounds} client-steps)")  # fmt: skip
    for name, wall, train in rows:
        ratio = wall / rows[0][1]
        print(f"  {name:<11} end to end {wall:7.2f} s   training {train:7.2f} s   end-to-end / fedsim {ratio:5.2f}x")
        out.append({**m, "contender": name, "clients": a.clients, "steps": a.steps, "rounds": a.rounds,
                    "wall_s": round(wall, 3), "train_s": round(train, 3), "wall_vs_fedsim": round(ratio, 2),
                    "note": ""})  # fmt: skip
    for name, note in notes.items():
        print(f"  {name:<11} {note}")
        out.append({**m, "contender": name, "clients": a.clients, "steps": a.steps, "rounds": a.rounds,
                    "wall_s": "", "train_s": "", "wall_vs_fedsim": "", "note": note})  # fmt: skip
    if not a.no_save:
        append("vs_loop", out, "fedsim vs a per-client PyTorch loop vs Flower simulation (bench_vs_loop.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
