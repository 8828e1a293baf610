"""The chunk policy: how many clients ``engine.clients_per_batch: auto`` steps together."""

from __future__ import annotations

import torch

from .workload_value import Workload

__all__ = ["CPU_CHUNK_BYTES", "MAX_CHUNK", "auto_chunk"]

#: CPU rule of ``auto_chunk``: a chunk's stacked parameters stay within about this many bytes.
CPU_CHUNK_BYTES = 2 << 20
#: Largest chunk ``auto_chunk`` picks.
MAX_CHUNK = 128


def auto_chunk(work: Workload, device: torch.device, threads: int = 1) -> int:
    """``engine.clients_per_batch: auto``, a documented rule backed by benchmarks/bench_engine.py.

    * The ``per_client`` engine path (models with buffers, or that ``vmap`` refuses): 1.
    * Conv nets: one client at a time on CPU (a conv step is compute-bound; batching the
      convolutions over clients is no faster there, measured, and holds 16x the activations);
      16 on GPU.
    * Closed-form workloads (quadratic) and other models on GPU: ``MAX_CHUNK``.
    * Other models on CPU: as many clients as keep the chunk's stacked parameters within
      ``CPU_CHUNK_BYTES`` (the backward pass and the solver step stream every client's
      parameters each step; past the cache they run at memory speed), between 1 and
      ``MAX_CHUNK``. Logistic regression on Synthetic (2.4 KB a client): 128. The 200-200 MLP on
      digits (212 KB): 9 -- measured (CPU time, 1 thread) 150-170 us per client-step at 8-16,
      190-200 at 32-64, 475 one at a time. Chunks of a cohort are balanced (16 clients with
      chunk 9 run as 8 + 8). The budget grows with the intra-op ``threads`` (each thread has its
      own cache): on both cores the MLP's best chunks were 12-19 clients (chunk 16: 9.0k
      client-steps/s against 7.3k at 9).
    """
    if work.batched_grad is not None:
        return MAX_CHUNK
    if work.engine_path == "per_client":  # buffers, or a module vmap refuses: one client at a time
        return 1
    conv = work.module is not None and any(isinstance(m, torch.nn.Conv2d) for m in work.module.modules())
    if conv:
        return 16 if device.type == "cuda" else 1
    if device.type != "cpu":
        return MAX_CHUNK
    per_client = sum(v.numel() * v.element_size() for v in work.init_params.values())
    return int(min(MAX_CHUNK, max(1, CPU_CHUNK_BYTES * max(threads, 1) // max(per_client, 1))))
