"""Server side, engine-facing: the functions the engine calls, over the chains of ``algorithm.py``.

Aggregation (``aggregate.py``; Wang et al. 2020, eq. (7)), with the weights w_i of the clients
that reported:
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
Persistent state (control variates, global direction, shared v_hat): ``state.py``.
Equations, choices and citations: docs/algorithms.md.
"""

from __future__ import annotations

import torch

from .algorithm import algorithm
from .spec import AlgoSpec
from .state import RoundUpdate, ServerState

Tensors = dict[str, torch.Tensor]

__all__ = [
    "ServerState",
    "RoundUpdate",
    "server_init",
    "server_apply",
    "client_correction",
]


def server_init(spec: AlgoSpec, params: Tensors) -> ServerState:
    """Zero moments, zero control variates, zero global direction (round 1 of FedCM/FedLADA)."""
    return algorithm(spec).init(params)


def client_correction(spec: AlgoSpec, state: ServerState, client: int, like: Tensors) -> Tensors | None:
    """Additive gradient correction c - c_i for ``client`` (None when the algorithm has none).

    A client never selected so far has c_i = 0 (SCAFFOLD's initialisation).
    """
    return algorithm(spec).correction(state, client, like)


def server_apply(spec: AlgoSpec, params: Tensors, state: ServerState, upd: RoundUpdate) -> tuple[Tensors, ServerState]:
    """One synchronous server update. Pure: returns new params and a new state."""
    return algorithm(spec).server_update(params, state, upd)
