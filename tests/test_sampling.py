"""Client sampling keeps the aggregated update unbiased (FedNova section 4 / appendix G).

Enumerate every possible sample of q out of m clients with its probability, aggregate each with
the algorithm's ``aggregate`` and the scheme's weights, and compare the expectation with
the full-participation update:
  (i)  q draws with replacement, client i with probability p_i; weight count_i / q;
  (ii) q distinct clients uniformly without replacement; weight p_i * m / q.
FedAvg's update sum_i w_i Delta_i is linear in the weights, so its expectation is exact. FedNova's
update is tau_eff * (normalized direction); each factor is unbiased on its own (the product of two
estimates is not, which the paper's practical rule tau_eff = sum_{i in S} w_i ||a_i||_1 accepts).
"""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from fedsim.algorithms.algorithm import algorithm
from fedsim.algorithms.state import RoundUpdate

from _algorithms_helpers import spec_for

M, Q = 5, 3
RNG = np.random.default_rng(7)
P = RNG.dirichlet(np.ones(M))
DELTAS = RNG.standard_normal((M, 4))
A_NORM = RNG.uniform(1.0, 20.0, M)
TAU = np.ceil(A_NORM)


def without_replacement():
    """[(probability, {client: weight})] for uniform sampling of Q distinct clients."""
    subsets = list(itertools.combinations(range(M), Q))
    return [(1.0 / len(subsets), {i: P[i] * M / Q for i in s}) for s in subsets]


def with_replacement():
    """[(probability, {client: weight})] for Q i.i.d. draws with probabilities P."""
    out = []
    for seq in itertools.product(range(M), repeat=Q):
        prob = math.prod(P[i] for i in seq)
        out.append((prob, {i: c / Q for i, c in Counter(seq).items()}))
    return out


def update(weights: dict[int, float]) -> RoundUpdate:
    idx = sorted(weights)
    return RoundUpdate(
        clients=tuple(idx),
        deltas={"x": torch.tensor(DELTAS[idx])},
        weights=torch.tensor([weights[i] for i in idx], dtype=torch.float64),
        a_norm=torch.tensor(A_NORM[idx]),
        steps=torch.tensor(TAU[idx]),
        lr=0.1,
        num_clients=M,
    )


FULL = {i: P[i] for i in range(M)}


@pytest.mark.parametrize("scheme", [without_replacement, with_replacement])
def test_probabilities_sum_to_one(scheme):
    assert sum(pr for pr, _ in scheme()) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("scheme", [without_replacement, with_replacement])
def test_fedavg_update_is_unbiased(scheme):
    spec = spec_for("fedavg")
    expected = sum(pr * algorithm(spec).aggregate(update(w))["x"].numpy() for pr, w in scheme())
    full = algorithm(spec).aggregate(update(FULL))["x"].numpy()
    np.testing.assert_allclose(expected, full, rtol=1e-12)
    np.testing.assert_allclose(full, P @ DELTAS, rtol=1e-12)


@pytest.mark.parametrize("scheme", [without_replacement, with_replacement])
@pytest.mark.parametrize("tau_eff", ["a_norm", "tau"])
def test_fednova_direction_and_tau_eff_are_unbiased(scheme, tau_eff):
    spec = spec_for("fednova", tau_eff=tau_eff)
    norm = A_NORM if tau_eff == "a_norm" else TAU
    e_dir = np.zeros(4)
    e_tau = 0.0
    for pr, w in scheme():
        t_s = sum(wi * norm[i] for i, wi in w.items())  # the sample's tau_eff, computed here
        e_dir += pr * algorithm(spec).aggregate(update(w))["x"].numpy() / t_s
        e_tau += pr * t_s
    full_tau = P @ norm
    full = algorithm(spec).aggregate(update(FULL))["x"].numpy()
    np.testing.assert_allclose(e_dir, full / full_tau, rtol=1e-12)
    np.testing.assert_allclose(e_dir, (P / A_NORM) @ DELTAS, rtol=1e-12)
    assert e_tau == pytest.approx(full_tau, rel=1e-12)


def test_clock_weights_follow_the_schemes():
    """The clock's raw weights are the ones enumerated above (p_i m / q with ``unbiased``, and
    count / q); ``normalized`` (the default) gives p_i / sum_{j in S} p_j over the same draw."""
    from fedsim.clock.selection import Request, Uniform, Weighted

    online = np.arange(M)

    def select(online, q, scheme, p, seed, key, weights="normalized"):
        rule = Uniform(weights) if scheme == "uniform" else Weighted()
        picked = rule.select(seed, Request(key, 0.0, q, len(p), p, _online=lambda: online))[1]
        return picked.clients, picked.counts, picked.weights

    for r in range(20):
        chosen, counts, weights = select(online, Q, "uniform", P, 0, r, "unbiased")
        assert len(set(chosen)) == Q
        np.testing.assert_allclose(weights, [P[i] * M / Q for i in chosen], rtol=1e-12)
        same, _, normalized = select(online, Q, "uniform", P, 0, r)
        assert same.tolist() == chosen.tolist()
        np.testing.assert_allclose(normalized, [P[i] / sum(P[j] for j in chosen) for i in chosen], rtol=1e-12)
        chosen, counts, weights = select(online, Q, "weighted", P, 0, r)
        assert sum(counts) == Q and len(set(chosen)) == len(chosen)
        np.testing.assert_allclose(weights, [c / Q for c in counts], rtol=1e-12)
