"""Intra-op thread policy of the engine (how many torch threads a run uses)."""

from __future__ import annotations

import os

import torch

from .workload import Workload

__all__ = ["thread_budget", "default_threads"]


#: torch's own thread count, read before any simulation sets it (so a conv net built after a
#: small model in the same process still gets torch's default, not the 1 set for the small one).
_TORCH_THREADS = torch.get_num_threads()


def thread_budget() -> int:
    """Intra-op threads this process may use: torch's default when fedsim was imported (a compare
    worker lowers it first), shared among torchrun's local ranks."""
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, min(_TORCH_THREADS, (os.cpu_count() or 1) // local))


def default_threads(work: Workload, chunk: int) -> int:
    """Documented rule (measured in benchmarks/bench_engine.py): the closed-form quadratic and a
    small model stepped one client at a time get one thread (intra-op threading only adds overhead
    on their tiny tensors); conv nets and batched chunks of clients get the thread budget (the
    batched 200-200 MLP step ran 1.3-1.6x faster on both cores of the 2-core machine, logistic
    regression with 100 clients 1.2x)."""
    if work.is_quadratic:
        return 1
    conv = work.module is not None and any(isinstance(m, torch.nn.Conv2d) for m in work.module.modules())
    return thread_budget() if (conv or chunk > 1) else 1
