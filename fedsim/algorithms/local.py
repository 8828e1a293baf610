"""Local solvers as pure functions over dicts of stacked tensors (leading client dimension).

One step, for every client of a chunk at once (optax style: explicit state in, state out)::

    g   <- clip(grad) + weight_decay * x + corr            # corr: SCAFFOLD / VRL-SGD c - c_i
    SGD:      u <- g                   (+ mu (x - x0))      # FedProx term, outside any buffer
    momentum: b <- rho b + g;  u <- b  (+ mu (x - x0))      # heavy ball, buffer reset each round
    Adam:     m, v <- EMAs of g' = g + mu (x - x0);  u <- m / sqrt(v + eps)
    AMSGrad:  as Adam, v_hat <- max(v_hat, v);       u <- m / sqrt(v_hat)
    amended:  u <- amend * u + (1 - amend) * D               # FedCM Delta^t / FedLADA g_a
    x   <- x - lr_k * u

The proximal term is applied to the step, not written into the momentum buffer (FedNova's public
code stores it in the buffer; ALGORITHMS.md section 1 says not to). For the adaptive solvers the
proximal term is part of the gradient of the local objective they precondition. Adam/AMSGrad
have no bias correction (FedLADA / Reddi et al. convention); ``m`` and ``v`` restart at 0 every
round, AMSGrad's ``v_hat`` starts at the server's average (or ``eps``).

Clients whose step count is exhausted are frozen by ``masked`` on the *whole* state (parameters,
buffers, moments), so one chunk can hold clients with unequal tau_i.

``a_norm`` runs the same rule as a scalar "shadow run" (FedNova, Wang et al. 2020, eq. (6)):
x0 = 0, every gradient 1, the global direction D = 1, corrections 0, weight decay 0, no clipping,
the real learning rates lr_k; then ||a_i||_1 = -x / lr_0 after tau_i steps. This is exact for any
mix of momentum, prox and schedules, because the update is linear in the gradients. Adaptive
solvers are not linear; they report tau_i.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from .spec import AlgoSpec

Tensors = dict[str, torch.Tensor]

__all__ = ["init_state", "local_step", "a_norm", "StepLrs", "masked", "clip_grads"]


class StepLrs:
    """The local learning rates of a round's steps, computed when read (never stored per step).

    ``StepLrs(round_lr, decay)[k] = round_lr * decay**k`` (per-step decay ``lr_decay``) for any
    step ``k >= 0``, so a round of 10**12 steps costs no memory. ``ratios()`` reads
    ``lr_k / round_lr`` (what :func:`a_norm` takes), computed as that quotient, not as
    ``decay**k``, so it rounds exactly as the per-step lists of earlier versions did.
    """

    def __init__(self, round_lr: float, decay: float, *, ratio: bool = False):
        self.round_lr, self.decay, self.ratio = round_lr, decay, ratio

    def __getitem__(self, k: int) -> float:
        if k < 0:
            raise IndexError(k)
        lr = self.round_lr * self.decay**k
        return lr / self.round_lr if self.ratio else lr

    def ratios(self) -> "StepLrs":
        return StepLrs(self.round_lr, self.decay, ratio=True)


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
    """One local step for stacked clients; returns new (params, state). Pure.

    Args:
        params, grads, state: stacked tensors (leading client dimension).
        lr: this step's learning rate.
        x0: the round's starting point (the proximal anchor x^t).
        corr: additive gradient correction per client (SCAFFOLD c - c_i), stacked.
        direction: the global direction D (unstacked or stacked), used when ``amend < 1``.
        weight_decay: override of ``spec.weight_decay`` (the shadow run uses 0).
        clip: apply ``spec.clip_norm`` to ``grads``.
    """
    wd = spec.weight_decay if weight_decay is None else weight_decay
    if clip and spec.clip_norm is not None:
        grads = clip_grads(grads, spec.clip_norm)
    new_p: Tensors = {}
    new_s: Tensors = {}
    b1, b2 = spec.betas
    prox = spec.mu > 0 and x0 is not None
    for k, x in params.items():
        g = grads[k]
        if wd:
            g = g + wd * x
        if corr is not None:
            g = g + corr[k]
        if spec.adaptive:
            if prox:
                g = g + spec.mu * (x - x0[k])
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
        else:
            if spec.momentum > 0:
                u = spec.momentum * state["buf." + k] + g
                new_s["buf." + k] = u
            else:
                u = g
            if prox:
                u = u + spec.mu * (x - x0[k])
        if direction is not None and spec.amend != 1.0:
            u = spec.amend * u + (1 - spec.amend) * direction[k]
        new_p[k] = x - lr * u
    return new_p, new_s


def masked(mask: torch.Tensor, new: Tensors, old: Tensors) -> Tensors:
    """Per client: ``new`` where mask is True, else ``old`` (mask has shape (clients,))."""
    return {k: torch.where(_bcast(mask, v), v, old[k]) for k, v in new.items()}


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
        the gradients, ALGORITHMS.md section 1).
    """
    steps_t = torch.as_tensor(steps, dtype=torch.float64)
    if spec.adaptive:
        return steps_t.clone()
    if spec.mu > 0 and lr is None:
        raise ValueError("a_norm: lr is needed when mu > 0 (the prox factor is 1 - lr * mu)")
    # Without prox the rule is linear in lr: run at lr 1 so ||a_i||_1 is exact (no rounding).
    eta = 1.0 if (lr is None or spec.mu == 0) else float(lr)
    n = steps_t.shape[0]
    x = {"x": torch.zeros(n, dtype=torch.float64)}
    x0 = {"x": torch.zeros(n, dtype=torch.float64)}
    one = {"x": torch.ones(n, dtype=torch.float64)}
    st = init_state(spec, x)
    for k in range(int(steps_t.max().item()) if n else 0):
        nx, ns = local_step(
            spec, x, one, st, eta * lr_ratios[k], x0=x0, direction=one, weight_decay=0.0, clip=False
        )
        mask = steps_t > k
        x, st = masked(mask, nx, x), masked(mask, ns, st)
    return -x["x"] / eta
