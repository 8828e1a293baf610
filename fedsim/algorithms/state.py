"""The server's explicit state and the persistent per-round rules (pure; docs/algorithms.md).

    scaffold / nova_vr (Karimireddy et al. 2020 option II; FedNova appendix H):
        c_i+ = c_i - c + (x - y_i) / (eta ||a_i||_1)       (= tau_i eta for plain SGD)
        c   += sum_{i in S} p_i (c_i+ - c_i)                 keeps c = sum_i p_i c_i exactly;
                                                             p_i = 1/N gives the paper's |S|/N mean
    vrlsgd (Liang et al. 2019), per-client Delta_i (local gradient g - Delta_i):
        Delta_i += (xhat - y_i) / (eta ||a_i||_1),  xhat = x + d  (the averaged model)
    fedcm / lada: D = -d / (eta * sum_i w_i ||a_i||_1): the clients' average change per unit of
        local progress (per step for SGD); the next round's local direction (0 in round 1).
    share_vhat: v_hat = sum_i w_i v_hat_i / sum_i w_i over the clients that reported.
    error feedback (docs/compression.md): e_i' = Delta_i + e_i - C(Delta_i + e_i), kept per client.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .aggregate import weighted_sum

Tensors = dict[str, torch.Tensor]

__all__ = ["ServerState", "RoundUpdate", "update_control_variates", "global_direction", "shared_vhat"]


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
    #: error feedback's residuals e_i by client (``algorithm.compression.error_feedback``; client
    #: state like c_i, set by the engine when it compresses the uploads, docs/compression.md)
    residuals: dict[int, Tensors] = field(default_factory=dict)


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
    #: the clients' own changes y_i - x before uplink compression (``deltas`` is what the server
    #: received); None when the uploads are not compressed. Control-variate rules read these.
    raw_deltas: Tensors | None = None

    def as_computed_by_clients(self) -> "RoundUpdate":
        """This update with ``deltas`` = the clients' own uncompressed changes (itself when the
        uploads were not compressed): what a client computes its control variate from."""
        return self if self.raw_deltas is None else replace(self, deltas=self.raw_deltas)


def global_direction(upd: RoundUpdate, d: Tensors) -> Tensors:
    """FedCM Delta^t / FedLADA g_a: D = -d / (eta sum_i w_i ||a_i||_1)."""
    k_eff = float((upd.weights * upd.a_norm).sum())
    return {k: -v / (k_eff * upd.lr) for k, v in d.items()}


def shared_vhat(upd: RoundUpdate) -> Tensors:
    """The weighted mean of the reporting clients' final AMSGrad v_hat."""
    return {k: weighted_sum(upd.weights, v) / float(upd.weights.sum()) for k, v in upd.vhat.items()}


def update_control_variates(st: ServerState, upd: RoundUpdate, d: Tensors, vrlsgd: bool) -> ServerState:
    """New c and c_i after a round: SCAFFOLD option II (also FedNova-VR), or VRL-SGD's Delta_i."""
    c_clients = dict(st.c_clients)
    eta = upd.lr

    def old(i: int) -> Tensors:
        ci = c_clients.get(i)
        return ci if ci is not None else {k: torch.zeros_like(v) for k, v in st.c.items()}

    if vrlsgd:
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
