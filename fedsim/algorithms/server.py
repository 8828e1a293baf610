"""Server side: aggregation (FedAvg / FedNova) and server optimizers as pure (init, apply).

``apply`` takes the round's client updates and the explicit :class:`ServerState` and returns
new global parameters and a new state; nothing is hidden in objects.

Aggregation (Wang et al. 2020, eq. (7)), with weights w_i of the clients that reported:
    avg:  d = sum_i w_i Delta_i
    nova: d = tau_eff * sum_i w_i Delta_i / ||a_i||_1,   tau_eff = sum_i w_i ||a_i||_1 (or tau_i)
Server optimizer on the pseudo-gradient d (Reddi et al. 2021; Hsu et al. 2019):
    sgd:      x += eta_g d
    momentum: v = beta v + d;            x += eta_g v
    adam:     m = b1 m + (1-b1) d; v = b2 v + (1-b2) d^2;                 x += eta_g m/(sqrt(v)+eps)
    yogi:     m as adam; v = v - (1-b2) d^2 sign(v - d^2);               x += eta_g m/(sqrt(v)+eps)
    adagrad:  m as adam; v = v + d^2;                                      x += eta_g m/(sqrt(v)+eps)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .spec import AlgoSpec

Tensors = dict[str, torch.Tensor]

__all__ = ["ServerState", "RoundUpdate", "server_init", "server_apply", "client_correction", "aggregate"]


@dataclass(frozen=True)
class ServerState:
    """Everything the server (and, for simulation, the clients' persistent state) carries."""

    opt: Tensors = field(default_factory=dict)  # server optimizer moments
    c: Tensors | None = None  # SCAFFOLD / VRL-SGD / FedNova-VR global control variate
    c_clients: dict[int, Tensors] = field(default_factory=dict)  # client control variates c_i
    direction: Tensors | None = None  # FedCM Delta^t / FedLADA g_a
    vhat: Tensors | None = None  # averaged AMSGrad v_hat (LocalAdam, FedLADA)
    version: int = 0


@dataclass(frozen=True)
class RoundUpdate:
    """What the clients of one round reported (stacked along dim 0, one row per client)."""

    clients: tuple[int, ...]
    deltas: Tensors
    weights: torch.Tensor  # w_i (float64), after redistributing non-reporting clients' weight
    a_norm: torch.Tensor  # ||a_i||_1 (float64)
    steps: torch.Tensor  # tau_i (float64)
    lr: float  # local lr at the start of the round
    num_clients: int  # N, all clients
    client_p: dict[int, float] = field(default_factory=dict)  # p_i of every client (nova_vr)
    vhat: Tensors | None = None  # clients' final v_hat (AMSGrad)


def _wsum(w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return torch.tensordot(w.to(t.dtype), t, dims=1)


def aggregate(spec: AlgoSpec, upd: RoundUpdate) -> Tensors:
    """The aggregated model change d (before the server optimizer)."""
    w = upd.weights
    if spec.aggregation == "nova":
        norm = upd.steps if spec.tau_eff == "tau" else upd.a_norm
        tau_eff = float((w * norm).sum())
        coef = w * tau_eff / upd.a_norm
        return {k: _wsum(coef, d) for k, d in upd.deltas.items()}
    return {k: _wsum(w, d) for k, d in upd.deltas.items()}


def server_init(spec: AlgoSpec, params: Tensors) -> ServerState:
    z = {k: torch.zeros_like(v) for k, v in params.items()}
    opt: Tensors = {}
    if spec.server_opt == "momentum":
        opt = {"v." + k: t.clone() for k, t in z.items()}
    elif spec.server_opt in ("adam", "yogi", "adagrad"):
        opt = {"m." + k: t.clone() for k, t in z.items()}
        opt.update({"v." + k: t.clone() for k, t in z.items()})
    c = {k: t.clone() for k, t in z.items()} if spec.uses_control_variates else None
    return ServerState(opt=opt, c=c)


def server_opt_apply(spec: AlgoSpec, params: Tensors, d: Tensors, opt: Tensors) -> tuple[Tensors, Tensors]:
    """Apply the server optimizer to pseudo-gradient ``d``; returns (params, opt state)."""
    lr = spec.server_lr
    if spec.server_opt == "sgd":
        return {k: params[k] + lr * d[k] for k in params}, opt
    if spec.server_opt == "momentum":
        v = {k: spec.server_momentum * opt["v." + k] + d[k] for k in params}
        return {k: params[k] + lr * v[k] for k in params}, {"v." + k: v[k] for k in params}
    b1, b2 = spec.server_betas
    new_opt: Tensors = {}
    out: Tensors = {}
    for k in params:
        m = b1 * opt["m." + k] + (1 - b1) * d[k]
        v_old, d2 = opt["v." + k], d[k] * d[k]
        if spec.server_opt == "adam":
            v = b2 * v_old + (1 - b2) * d2
        elif spec.server_opt == "yogi":
            v = v_old - (1 - b2) * d2 * torch.sign(v_old - d2)
        else:  # adagrad
            v = v_old + d2
        new_opt["m." + k], new_opt["v." + k] = m, v
        out[k] = params[k] + lr * m / (v.sqrt() + spec.server_eps)
    return out, new_opt


def client_correction(spec: AlgoSpec, state: ServerState, client: int, like: Tensors) -> Tensors | None:
    """Additive gradient correction c - c_i for ``client`` (None when the algorithm has none)."""
    if not spec.uses_control_variates:
        return None
    ci = state.c_clients.get(client)
    if ci is None:
        return {k: state.c[k].clone() for k in like}
    return {k: state.c[k] - ci[k] for k in like}


def server_apply(spec: AlgoSpec, params: Tensors, state: ServerState, upd: RoundUpdate) -> tuple[Tensors, ServerState]:
    """One synchronous server update. Pure: returns new params and a new state."""
    if len(upd.clients) == 0:
        return params, replace(state, version=state.version + 1)
    d = aggregate(spec, upd)
    new_params, opt = server_opt_apply(spec, params, d, state.opt)
    new = replace(state, opt=opt, version=state.version + 1)
    if spec.uses_control_variates:
        new = _update_control_variates(spec, new, upd)
    if spec.uses_global_direction:
        k_mean = float((upd.weights * upd.steps).sum())
        new = replace(
            new,
            direction={k: (params[k] - new_params[k]) / (k_mean * upd.lr) for k in params},
        )
    if spec.share_vhat and upd.vhat is not None:
        new = replace(new, vhat={k: _wsum(upd.weights, v) / upd.weights.sum() for k, v in upd.vhat.items()})
    return new_params, new


def _update_control_variates(spec: AlgoSpec, st: ServerState, upd: RoundUpdate) -> ServerState:
    c_clients = dict(st.c_clients)
    eta = upd.lr
    if spec.correction == "nova_vr":
        # FedNova Appendix H: c_i = d_i^{t-1}, d_i = -Delta_i / (eta ||a_i||_1); c = sum_j p_j d_j.
        for row, i in enumerate(upd.clients):
            c_clients[i] = {k: -d[row] / (eta * upd.a_norm[row].item()) for k, d in upd.deltas.items()}
        c = {k: sum(upd.client_p[j] * ci[k] for j, ci in c_clients.items()) for k in st.c}
        return replace(st, c=c, c_clients=c_clients)
    # SCAFFOLD option II: c_i+ = c_i - c + (x - y_i) / (K_i eta); VRL-SGD assumes one K for all.
    k_common = float(upd.steps.mean())
    dc_sum = {k: torch.zeros_like(v) for k, v in st.c.items()}
    for row, i in enumerate(upd.clients):
        ci = c_clients.get(i) or {k: torch.zeros_like(v) for k, v in st.c.items()}
        k_i = upd.a_norm[row].item() if spec.correction == "scaffold" else k_common
        ci_new = {k: ci[k] - st.c[k] - upd.deltas[k][row] / (k_i * eta) for k in st.c}
        for k in st.c:
            dc_sum[k] += ci_new[k] - ci[k]
        c_clients[i] = ci_new
    n_s = len(upd.clients)
    c = {k: st.c[k] + (n_s / upd.num_clients) * dc_sum[k] / n_s for k in st.c}
    return replace(st, c=c, c_clients=c_clients)
