"""torch's ``log_softmax`` (and its backward) over the classes of a (rows, classes) tensor: over
its last dimension, as fedsim's cross-entropy computes it, against over dimension 0 of the
transposed copy (the transposes' copies included), interleaved in one process; and how often the
two give different bits. Not used by fedsim: it measures what a deliberate numerics change
could gain (docs/performance.md, "Stacked comparisons").

    python benchmarks/bench_log_softmax.py [--threads 1] [--no-save]

Shapes: the rows of one training step's logits (clients x minibatch of 10) for 10 classes
(Synthetic, digits), 62 (FEMNIST) and 100 (CIFAR-100). Equality: random float32 and float64
cases, forward and backward (``_log_softmax_backward_data``), counted. Recorded to
``benchmarks/results/log_softmax.{csv,md}`` with the machine's description.
"""

from __future__ import annotations

import argparse

import torch

from _common import append, machine, median

SHAPES = [(100, 10), (500, 10), (1280, 10), (1280, 62), (1280, 100)]


def lastdim(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.log_softmax(x, 1)
    return out, torch.ops.aten._log_softmax_backward_data(g, out, 1, x.dtype)


def transposed(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out_t = torch.log_softmax(x.t().contiguous(), 0)
    back_t = torch.ops.aten._log_softmax_backward_data(g.t().contiguous(), out_t, 0, x.dtype)
    return out_t.t().contiguous(), back_t.t().contiguous()


def differing(gen: torch.Generator) -> tuple[int, int, int]:
    """(cases, forward differs, backward differs) over random cases."""
    cases = fwd = bwd = 0
    for dtype in (torch.float32, torch.float64):
        for k in (2, 3, 5, 10, 16, 17, 62, 100, 1000):
            for n in (1, 7, 100, 1280):
                for scale in (0.1, 3.0, 30.0):
                    x = (torch.randn(n, k, generator=gen, dtype=torch.float64) * scale).to(dtype)
                    g = torch.randn(n, k, generator=gen, dtype=torch.float64).to(dtype)
                    (a, ga), (b, gb) = lastdim(x, g), transposed(x, g)
                    cases, fwd, bwd = cases + 1, fwd + (not torch.equal(a, b)), bwd + (not torch.equal(ga, gb))
    return cases, fwd, bwd


def per_call_us(fn, x, g, reps: int) -> float:
    import time

    t = time.perf_counter()
    for _ in range(reps):
        fn(x, g)
    return (time.perf_counter() - t) / reps * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    cases, fwd, bwd = differing(gen)
    print(f"{cases} random cases: forward differs in {fwd}, backward in {bwd}")
    rows = []
    for n, k in SHAPES:
        x, g = torch.randn(n, k, generator=gen), torch.randn(n, k, generator=gen)
        times = {"lastdim": [], "transposed": []}
        for _ in range(5):  # interleaved
            for name, fn in (("lastdim", lastdim), ("transposed", transposed)):
                times[name].append(per_call_us(fn, x, g, a.reps))
        last, trans = median(times["lastdim"]), median(times["transposed"])
        rows.append({**machine(a.threads), "rows": n, "classes": k, "lastdim_us": round(last, 1),
                     "transposed_us": round(trans, 1), "x": round(last / trans, 1), "cases": cases,
                     "forward_differs": fwd, "backward_differs": bwd})
        print(f"{n:5d} x {k:4d}: last dim {last:8.1f} us, transposed {trans:7.1f} us ({last / trans:.1f}x)")
    if not a.no_save:
        append("log_softmax", rows, "log_softmax and its backward (float32): last dim vs transposed "
                                    "(bench_log_softmax.py)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
