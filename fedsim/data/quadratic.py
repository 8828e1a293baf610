"""The quadratic problem of FedNova (Wang et al. 2020, Lemma 1) as data: client i's objective is
F_i(x) = 1/2 ||x - e_i||^2, its one "sample" the center e_i, and p_i its weight."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..rng import stream

__all__ = ["QuadraticProblem"]


@dataclass(frozen=True, eq=False)
class QuadraticProblem:
    """Weights p_i ``(clients,)`` summing to 1 and centers ``(clients, dim)`` float64, drawn on
    first use of :attr:`centers` (sizes and weights, all a schedule needs, draw none)."""

    weights: np.ndarray
    draw_centers: Callable[[], np.ndarray]

    @classmethod
    def from_config(cls, d: Any, seed: int) -> "QuadraticProblem":
        """From a scenario's ``data`` section: ``centers`` given, else ``clients`` x ``dim`` drawn
        as ``center_scale * N(0, 1)`` from the stream ``(seed, "centers")``; ``weights`` given
        (normalized) or uniform."""
        if d.centers is not None:
            m = len(d.centers)

            def draw() -> np.ndarray:
                return np.asarray(d.centers, dtype=np.float64)
        else:
            m = d.num_clients

            def draw() -> np.ndarray:
                return d.center_scale * stream(seed, "centers").standard_normal((d.num_clients, d.dim))

        p = np.full(m, 1.0 / m) if d.weights is None else np.asarray(d.weights, dtype=np.float64) / sum(d.weights)
        return cls(p, draw)

    @functools.cached_property
    def centers(self) -> np.ndarray:
        """e_i, one row per client."""
        return self.draw_centers()

    @property
    def client_sizes(self) -> np.ndarray:
        """One sample (the center) per client."""
        return np.ones(len(self.weights), dtype=np.int64)
