"""Local solvers, engine-facing: the functions the engine calls, over the chains of ``algorithm.py``.

One step, for every client of a chunk at once (stacked tensors, leading client dimension)::

    g   <- clip(grad) + weight_decay * x + corr            # corr: SCAFFOLD / VRL-SGD c - c_i
    SGD:      u <- g                   (+ mu (x - x0))      # FedProx term, outside any buffer
    momentum: b <- rho b + g;  u <- b  (+ mu (x - x0))      # heavy ball, buffer reset each round
    Adam:     m, v <- EMAs of g' = g + mu (x - x0);  u <- m / sqrt(v + eps)
    AMSGrad:  as Adam, v_hat <- max(v_hat, v);       u <- m / sqrt(v_hat)
    amended:  u <- amend * u + (1 - amend) * D               # FedCM Delta^t / FedLADA g_a
    x   <- x - lr_k * u

``a_norm`` runs the same chain as a scalar shadow run (FedNova, Wang et al. 2020, eq. (6)).
Equations, choices and citations: docs/algorithms.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import torch

from .algorithm import algorithm, masked
from .lr import StepLrs
from .spec import AlgoSpec

Tensors = dict[str, torch.Tensor]

__all__ = ["init_state", "local_step", "a_norm", "StepLrs", "masked"]


def init_state(spec: AlgoSpec, params: Tensors, vhat0: Tensors | None = None) -> Tensors:
    """Solver state for stacked ``params``; ``vhat0`` (unstacked) seeds AMSGrad's v_hat."""
    return algorithm(spec).client_init(params, vhat0)


def local_step(
    spec: AlgoSpec,
    params: Tensors,
    grads: Tensors,
    state: Tensors,
    lr: float | torch.Tensor,
    *,
    x0: Tensors | None = None,
    corr: Mapping[str, torch.Tensor] | None = None,
    direction: Mapping[str, torch.Tensor] | None = None,
    weight_decay: float | None = None,
    clip: bool = True,
) -> tuple[Tensors, Tensors]:
    """One local step for stacked clients; returns new (params, state). Pure.

    Args:
        params, grads, state: stacked tensors (leading client dimension).
        lr: this step's learning rate.
        x0: the round's starting point (the proximal anchor x^t).
        corr: additive gradient correction per client (SCAFFOLD c - c_i), stacked; used when the
            spec has control variates.
        direction: the global direction D (unstacked or stacked), used when ``amend < 1``.
        weight_decay: override of ``spec.weight_decay``.
        clip: apply ``spec.clip_norm`` to ``grads``.
    """
    if weight_decay is not None and weight_decay != spec.weight_decay:
        spec = replace(spec, weight_decay=weight_decay)
    if not clip and spec.clip_norm is not None:
        spec = replace(spec, clip_norm=None)
    return algorithm(spec).client_step(params, grads, state, lr, x0=x0, corr=corr, direction=direction)


def a_norm(
    spec: AlgoSpec,
    steps: Sequence[int] | torch.Tensor,
    lr_ratios: Sequence[float] | StepLrs,
    lr: float | None = None,
) -> torch.Tensor:
    """||a_i||_1 per client by the shadow run of the same update rule (float64).

    Args:
        spec: the algorithm.
        steps: tau_i per client.
        lr_ratios: ``lr_ratios[k] = lr_k / lr_0`` for the round (per-step decay): at least
            ``max(steps)`` entries, or ``StepLrs(lr_0, lr_decay).ratios()`` (read per step).
        lr: the round's learning rate lr_0. Needed when ``spec.mu > 0``: the proximal factor per
            step is (1 - lr_k * mu), so ||a_i||_1 depends on lr, not only on the ratios.

    Returns:
        float64 tensor of ||a_i||_1; tau_i for adaptive solvers (their update is not linear in
        the gradients, docs/algorithms.md).
    """
    return algorithm(spec).a_norm(steps, lr_ratios, lr)
