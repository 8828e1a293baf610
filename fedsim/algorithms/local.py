"""Local solvers as pure functions over dicts of stacked tensors (leading client dimension).

One step, for every client of a chunk at once (optax style: explicit state in, state out)::

    g   <- clip(g) + weight_decay * x + mu * (x - x0) + corr        # corr: SCAFFOLD c - c_i, ...
    u   <- SGD: g, or momentum buffer b = rho * b + g;  Adam/AMSGrad: m / sqrt(v_hat)
    x   <- x - lr_k * (amend * u + (1 - amend) * G)                  # G: FedCM / FedLADA direction

Clients whose step count is exhausted are frozen by ``mask`` on the *whole* state (parameters,
buffers, moments), so one chunk can hold clients with unequal tau_i.

``a_norm`` runs the same rule as a scalar "shadow run" (FedNova, Wang et al. 2020, eq. (6)):
x0 = 0, every gradient 1, corrections 0, lr 1 (times lr_k / lr under a schedule):
||a_i||_1 = -x after tau_i steps. Adaptive solvers are not linear; they report tau_i.
"""

from __future__ import annotations

from typing import Mapping

import torch

from .spec import AlgoSpec

Tensors = dict[str, torch.Tensor]

__all__ = ["init_state", "local_step", "a_norm", "step_lrs", "masked"]


def step_lrs(spec: AlgoSpec, round_lr: float, steps: int) -> list[float]:
    """Local learning rate of each step k < steps in a round (per-step decay ``lr_decay``)."""
    return [round_lr * spec.lr_decay**k for k in range(steps)]


def init_state(spec: AlgoSpec, params: Tensors, vhat0: Tensors | None = None) -> Tensors:
    """Solver state for stacked ``params``; ``vhat0`` (unstacked) seeds AMSGrad's v_hat."""
    st: Tensors = {}
    if spec.adaptive:
        for k, p in params.items():
            st["m." + k] = torch.zeros_like(p)
            st["v." + k] = torch.zeros_like(p)
            if spec.solver == "amsgrad":
                if vhat0 is not None:
                    st["vhat." + k] = vhat0[k].to(p).expand_as(p).clone()
                else:
                    st["vhat." + k] = torch.full_like(p, spec.eps)
    elif spec.momentum > 0:
        for k, p in params.items():
            st["buf." + k] = torch.zeros_like(p)
    return st


def _bcast(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape + (1,) * (like.dim() - t.dim()))


def clip_grads(grads: Tensors, clip_norm: float) -> Tensors:
    """Scale each client's gradient to norm <= clip_norm (norm over all its tensors)."""
    sq = sum(g.flatten(1).pow(2).sum(1) for g in grads.values())
    scale = torch.clamp(clip_norm / (sq.sqrt() + 1e-12), max=1.0)
    return {k: g * _bcast(scale, g) for k, g in grads.items()}


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
    """One local step for stacked clients; returns new (params, state). Pure."""
    wd = spec.weight_decay if weight_decay is None else weight_decay
    if clip and spec.clip_norm is not None:
        grads = clip_grads(grads, spec.clip_norm)
    new_p: Tensors = {}
    new_s: Tensors = {}
    b1, b2 = spec.betas
    for k, x in params.items():
        g = grads[k]
        if wd:
            g = g + wd * x
        if spec.mu and x0 is not None:
            g = g + spec.mu * (x - x0[k])
        if corr is not None:
            g = g + corr[k]
        if spec.adaptive:
            m = b1 * state["m." + k] + (1 - b1) * g
            v = b2 * state["v." + k] + (1 - b2) * g * g
            new_s["m." + k] = m
            new_s["v." + k] = v
            if spec.solver == "amsgrad":
                vhat = torch.maximum(state["vhat." + k], v)
                new_s["vhat." + k] = vhat
                u = m / vhat.sqrt()
            else:
                u = m / (v + spec.eps).sqrt()
        elif spec.momentum > 0:
            u = spec.momentum * state["buf." + k] + g
            new_s["buf." + k] = u
        else:
            u = g
        if direction is not None and spec.amend != 1.0:
            u = spec.amend * u + (1 - spec.amend) * direction[k]
        new_p[k] = x - lr * u
    return new_p, new_s


def masked(mask: torch.Tensor, new: Tensors, old: Tensors) -> Tensors:
    """Per client: ``new`` where mask is True, else ``old`` (mask has shape (clients,))."""
    return {k: torch.where(_bcast(mask, v), v, old[k]) for k, v in new.items()}


def a_norm(spec: AlgoSpec, steps: list[int] | torch.Tensor, lr_ratios: list[float]) -> torch.Tensor:
    """||a_i||_1 per client by the shadow run of the same update rule (float64).

    ``lr_ratios[k]`` is lr_k / lr_0 for the round; ``steps`` holds tau_i per client.
    Adaptive solvers return tau_i (their update is not linear in the gradients).
    """
    steps_t = torch.as_tensor(steps, dtype=torch.float64)
    if spec.adaptive:
        return steps_t.clone()
    n = steps_t.shape[0]
    x = {"x": torch.zeros(n, dtype=torch.float64)}
    x0 = {"x": torch.zeros(n, dtype=torch.float64)}
    one = {"x": torch.ones(n, dtype=torch.float64)}
    zero_dir = {"x": torch.zeros(n, dtype=torch.float64)} if spec.uses_global_direction else None
    st = init_state(spec, x)
    for k in range(int(steps_t.max().item()) if n else 0):
        nx, ns = local_step(
            spec, x, one, st, lr_ratios[k], x0=x0, direction=zero_dir, weight_decay=0.0, clip=False
        )
        mask = steps_t > k
        x, st = masked(mask, nx, x), masked(mask, ns, st)
    return -x["x"]
