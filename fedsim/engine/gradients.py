"""Loss and gradient builders: each client's mean minibatch loss, and the per-client gradients of a
chunk of clients with stacked parameters in one ``autograd.grad``."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.func import vmap

from ..models.dropout import dropout_noise
from .dropout_plan import Sites, split_noise
from .stacked import stacked_forward, stacked_forward_backward
from .workload_value import Workload

Tensors = dict[str, torch.Tensor]

__all__ = ["cohort_grad", "cross_entropy_backward", "per_client_loss"]


def cohort_grad(
    work: Workload, sites: Sites | None = None
) -> Callable[..., tuple[Tensors, torch.Tensor]]:
    """``g(stacked params, xb (C, B, ...), yb (C, B), noise=None) -> (per-client grads, per-client
    loss (C,), per-client sum of squared per-sample losses (C,))`` (:func:`per_client_loss`).

    The workload's closed form when it has one (quadratic); otherwise the gradient of
    ``sum_c loss_c`` (cross-entropy, mean over the client's minibatch) with respect to the stacked
    parameters, whose row c is exactly client c's gradient because the losses are independent.
    Equal to ``vmap(grad_and_value(work.loss), randomness="different")`` (tested). With ``sites``
    (the model's dropout sites, ``fedsim.models.dropout``) and ``noise`` (C, S) uniform noise,
    client c's dropout masks are ``noise[c] >= p`` (site by site, ``noise_size``), the same
    whether the client is stepped alone or batched; without noise dropout draws from torch's
    generator, independently per client.
    """
    if work.batched_grad is not None:

        def closed_form(params, xb, yb, noise=None, buffers=None):
            grads, loss = work.batched_grad(params, xb, yb)
            return grads, loss, xb.shape[1] * loss.detach() * loss.detach()

        return closed_form
    fwd = stacked_forward(work.module) if not work.buffers else None
    by_hand = stacked_forward_backward(work.module) if fwd is not None and work.loss_fn is None else None
    if by_hand is not None:  # Flatten / Linear / ReLU with fedsim's cross-entropy: autograd's kernels, no graph

        def written_out(params: Tensors, xb: torch.Tensor, yb: torch.Tensor, noise=None, buffers=None):
            logits, back = by_hand(params, xb)
            loss, loss_sq, dlogits = cross_entropy_backward(logits, yb)
            return back(dlogits), loss, loss_sq

        return written_out
    if fwd is None:
        predict = work.predict

        def keyed(params: Tensors, xb: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
            with dropout_noise(split_noise(u, xb.shape[0], sites)):
                return predict(params, xb)

        vfwd = vmap(predict, randomness="different")
        vkeyed = vmap(keyed, randomness="different")

        def fwd(params: Tensors, xb: torch.Tensor, noise: torch.Tensor | None = None,
                buffers: Tensors | None = None) -> torch.Tensor:
            if xb.shape[0] == 1:  # one client: the module itself, no batching rules
                p1 = {k: v[0] for k, v in params.items()}
                if buffers:  # the client's own buffers, updated in place by the module
                    p1 = {**p1, **buffers}
                out = predict(p1, xb[0]) if noise is None else keyed(p1, xb[0], noise[0])
                return out.unsqueeze(0)
            return vfwd(params, xb) if noise is None else vkeyed(params, xb, noise)
    else:
        stacked = fwd

        def fwd(params: Tensors, xb: torch.Tensor, noise: torch.Tensor | None = None,
                buffers: Tensors | None = None) -> torch.Tensor:
            return stacked(params, xb)  # Linear/ReLU stacks have no dropout

    client_losses = per_client_loss(work.loss_fn)

    def grad_fn(params: Tensors, xb: torch.Tensor, yb: torch.Tensor, noise: torch.Tensor | None = None,
                buffers: Tensors | None = None):
        leaves = [v.detach().requires_grad_(True) for v in params.values()]
        with torch.enable_grad():
            logits = fwd(dict(zip(params, leaves)), xb, noise, buffers)
            loss, loss_sq = client_losses(logits, yb)
            grads = torch.autograd.grad(loss.sum(), leaves, materialize_grads=True)
        return dict(zip(params, grads)), loss.detach(), loss_sq

    return grad_fn


def cross_entropy_backward(logits: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss (C,), loss_sq (C,), d sum_c loss_c / d logits)`` for logits (C, B, K) and classes
    yb (C, B): :func:`per_client_loss`'s cross-entropy and the gradient ``autograd.grad`` of
    ``loss.sum()`` gives, by the kernels autograd calls (mean's 1/B, ``nll_loss_backward``,
    ``_log_softmax_backward_data``), so the same bits."""
    c, b, k = logits.shape
    flat, y = logits.reshape(-1, k), yb.reshape(-1)
    log_p = torch.log_softmax(flat, 1)
    each = F.nll_loss(log_p, y, reduction="none").view(c, -1)
    per_sample = each.view(c, b, -1).mean(2)
    mean_grad = torch.ones(c * b, dtype=logits.dtype, device=logits.device) / b
    unused = torch.zeros((), dtype=logits.dtype, device=logits.device)  # total_weight: reduction none
    d_log_p = torch.ops.aten.nll_loss_backward(mean_grad, log_p, y, None, 0, -100, unused)
    d_flat = torch.ops.aten._log_softmax_backward_data(d_log_p, log_p, 1, logits.dtype)
    return each.mean(1), (per_sample * per_sample).sum(1), d_flat.view(c, b, k)


def per_client_loss(loss_fn: Callable | None) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``(outputs (C, B, ...), targets (C, B, ...)) -> (loss (C,), loss_sq (C,))``: each client's
    mean loss on its minibatch (what the gradient is taken of), and the sum over its B samples of
    the squared per-sample loss (detached; what a client reports for Oort's statistical utility).

    ``loss_fn`` None: cross-entropy over the last dimension of the outputs (targets (C, B) classes
    or (C, B, L) token sequences, mean over all of a client's targets; a sequence's per-sample
    loss is the mean over its tokens); else the user's ``loss_fn(outputs, targets) -> scalar`` per
    client (``vmap`` over clients, or called directly for one client), whose per-sample losses
    are not known: ``loss_sq`` is then B x loss^2 (a lower bound of the sum of squares, Jensen)."""
    if loss_fn is None:

        def cross_entropy(logits: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k = logits.shape[-1]
            each = F.cross_entropy(logits.reshape(-1, k), yb.reshape(-1), reduction="none").view(yb.shape[0], -1)
            per_sample = each.detach().view(yb.shape[0], yb.shape[1], -1).mean(2)
            return each.mean(1), (per_sample * per_sample).sum(1)

        return cross_entropy
    batched = vmap(loss_fn)

    def custom(logits: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = loss_fn(logits[0], yb[0]).reshape(1) if logits.shape[0] == 1 else batched(logits, yb)
        return loss, yb.shape[1] * loss.detach() * loss.detach()

    return custom
