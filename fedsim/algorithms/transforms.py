"""Update pieces as ``(init, update)`` pairs over dicts of tensors, chained once per run (optax style).

A :class:`Transform` turns an update ``u`` (a gradient on the client, the pseudo-gradient d on the
server) into a new ``u`` and new state; :func:`chain` runs pieces in order. State is one flat dict
whose keys each piece prefixes (``buf.``, ``m.``, ``v.``, ``vhat.``), so the engine can slice and
freeze it per client. Two pieces of one chain may not keep the same key: :func:`chain` checks this
when its state is first built and names both pieces (one line). Every piece reads what else it
needs from a :class:`Context`. This is a public API: docs/extending.md states the contract
(shapes, purity) and :func:`check_transform` tests a piece's state on one step.

Floating-point order is part of each piece's contract (``a * b + c`` and ``c + a * b`` round
differently); the comments give the exact expression. Equations and citations: docs/algorithms.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from ..errors import ScenarioError

Tensors = dict[str, torch.Tensor]

__all__ = [
    "Context", "Transform", "chain", "check_transform", "StateError", "clip_by_client_norm", "add_weight_decay", "add_correction", "trace",
    "add_prox", "scale_by_adam", "amend", "scale", "bcast",
]


@dataclass(frozen=True)
class Context:
    """What a piece may read besides the update and its state.

    Attributes:
        params: the current model x (client: stacked, leading client dimension).
        x0: the round's start x^t, the proximal anchor (None: no proximal term).
        corr: per-client additive gradient correction c - c_i (None: none).
        direction: the global direction D of FedCM / FedLADA (None: no amendment).
        lr_ratio: eta_t / eta_{t-1}, the change of the local lr since the last server update.
        update: server pieces: the round's :class:`~fedsim.algorithms.state.RoundUpdate` (the
            clients' stacked deltas, weights w_i, tau_i, ||a_i||_1); None on clients and in
            asynchronous updates.
    """

    params: Mapping[str, torch.Tensor]
    x0: Mapping[str, torch.Tensor] | None = None
    corr: Mapping[str, torch.Tensor] | None = None
    direction: Mapping[str, torch.Tensor] | None = None
    lr_ratio: float = 1.0
    update: object | None = None


@dataclass(frozen=True)
class Transform:
    """A pure update piece.

    Attributes:
        init: ``(params, vhat0) -> state`` (``vhat0``: AMSGrad's starting v_hat, unstacked, or None).
        update: ``(u, state, ctx) -> (u, state)``.
        in_shadow: whether the piece is part of the linear rule a_i (kept by the shadow run of
            ``a_norm``); clipping, weight decay and corrections belong to the gradient instead.
        name: what error messages call the piece (default: the function that made it).
    """

    init: Callable[[Tensors, Tensors | None], Tensors]
    update: Callable[[Tensors, Tensors, Context], tuple[Tensors, Tensors]]
    in_shadow: bool = True
    name: str = ""


class StateError(ScenarioError):
    """Pieces whose state collides or changes shape (one line naming the piece; exit 2)."""


def _named(t: Transform, name: str) -> Transform:
    return t if t.name else Transform(t.init, t.update, t.in_shadow, name)


def _no_state(params: Tensors, vhat0: Tensors | None = None) -> Tensors:
    return {}


def _stateless(fn: Callable[[Tensors, Context], Tensors], in_shadow: bool = True, name: str = "") -> Transform:
    return Transform(_no_state, lambda u, state, ctx: (fn(u, ctx), {}), in_shadow, name)


def _label(p: Transform, i: int) -> str:
    return f"{p.name or 'transform'} (piece {i + 1})"


def chain(*pieces: Transform) -> Transform:
    """The pieces applied in order; state is the union of theirs. Keys must not collide: the
    first ``init`` checks and raises :class:`StateError` naming both pieces and the key (a check
    of key names only, once per chain, so the result is bit for bit the plain union's)."""
    checked = []

    def init(params: Tensors, vhat0: Tensors | None = None) -> Tensors:
        st: Tensors = {}
        if not checked:
            owner: dict[str, int] = {}
            for i, p in enumerate(pieces):
                part = p.init(params, vhat0)
                for k in part:
                    if k in owner:
                        raise StateError(f"{_label(pieces[owner[k]], owner[k])} and {_label(p, i)} both keep state "
                                         f"{k!r}; give one of them another key prefix")
                    owner[k] = i
                st.update(part)
            checked.append(True)
            return st
        for p in pieces:
            st.update(p.init(params, vhat0))
        return st

    def update(u: Tensors, state: Tensors, ctx: Context) -> tuple[Tensors, Tensors]:
        new: Tensors = {}
        for p in pieces:
            u, s = p.update(u, state, ctx)
            new.update(s)
        return u, new

    return Transform(init, update, all(p.in_shadow for p in pieces), "chain(" + ", ".join(p.name for p in pieces) + ")")


def shadow(*pieces: Transform) -> Transform:
    """The chain of the pieces that define a_i (``in_shadow``), for the shadow run of ``a_norm``."""
    return chain(*(p for p in pieces if p.in_shadow))


def check_transform(piece: Transform, params: Tensors, ctx: Context | None = None, *, what: str = "") -> None:
    """Run ``piece`` once (``init``, then one ``update`` of an all-ones update) and check that its
    state keeps the same keys, shapes and dtypes, and that its output has the update's. Raises
    :class:`StateError` (one line naming the piece) otherwise. ``params``: stacked client
    tensors for a local piece, the model's for a server piece."""
    label = what or piece.name or "transform"
    st = piece.init(params, None)
    u = {k: torch.ones_like(v) for k, v in params.items()}
    out, new = piece.update(u, st, ctx or Context(params))
    if set(new) != set(st):
        gained, lost = sorted(set(new) - set(st)), sorted(set(st) - set(new))
        raise StateError(f"{label}: state keys changed after one update (new {gained}, missing {lost})")
    for k, v in st.items():
        if tuple(new[k].shape) != tuple(v.shape) or new[k].dtype != v.dtype:
            raise StateError(f"{label}: state {k!r} changed from {tuple(v.shape)} {v.dtype} to "
                             f"{tuple(new[k].shape)} {new[k].dtype} after one update")
    for k, v in u.items():
        if k not in out or tuple(out[k].shape) != tuple(v.shape):
            got = tuple(out[k].shape) if k in out else "nothing"
            raise StateError(f"{label}: its update of {k!r} has shape {got}, not {tuple(v.shape)}")


def bcast(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` (one value per client) with trailing size-1 dimensions, to broadcast against ``like``."""
    return t.reshape(t.shape + (1,) * (like.dim() - t.dim()))


def clip_by_client_norm(clip_norm: float) -> Transform:
    """Each client's update scaled to norm <= clip_norm (norm over all its tensors):
    u * min(clip_norm / (||u|| + 1e-12), 1)."""

    def fn(u: Tensors, ctx: Context) -> Tensors:
        sq = sum(g.flatten(1).pow(2).sum(1) for g in u.values())
        s = torch.clamp(clip_norm / (sq.sqrt() + 1e-12), max=1.0)
        return {k: g * bcast(s, g) for k, g in u.items()}

    return _stateless(fn, in_shadow=False, name="clip_by_client_norm")


def add_weight_decay(weight_decay: float) -> Transform:
    """L2 term of F_i: u + weight_decay * x."""
    return _stateless(lambda u, ctx: {k: g + weight_decay * ctx.params[k] for k, g in u.items()}, in_shadow=False,
                      name="add_weight_decay")


def add_correction() -> Transform:
    """SCAFFOLD-family correction: u + (c - c_i) when the context carries one."""
    return _stateless(lambda u, ctx: u if ctx.corr is None else {k: g + ctx.corr[k] for k, g in u.items()},
                      in_shadow=False, name="add_correction")


def trace(decay: float, prefix: str, *, follow_lr: bool = False) -> Transform:
    """Heavy-ball buffer b = decay * b + u; returns b. State ``prefix + key``, zero at init.

    ``follow_lr``: first rescale b by ``ctx.lr_ratio`` (= eta_t / eta_{t-1}) when it is not 1,
    so a buffer of changes stays a buffer of gradients times eta_t (FedNova's hybrid momentum).
    """

    def init(params: Tensors, vhat0: Tensors | None = None) -> Tensors:
        return {prefix + k: torch.zeros_like(p) for k, p in params.items()}

    def update(u: Tensors, state: Tensors, ctx: Context) -> tuple[Tensors, Tensors]:
        out = {}
        for k, g in u.items():
            b = state[prefix + k]
            if follow_lr and ctx.lr_ratio != 1.0:
                b = b * ctx.lr_ratio
            out[k] = decay * b + g
        return out, {prefix + k: b for k, b in out.items()}

    return Transform(init, update, name=f"trace({prefix!r})")


def add_prox(mu: float) -> Transform:
    """FedProx term of the local objective: u + mu * (x - x0) (identity without an anchor)."""
    return _stateless(lambda u, ctx: u if ctx.x0 is None else {k: g + mu * (ctx.params[k] - ctx.x0[k])
                                                              for k, g in u.items()}, name="add_prox")


def scale_by_adam(
    b1: float,
    b2: float,
    eps: float,
    *,
    second_moment: str = "adam",
    amsgrad: bool = False,
    eps_in_root: bool = True,
    lr: float | None = None,
) -> Transform:
    """Adam-family scaling without bias correction; states ``m.``, ``v.`` (and ``vhat.``), zero at init.

    m = b1 m + (1 - b1) u, and v by ``second_moment``:
        adam:    v = b2 v + (1 - b2) u^2
        yogi:    v = v - (1 - b2) u^2 sign(v - u^2)
        adagrad: v = v + u^2
    result: m / sqrt(max(v_hat, v)) with ``amsgrad`` (v_hat starts at ``vhat0`` or eps);
    m / sqrt(v + eps) with ``eps_in_root``; else lr * m / (sqrt(v) + eps) (the server's form).

    Order (kept from earlier versions, bit for bit): with ``eps_in_root`` or ``amsgrad`` (the
    local solvers) adam's term is ((1 - b2) * u) * u; the server's is (1 - b2) * (u * u) and its
    step is (lr * m) / (sqrt(v) + eps).
    """
    server = not (eps_in_root or amsgrad)

    def init(params: Tensors, vhat0: Tensors | None = None) -> Tensors:
        st: Tensors = {}
        for k, p in params.items():
            st["m." + k] = torch.zeros_like(p)
            st["v." + k] = torch.zeros_like(p)
            if amsgrad:
                st["vhat." + k] = vhat0[k].to(p).expand_as(p).clone() if vhat0 is not None else torch.full_like(p, eps)
        return st

    def update(u: Tensors, state: Tensors, ctx: Context) -> tuple[Tensors, Tensors]:
        out: Tensors = {}
        new: Tensors = {}
        for k, g in u.items():
            m = b1 * state["m." + k] + (1 - b1) * g
            v_old = state["v." + k]
            if server:
                g2 = g * g
                if second_moment == "adam":
                    v = b2 * v_old + (1 - b2) * g2
                elif second_moment == "yogi":
                    v = v_old - (1 - b2) * g2 * torch.sign(v_old - g2)
                else:
                    v = v_old + g2
                out[k] = lr * m / (v.sqrt() + eps)
            else:
                v = b2 * v_old + (1 - b2) * g * g
                if amsgrad:
                    vhat = torch.maximum(state["vhat." + k], v)
                    new["vhat." + k] = vhat
                    out[k] = m / vhat.sqrt()
                else:
                    out[k] = m / (v + eps).sqrt()
            new["m." + k], new["v." + k] = m, v
        return out, new

    if server and lr is None:
        raise ValueError("scale_by_adam: the server form needs lr")
    if not server and second_moment != "adam":
        raise ValueError(f"scale_by_adam: second_moment {second_moment!r} is a server form (eps_in_root=False)")
    return Transform(init, update, name="scale_by_adam")


def amend(alpha: float) -> Transform:
    """FedCM / FedLADA amended direction: alpha * u + (1 - alpha) * D when the context carries D."""
    return _stateless(lambda u, ctx: u if ctx.direction is None else {
        k: alpha * g + (1 - alpha) * ctx.direction[k] for k, g in u.items()}, name="amend")


def scale(factor: float) -> Transform:
    """u * factor, written factor * u (the server step eta_g d)."""
    return _stateless(lambda u, ctx: {k: factor * g for k, g in u.items()}, name="scale")
