"""Aggregators: the round's model change d from the clients' updates (Wang et al. 2020, eq. (7)).

With the weights w_i of the clients that reported:
    Average:  d = sum_i w_i Delta_i
    Nova:     d = tau_eff * sum_i w_i Delta_i / ||a_i||_1,
              tau_eff = sum_i w_i ||a_i||_1 (``a_norm``) or sum_i w_i tau_i (``tau``)
See docs/algorithms.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Tensors = dict[str, torch.Tensor]

__all__ = ["Average", "Nova", "weighted_sum"]


def weighted_sum(w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """sum_i w_i t_i over the leading dimension, in ``t``'s dtype and device."""
    return torch.tensordot(w.to(device=t.device, dtype=t.dtype), t, dims=1)


@dataclass(frozen=True)
class Average:
    """FedAvg: d = sum_i w_i Delta_i."""

    def __call__(self, upd) -> Tensors:
        return {k: weighted_sum(upd.weights, d) for k, d in upd.deltas.items()}


@dataclass(frozen=True)
class Nova:
    """FedNova: d = tau_eff sum_i w_i Delta_i / ||a_i||_1; ``tau_eff`` is ``a_norm`` or ``tau``."""

    tau_eff: str = "a_norm"

    def __call__(self, upd) -> Tensors:
        w = upd.weights
        norm = upd.steps if self.tau_eff == "tau" else upd.a_norm
        tau_eff = float((w * norm).sum())
        coef = w * tau_eff / upd.a_norm
        return {k: weighted_sum(coef, d) for k, d in upd.deltas.items()}
