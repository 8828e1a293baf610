"""A task's minibatches: an endless stream of per-epoch permutations of the client's samples,
keyed by (seed, "batches", client, key), read a block of steps at a time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rng import stream
from .workload_value import Workload

__all__ = ["Task", "BatchStream", "batch_indices"]


@dataclass(frozen=True)
class Task:
    """One client's local work for a round: ``steps`` local steps keyed by ``key``."""

    client: int
    steps: int
    key: int


class BatchStream:
    """A task's global sample indices, read a block of steps at a time: an endless stream of
    per-epoch permutations keyed by (seed, "batches", client, key).

    Each epoch is a fresh permutation of the client's samples (sampling without replacement,
    reshuffled every epoch); step k takes the next B indices of the stream, so tau = floor(E n_i/B)
    steps consume E epochs. Permutations are drawn when needed, so reading the steps in blocks
    gives the same indices as reading them at once.
    """

    def __init__(self, work: Workload, seed: int, task: Task, batch_size: int):
        self.local = work.client_indices[task.client]
        self.rng = stream(seed, "batches", task.client, task.key)
        self.batch_size = batch_size
        self.rest = np.zeros(0, dtype=np.int64)  # drawn, not yet read

    def take(self, steps: int) -> np.ndarray:
        """Indices (steps, B) of the next ``steps`` steps."""
        need = steps * self.batch_size
        if need > len(self.rest) and len(self.local) == 0:
            raise ValueError("BatchStream: a client without samples has no minibatches")
        parts, have = [self.rest], len(self.rest)
        while have < need:
            parts.append(self.rng.permutation(len(self.local)))
            have += len(self.local)
        order = np.concatenate(parts)
        self.rest = order[need:]
        return self.local[order[:need]].reshape(steps, self.batch_size)


def batch_indices(work: Workload, seed: int, task: Task, batch_size: int) -> np.ndarray:
    """Global sample indices (steps, B) of all of a task's steps (``BatchStream`` read at once)."""
    return BatchStream(work, seed, task, batch_size).take(task.steps)
