"""Compressing a cohort's updates (issue 26 item 1, scale): each compressor on C client updates of
n float32 entries (default 100 x 10^5, two tensors), with and without error feedback (every
client holding a residual), through ``fedsim.compression.apply.compress_cohort`` as the engine
calls it: flatten, per-client generators, the vectorised transform, the residuals, split back.

The figure is the median wall time of ``--repeats`` calls after one warm-up, on ``--threads``
intra-op threads, and its throughput in client-updates per second. Run alone: on a shared machine
it measures the others.

    python benchmarks/bench_compression.py [--clients 100] [--params 100000] [--threads 1]
                                           [--repeats 5] [--device cpu] [--no-save]
"""

from __future__ import annotations

import argparse
import time

import _common  # noqa: F401
from _common import append, machine, median

CASES = [("none", {}), ("topk", {"ratio": 0.01}), ("randk", {"ratio": 0.01}), ("qsgd", {"levels": 15}),
         ("sign", {}), ("fp16", {})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--params", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()

    import torch

    from fedsim.compression.apply import compress_cohort, upload_bytes
    from fedsim.registries import COMPRESSORS

    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    g = torch.Generator().manual_seed(0)
    c, n = a.clients, a.params
    rows_w = n // 10
    deltas = {"w": torch.randn(c, rows_w, 9, generator=g).to(dev), "b": torch.randn(c, n - 9 * rows_w, generator=g).to(dev)}
    one = {k: v[0] for k, v in deltas.items()}
    clients, keys = list(range(c)), [7] * c
    rows = []
    for name, keys_ in CASES:
        for ef in (False, True):
            comp = COMPRESSORS.get(name)(name=name, error_feedback=ef, **keys_).value()
            res = {i: {k: v[i] * 0.1 for k, v in deltas.items()} for i in clients} if ef else {}
            compress_cohort(comp, deltas, clients, keys, res, seed=0)  # warm-up
            times = []
            for _ in range(a.repeats):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                compress_cohort(comp, deltas, clients, keys, res, seed=0)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            sec = median(times)
            row = dict(compressor=name, **{k: v for k, v in keys_.items()}, error_feedback=ef, clients=c, params=n,
                       seconds=round(sec, 4), updates_per_s=round(c / sec, 1),
                       payload_bytes=int(upload_bytes(comp.compressor, one)))
            row = {k: row.get(k, "") for k in ("compressor", "ratio", "levels", "error_feedback", "clients", "params",
                                                "seconds", "updates_per_s", "payload_bytes")}
            rows.append({**row, **machine(a.threads, a.device)})
            print(f"{name:6s} ef={ef!s:5s} {sec * 1e3:9.1f} ms  {c / sec:9.1f} updates/s  "
                  f"payload {row['payload_bytes']} B")
    if not a.no_save:
        append("compression", rows, "Compressing a cohort's updates (compress_cohort)")


if __name__ == "__main__":
    main()
