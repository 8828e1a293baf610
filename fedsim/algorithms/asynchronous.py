"""Asynchronous server rules: staleness weights, FedBuff buffers and FedAsync mixing (small frozen values).

Notation: job k downloaded server version v_k, trained tau_k local steps from x^{v_k} and reports
Delta_k = y_k - x^{v_k} (its local model minus the model it started from) with ||a_k||_1 and the
client's weight p_k; s_k = staleness = server updates applied between its download and the update
that uses it; x is the current global model (version v = the update index).

Staleness weights w(s) (Xie et al. 2019, FedAsync, section 5.2; docs/algorithms.md):
    constant:   w(s) = 1
    polynomial: w(s) = (1 + s)^-a                       a = staleness_exponent (FedBuff: a = 0.5)
    hinge:      w(s) = 1 if s <= b else 1 / (a (s - b) + 1)      a = hinge_a, b = hinge_b

FedBuff (Nguyen et al. 2022, Algorithm 1), one server update per K = round.buffer arrivals:
    d = sum_k q_k w(s_k) Delta_k,      q_k = p_k / sum_{j in buffer} p_j
    x <- server_opt(x, d)              (sgd: x += eta_g d, eta_g = server_lr)
  q_k normalises the client weights over the buffer, not over the staleness weights, so stale
  updates shrink the step. With equal p_k this is the paper's (1/K) sum_k w(s_k) Delta_k (the
  buffer sum divided by K); with buffer = concurrency = all clients, equal speeds and no outages
  every buffer holds each client once at staleness 0 and d = sum_i p_i Delta_i: exactly FedAvg's
  ``wait`` round (a plain sum would instead scale FedAvg's step by K).

FedAsync (Xie et al. 2019), one server update per arrival (round.buffer must be 1):
    a_s = mixing * w(s),   x_new = x^{v_k} + Delta_k,   d = a_s (x_new - x),   x <- server_opt(x, d)
  With the preset's server_opt sgd and server_lr 1 this is x <- (1 - a_s) x + a_s x_new.
  (Written for K arrivals as d = mixing sum_k q_k w(s_k) (x_new_k - x); only K = 1 is allowed.)

normalize_async (FedNova's normalization applied to asynchrony): before buffering / mixing,
    Delta_k <- tau_eff Delta_k / ||a_k||_1,
    tau_eff  = sum_j p_j ||a_j||_1 / sum_j p_j  over *every* arrival so far (this update included),
  a running estimate of the expected progress ||a||_1 of a job under the arrival process. Each
  job's update becomes its normalized direction Delta_k / ||a_k||_1 times one common tau_eff, so
  clients doing more local steps no longer pull the model harder (objective inconsistency).
  tau_eff is not the buffer's own mean: with buffer 1 (FedAsync, FedBuff K = 1) that would make
  the normalization the identity. With buffer = all clients and tau_i constant per client (no
  outages, equal speeds) the running mean equals each round's sum_i p_i ||a_i||_1, i.e. FedNova's
  tau_eff in ``wait``. The running sums (sum p ||a||_1, sum p) are server state (checkpointed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .aggregate import weighted_sum
from .algorithm import Algorithm
from .parts import Staleness
from .transforms import bcast

Tensors = dict[str, torch.Tensor]

__all__ = [
    "Staleness", "FedBuff", "FedAsync", "async_rule", "staleness_weight", "Arrivals", "NormState",
    "async_coefficients", "async_apply",
]


@dataclass(frozen=True)
class FedBuff:
    """Nguyen et al. 2022, Algorithm 1: c_k = q_k w(s_k), d = sum_k c_k Delta_k."""

    staleness: Staleness

    def coefficients(self, weights: torch.Tensor, staleness: torch.Tensor) -> torch.Tensor:
        """c_k = q_k w(s_k), q_k = p_k / sum_j p_j (all zero when every p_k is 0), float64."""
        total = float(weights.sum())
        if not total > 0:
            return torch.zeros(len(weights), dtype=torch.float64)
        q = weights.to(torch.float64) / total
        w = torch.tensor([self.staleness(float(s)) for s in staleness], dtype=torch.float64)
        return q * w

    def pseudo_gradient(self, params: Tensors, starts: Tensors | None, deltas: Tensors, coef: torch.Tensor) -> Tensors:
        return {k: weighted_sum(coef, deltas[k]) for k in params}


@dataclass(frozen=True)
class FedAsync:
    """Xie et al. 2019: c_k = mixing q_k w(s_k) (= a_s for one arrival), d = sum_k c_k (x^{v_k} + Delta_k - x)."""

    staleness: Staleness
    mixing: float = 0.6

    def coefficients(self, weights: torch.Tensor, staleness: torch.Tensor) -> torch.Tensor:
        return self.mixing * FedBuff(self.staleness).coefficients(weights, staleness)

    def pseudo_gradient(self, params: Tensors, starts: Tensors | None, deltas: Tensors, coef: torch.Tensor) -> Tensors:
        # the mixing toward the clients' models
        return {k: weighted_sum(coef, starts[k] + deltas[k] - params[k].unsqueeze(0)) for k in params}


def async_rule(alg: Algorithm) -> FedBuff | FedAsync:
    """The asynchronous rule of ``alg`` (``FedBuff`` or ``FedAsync``), its staleness weight the
    rule registered as ``alg.spec.staleness`` (:data:`fedsim.registries.STALENESS`, built once
    with the algorithm: ``alg.staleness``)."""
    spec = alg.spec
    return FedAsync(alg.staleness, spec.mixing) if spec.asynchronous == "fedasync" else FedBuff(alg.staleness)


def staleness_weight(alg: Algorithm, s: int | float) -> float:
    """w(s) of ``alg.spec.staleness`` (built-in: constant | polynomial | hinge) for staleness ``s >= 0``."""
    return alg.staleness(s)


@dataclass(frozen=True)
class Arrivals:
    """The completed jobs of one server update, stacked along dim 0 in processing order."""

    deltas: Tensors  # Delta_k = y_k - x^{v_k}
    starts: Tensors | None  # x^{v_k} (FedAsync only)
    weights: torch.Tensor  # p_k (float64)
    staleness: torch.Tensor  # s_k (float64)
    a_norm: torch.Tensor  # ||a_k||_1 (float64)


@dataclass(frozen=True)
class NormState:
    """Running sums for normalize_async's tau_eff: sum_j p_j ||a_j||_1 and sum_j p_j."""

    pa_sum: float = 0.0
    p_sum: float = 0.0

    def add(self, arr: Arrivals) -> "NormState":
        return NormState(self.pa_sum + float((arr.weights * arr.a_norm).sum()), self.p_sum + float(arr.weights.sum()))

    @property
    def tau_eff(self) -> float:
        return self.pa_sum / self.p_sum if self.p_sum > 0 else 0.0


def async_coefficients(alg: Algorithm, weights: torch.Tensor, staleness: torch.Tensor) -> torch.Tensor:
    """Per-job coefficient c_k (float64): FedBuff q_k w(s_k); FedAsync mixing q_k w(s_k) (= a_s).

    A buffer whose clients all have p_k = 0 gets all-zero coefficients (no change), as a
    synchronous round in which only zero-weight clients reported.
    """
    return async_rule(alg).coefficients(weights, staleness)


def async_apply(
    alg: Algorithm, params: Tensors, opt: Tensors, arr: Arrivals, norm: NormState
) -> tuple[Tensors, Tensors, NormState, torch.Tensor]:
    """One asynchronous server update of ``alg``; returns (params, optimizer state, norm state, c_k)."""
    rule = async_rule(alg)
    coef = rule.coefficients(arr.weights, arr.staleness)
    deltas = arr.deltas
    if alg.spec.normalize_async:
        norm = norm.add(arr)
        scale = norm.tau_eff / arr.a_norm
        deltas = {k: d * bcast(scale.to(device=d.device, dtype=d.dtype), d) for k, d in deltas.items()}
    d = rule.pseudo_gradient(params, arr.starts, deltas, coef)
    new_params, new_opt = alg.server_step(params, d, opt)
    return new_params, new_opt, norm, coef
