"""One training step's gradient of Flatten / Linear / ReLU models: ``autograd.grad`` through the
hand-batched forward (what the engine did before) against the written-out backward
(``fedsim.engine.stacked.stacked_forward_backward`` + ``fedsim.engine.gradients.cross_entropy_backward``,
the same kernels without autograd's graph), interleaved in one process, same inputs; both results
are checked bit for bit equal first.

    python benchmarks/bench_backward.py [--threads 1] [--no-save]

Models: logistic regression on Synthetic (60 -> 10), the MLPs of the hparams grid (64-100-10) and
of wire_and_server (64-500-500-10); cohorts of 10, 50 and 200 clients, minibatches of 10.
Recorded to ``benchmarks/results/backward.{csv,md}`` with the machine's description.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn

from _common import ROOT, append, machine, median

sys.path.insert(0, str(ROOT))

from fedsim.engine.gradients import cross_entropy_backward, per_client_loss  # noqa: E402
from fedsim.engine.stacked import stacked_forward, stacked_forward_backward  # noqa: E402

MODELS = {
    "logreg 60-10": lambda: nn.Sequential(nn.Linear(60, 10)),
    "mlp 64-100-10": lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 100), nn.ReLU(), nn.Linear(100, 10)),
    "mlp 64-500-500-10": lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 500), nn.ReLU(), nn.Linear(500, 500),
                                               nn.ReLU(), nn.Linear(500, 10)),
}


def autograd_step(forward, params, x, y):
    leaves = [v.detach().requires_grad_(True) for v in params.values()]
    with torch.enable_grad():
        loss, _ = per_client_loss(None)(forward(dict(zip(params, leaves)), x), y)
        return dict(zip(params, torch.autograd.grad(loss.sum(), leaves, materialize_grads=True)))


def written_step(forward_backward, params, x, y):
    logits, back = forward_backward(params, x)
    return back(cross_entropy_backward(logits, y)[2])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name, make in MODELS.items():
        module = make()
        fwd, fwd_bwd = stacked_forward(module), stacked_forward_backward(module)
        d_in = next(m for m in module if isinstance(m, nn.Linear)).in_features
        for clients in (10, 50, 200):
            params = {k: 0.1 * torch.randn((clients,) + v.shape, generator=gen) for k, v in module.named_parameters()}
            x = torch.randn(clients, 10, d_in, generator=gen)
            y = torch.randint(0, 10, (clients, 10), generator=gen)
            ga, gw = autograd_step(fwd, params, x, y), written_step(fwd_bwd, params, x, y)
            if not all(torch.equal(ga[k], gw[k]) for k in params):
                raise SystemExit(f"{name}, {clients} clients: the written-out gradient is not autograd's")
            reps = max(3, int(2e8 // (clients * sum(v[0].numel() for v in params.values()) * 60)))
            times = {"autograd": [], "written": []}
            for _ in range(5):  # interleaved: load hits both alike
                for label, fn, f in (("autograd", autograd_step, fwd), ("written", written_step, fwd_bwd)):
                    t = time.perf_counter()
                    for _ in range(reps):
                        fn(f, params, x, y)
                    times[label].append((time.perf_counter() - t) / reps * 1e6)
            auto, written = median(times["autograd"]), median(times["written"])
            rows.append({**machine(a.threads), "model": name, "clients": clients, "autograd_us": round(auto),
                         "written_out_us": round(written), "x": round(auto / written, 2)})
            print(f"{name:20s} {clients:4d} clients: autograd {auto:9.0f} us, written out {written:9.0f} us, "
                  f"x{auto / written:.2f}", flush=True)
    if not a.no_save:
        append("backward", rows, "One step's gradient: autograd against the written-out backward (bench_backward.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
