"""Server side: aggregation (FedAvg / FedNova) and server optimizers as pure (init, apply).

``server_apply`` takes the round's client updates and the explicit :class:`ServerState` and
returns new global parameters and a new state; nothing is hidden in objects.

Aggregation (Wang et al. 2020, eq. (7)), with the weights w_i of the clients that reported:
    avg:  d = sum_i w_i Delta_i
    nova: d = tau_eff * sum_i w_i Delta_i / ||a_i||_1,   tau_eff = sum_i w_i ||a_i||_1 (or tau_i)
Server optimizer on the pseudo-gradient d (Reddi et al. 2021; Hsu et al. 2019), no bias correction:
    sgd:      x += eta_g d
    momentum: v = beta v + d;            x += eta_g v       (avg: FedAvgM, Hsu et al. 2019)
              v = beta (eta_t / eta_{t-1}) v + d; x += eta_g v  (nova: FedNova's hybrid momentum,
              the buffer b = v / eta_t kept in gradient units: b = beta b + d / eta_t, x += eta_g eta_t b;
              eta_t the round's local lr, so the two rules differ only after an lr change)
    adam:     m = b1 m + (1-b1) d; v = b2 v + (1-b2) d^2;                 x += eta_g m/(sqrt(v)+eps)
    yogi:     m as adam; v = v - (1-b2) d^2 sign(v - d^2);               x += eta_g m/(sqrt(v)+eps)
    adagrad:  m as adam; v = v + d^2;                                      x += eta_g m/(sqrt(v)+eps)
Persistent state (the clients' part is kept here too, keyed by client, for simulation):
    scaffold / nova_vr (Karimireddy et al. 2020 option II; FedNova appendix H):
        c_i+ = c_i - c + (x - y_i) / (eta ||a_i||_1)       (= tau_i eta for plain SGD)
        c   += sum_{i in S} p_i (c_i+ - c_i)                 keeps c = sum_i p_i c_i exactly;
                                                             p_i = 1/N gives the paper's |S|/N mean
    vrlsgd (Liang et al. 2019), per-client Delta_i (local gradient g - Delta_i):
        Delta_i += (xhat - y_i) / (eta ||a_i||_1),  xhat = x + d  (the averaged model)
    fedcm / lada: D = -d / (eta * sum_i w_i ||a_i||_1): the clients' average change per unit of
        local progress (per step for SGD); the next round's local direction (0 in round 1).
    share_vhat: v_hat = sum_i w_i v_hat_i / sum_i w_i over the clients that reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .spec import AlgoSpec

Tensors = dict[str, torch.Tensor]

__all__ = [
    "ServerState",
    "RoundUpdate",
    "server_init",
    "server_apply",
    "server_opt_apply",
    "client_correction",
    "aggregate",
]


@dataclass(frozen=True)
class ServerState:
    """Everything the server (and, for simulation, the clients' persistent state) carries."""

    opt: Tensors = field(default_factory=dict)  # server optimizer moments
    c: Tensors | None = None  # SCAFFOLD / FedNova-VR global control variate (VRL-SGD: stays 0)
    c_clients: dict[int, Tensors] = field(default_factory=dict)  # client control variates c_i
    direction: Tensors | None = None  # FedCM Delta^t / FedLADA g_a
    vhat: Tensors | None = None  # averaged AMSGrad v_hat (LocalAdam, FedLADA)
    version: int = 0
    lr: float | None = None  # local lr of the last round with reports (FedNova hybrid momentum)


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
    client_p: dict[int, float] = field(default_factory=dict)  # p_i of every client (default 1/N)
    vhat: Tensors | None = None  # clients' final v_hat (AMSGrad)


def _wsum(w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return torch.tensordot(w.to(device=t.device, dtype=t.dtype), t, dims=1)


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
    """Zero moments, zero control variates, zero global direction (round 1 of FedCM/FedLADA)."""

    def zeros() -> Tensors:
        return {k: torch.zeros_like(v) for k, v in params.items()}

    opt: Tensors = {}
    if spec.server_opt == "momentum":
        opt = {"v." + k: t for k, t in zeros().items()}
    elif spec.server_opt in ("adam", "yogi", "adagrad"):
        opt = {"m." + k: t for k, t in zeros().items()}
        opt.update({"v." + k: t for k, t in zeros().items()})
    c = zeros() if spec.uses_control_variates else None
    direction = zeros() if spec.uses_global_direction else None
    return ServerState(opt=opt, c=c, direction=direction)


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
    """Additive gradient correction c - c_i for ``client`` (None when the algorithm has none).

    A client never selected so far has c_i = 0 (SCAFFOLD's initialisation).
    """
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
    opt = state.opt
    if spec.aggregation == "nova" and spec.server_opt == "momentum" and state.lr is not None and upd.lr != state.lr:
        opt = {k: v * (upd.lr / state.lr) for k, v in opt.items()}  # buffer in gradient units
    new_params, opt = server_opt_apply(spec, params, d, opt)
    new = replace(state, opt=opt, version=state.version + 1, lr=upd.lr)
    if spec.uses_control_variates:
        new = _update_control_variates(spec, new, upd, d)
    if spec.uses_global_direction:
        k_eff = float((upd.weights * upd.a_norm).sum())
        new = replace(new, direction={k: -d[k] / (k_eff * upd.lr) for k in params})
    if spec.share_vhat and upd.vhat is not None:
        new = replace(new, vhat={k: _wsum(upd.weights, v) / float(upd.weights.sum()) for k, v in upd.vhat.items()})
    return new_params, new


def _update_control_variates(spec: AlgoSpec, st: ServerState, upd: RoundUpdate, d: Tensors) -> ServerState:
    c_clients = dict(st.c_clients)
    eta = upd.lr

    def old(i: int) -> Tensors:
        ci = c_clients.get(i)
        return ci if ci is not None else {k: torch.zeros_like(v) for k, v in st.c.items()}

    if spec.correction == "vrlsgd":
        # VRL-SGD (Liang et al. 2019, Alg. 1) with tau_i in place of the common period k, as in
        # FedNova's Fig. 2: Delta_i += (xhat - y_i) / (k eta), xhat - y_i = d - Delta y_i.
        for row, i in enumerate(upd.clients):
            ci, scale = old(i), 1.0 / (eta * float(upd.a_norm[row]))
            c_clients[i] = {k: ci[k] + (d[k] - upd.deltas[k][row]) * scale for k in st.c}
        return replace(st, c_clients=c_clients)
    # SCAFFOLD option II; FedNova-VR is the same rule (c_i = the normalized gradient d_i of the
    # client's last round, corrections excluded) under FedNova aggregation.
    c = {k: v.clone() for k, v in st.c.items()}
    for row, i in enumerate(upd.clients):
        ci, scale = old(i), 1.0 / (eta * float(upd.a_norm[row]))
        ci_new = {k: ci[k] - st.c[k] - upd.deltas[k][row] * scale for k in st.c}
        p_i = upd.client_p.get(i, 1.0 / upd.num_clients)
        for k in c:
            c[k] = c[k] + p_i * (ci_new[k] - ci[k])
        c_clients[i] = ci_new
    return replace(st, c=c, c_clients=c_clients)
