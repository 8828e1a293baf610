"""Exact fixed points on the quadratic F_i(x) = 1/2 ||x - e_i||^2 (FedNova Lemma 1 and its
generalisations), with unequal tau_i and unequal p_i, float64.

Every linear local solver started at x gives Delta_i = kappa_i (e_i - x) for a scalar kappa_i
computed here by an independent recursion; aggregation with coefficients c_i then has the fixed
point x* = sum c_i kappa_i e_i / sum c_i kappa_i (avg: c_i = p_i; nova: c_i = p_i / ||a_i||_1).
"""

import numpy as np
import pytest

from _algorithms_helpers import fast_run, quadratic_work, run_round, spec_for, start

CENTERS = np.array([[4.0, 0.0], [0.0, 4.0], [-4.0, 1.0], [1.0, -4.0]])
P = np.array([0.1, 0.2, 0.3, 0.4])
TAUS = [1, 3, 6, 10]
OPT = P @ CENTERS


def kappa(tau, lr, rho=0.0, mu=0.0):
    """Delta = kappa (e - x) for tau steps of heavy ball (+ prox outside the buffer) from x."""
    k = b = 0.0  # Delta = k s, buffer = b s, s = e - x; gradient = (k - 1) s
    for _ in range(tau):
        b = rho * b + (k - 1.0)
        k = k - lr * (b + mu * k)
    return k


def a_closed(tau, lr, rho=0.0, mu=0.0):
    if mu:
        alpha = lr * mu
        return (1 - (1 - alpha) ** tau) / alpha
    if rho:
        return (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
    return float(tau)


def fixed_point(lr, nova, rho=0.0, mu=0.0):
    c = np.array([P[i] * kappa(t, lr, rho, mu) / (a_closed(t, lr, rho, mu) if nova else 1.0) for i, t in enumerate(TAUS)])
    return (c @ CENTERS) / c.sum()


def test_kappa_recursion_matches_the_closed_forms():
    # GD: K = 1 - (1-lr)^tau ; prox: K' / (1 + mu), K' = 1 - (1 - lr(1+mu))^tau (docs/algorithms.md)
    assert kappa(7, 0.1) == pytest.approx(1 - 0.9**7, rel=1e-14)
    assert kappa(7, 0.1, mu=0.5) == pytest.approx((1 - (1 - 0.15) ** 7) / 1.5, rel=1e-14)


def test_fedprox_fixed_point_through_the_engine():
    lr, mu = 0.1, 0.5
    work = quadratic_work(CENTERS, P)
    spec = spec_for("fedprox", mu=mu)
    params, state = start(spec, work)
    for r in range(75):
        params, state, _ = run_round(spec, work, params, state, TAUS, lr, key=r)
    k_prime = 1 - (1 - lr * (1 + mu)) ** np.array(TAUS)
    expected = (P * k_prime) @ CENTERS / (P * k_prime).sum()
    np.testing.assert_allclose(params["x"].numpy(), expected, rtol=1e-9)
    assert np.linalg.norm(expected - OPT) > 0.3  # and it is not the optimum


@pytest.mark.parametrize("name,over,rho,mu", [
    ("fedprox", dict(mu=2.0), 0.0, 2.0),
    ("fednova_prox", dict(mu=2.0), 0.0, 2.0),
    ("fedavg", dict(momentum=0.5), 0.5, 0.0),
    ("fednova", dict(momentum=0.5), 0.5, 0.0),
    ("fednova", dict(momentum=0.8, mu=0.3), 0.8, 0.3),
])
def test_fixed_point_exact(name, over, rho, mu):
    lr = 0.03
    x, _ = fast_run(spec_for(name, **over), CENTERS, TAUS, lr, 350, p=P)
    nova = name.startswith("fednova")
    expected = fixed_point(lr, nova, rho, mu)
    if rho and mu:  # combined: the closed forms do not apply; use ||a||_1 from the recursion
        c = []
        for i, t in enumerate(TAUS):
            a = sum(kappa_coeffs(t, lr, rho, mu))
            c.append(P[i] * kappa(t, lr, rho, mu) / a)
        expected = (np.array(c) @ CENTERS) / sum(c)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-9)


def kappa_coeffs(tau, lr, rho, mu):
    """a-vector of heavy ball + prox (numpy recursion over coefficient vectors)."""
    d, b = np.zeros(tau), np.zeros(tau)
    for k in range(tau):
        g = np.zeros(tau)
        g[k] = 1.0
        b = rho * b + g
        d = d - lr * (b + mu * d)
    return -d / lr


@pytest.mark.parametrize("solver,over", [("momentum", dict(momentum=0.5)), ("prox", dict(mu=1.0))])
def test_fednova_error_vanishes_with_lr_fedavg_does_not(solver, over):
    base, nova = ("fedavg", "fednova") if solver == "momentum" else ("fedprox", "fednova_prox")
    err = {}
    for lr, rounds in [(0.04, 120), (0.004, 500)]:
        for name in (base, nova):
            x, _ = fast_run(spec_for(name, **over), CENTERS, TAUS, lr, rounds, p=P)
            err[name, lr] = float(np.linalg.norm(x.numpy() - OPT))
    # FedAvg-style averaging keeps its gap (it weights clients by p_i tau_i) ...
    assert err[base, 0.004] > 1.0
    assert err[base, 0.004] > 0.9 * err[base, 0.04]
    # ... FedNova's error shrinks about linearly with lr
    assert err[nova, 0.004] < err[nova, 0.04] / 5
    assert err[nova, 0.004] < 0.05 * err[base, 0.004]


def test_scaffold_reaches_the_weighted_optimum_with_unequal_steps_and_weights():
    """c = sum_i p_i c_i (the |S|/N mean when p is uniform): the correction vanishes at the
    optimum of sum_i p_i F_i, not of the unweighted mean."""
    x, state = fast_run(spec_for("scaffold"), CENTERS, TAUS, 0.1, 200, p=P)
    np.testing.assert_allclose(x.numpy(), OPT, atol=1e-10)
    c = state.c["x"].numpy()
    c_sum = sum(P[i] * state.c_clients[i]["x"].numpy() for i in range(4))
    np.testing.assert_allclose(c, c_sum, atol=1e-12)
    np.testing.assert_allclose(c, 0.0, atol=1e-9)  # grad F(x*) = 0
    # c_i -> grad F_i(x*) = x* - e_i
    np.testing.assert_allclose(state.c_clients[2]["x"].numpy(), OPT - CENTERS[2], atol=1e-9)
