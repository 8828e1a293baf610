"""The quadratic problem of FedNova (Wang et al. 2020, Lemma 1) as data: client i's objective is
F_i(x) = 1/2 ||x - e_i||^2, its one "sample" the center e_i, and p_i its weight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..rng import stream

__all__ = ["QuadraticProblem"]


@dataclass(frozen=True, eq=False)
class QuadraticProblem:
    """Centers ``(clients, dim)`` float64 and weights p_i ``(clients,)`` summing to 1."""

    centers: np.ndarray
    weights: np.ndarray

    @classmethod
    def from_config(cls, d: Any, seed: int) -> "QuadraticProblem":
        """From a scenario's ``data`` section: ``centers`` given, else ``clients`` x ``dim`` drawn
        as ``center_scale * N(0, 1)`` from the stream ``(seed, "centers")``; ``weights`` given
        (normalized) or uniform."""
        if d.centers is not None:
            centers = np.asarray(d.centers, dtype=np.float64)
        else:
            centers = d.center_scale * stream(seed, "centers").standard_normal((d.num_clients, d.dim))
        m = centers.shape[0]
        p = np.full(m, 1.0 / m) if d.weights is None else np.asarray(d.weights, dtype=np.float64) / sum(d.weights)
        return cls(centers, p)

    @property
    def client_sizes(self) -> np.ndarray:
        """One sample (the center) per client."""
        return np.ones(len(self.centers), dtype=np.int64)
