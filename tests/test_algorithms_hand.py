"""Rounds computed by hand (plain numpy, from the equations in docs/algorithms.md) on tiny quadratic
toys F_i(x) = 1/2 ||x - e_i||^2, against the engine path (train_cohort + server_apply).

Two or three rounds each, so that persistent state (server moments, control variates, global
direction, averaged v_hat) is exercised, not only created.
"""

import numpy as np
import pytest

from _algorithms_helpers import quadratic_work, run_round, spec_for, start

E = np.array([[1.0, -0.5, 2.0], [-1.0, 0.25, 3.0]])
P = np.array([0.25, 0.75])
TAU = [2, 3]
LR = 0.1


def local_gd(x, e, tau, lr, corr=0.0, direction=None, amend=1.0):
    """tau GD steps on 1/2||y - e||^2 from x, gradient + corr, optionally amended; returns Delta."""
    y = x.copy()
    for _ in range(tau):
        u = y - e + corr
        if direction is not None:
            u = amend * u + (1 - amend) * direction
        y = y - lr * u
    return y - x


def engine(name, rounds, *, lr=LR, steps=None, weights=None, centers=E, p=P, **over):
    spec = spec_for(name, **over)
    work = quadratic_work(centers, p)
    params, state = start(spec, work)
    for r in range(rounds):
        s = steps[r] if steps is not None and isinstance(steps[0], list) else (steps or TAU)
        params, state, _ = run_round(spec, work, params, state, s, lr, weights=weights, key=r)
    return params["x"].numpy(), state


def avg_delta(x, lr=LR):
    return sum(P[i] * local_gd(x, E[i], TAU[i], lr) for i in range(2))


def test_fedavgm():
    x, v = np.zeros(3), np.zeros(3)
    for _ in range(3):
        d = avg_delta(x)
        v = 0.9 * v + d
        x = x + 1.0 * v
    got, state = engine("fedavgm", 3)
    np.testing.assert_allclose(got, x, rtol=1e-13)
    np.testing.assert_allclose(state.opt["v.x"].numpy(), v, rtol=1e-13)


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedadagrad"])
def test_adaptive_server(name):
    b1, b2, eps, eta_g = 0.9, 0.999, 1e-3, 0.1
    x, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    for _ in range(3):
        d = avg_delta(x)
        m = b1 * m + (1 - b1) * d
        if name == "fedadam":
            v = b2 * v + (1 - b2) * d**2
        elif name == "fedyogi":
            v = v - (1 - b2) * d**2 * np.sign(v - d**2)
        else:
            v = v + d**2
        x = x + eta_g * m / (np.sqrt(v) + eps)
    got, state = engine(name, 3)
    np.testing.assert_allclose(got, x, rtol=1e-12)
    np.testing.assert_allclose(state.opt["m.x"].numpy(), m, rtol=1e-12)
    np.testing.assert_allclose(state.opt["v.x"].numpy(), v, rtol=1e-12)


def test_fedcm():
    alpha = 0.1
    x, D = np.zeros(3), np.zeros(3)  # Delta^1 = 0
    k_mean = P @ TAU  # average steps (plain SGD: ||a_i||_1 = tau_i)
    for _ in range(3):
        d = sum(P[i] * local_gd(x, E[i], TAU[i], LR, direction=D, amend=alpha) for i in range(2))
        x_new = x + d
        D = (x - x_new) / (k_mean * LR)
        x = x_new
    got, state = engine("fedcm", 3)
    np.testing.assert_allclose(got, x, rtol=1e-13)
    np.testing.assert_allclose(state.direction["x"].numpy(), D, rtol=1e-13)


def _amsgrad_round(x, vhat0, lr, b1=0.9, b2=0.999, alpha=1.0, ga=None):
    deltas, vhats = [], []
    for i in range(2):
        y, m, v, vhat = x.copy(), np.zeros(3), np.zeros(3), vhat0.copy()
        for _ in range(TAU[i]):
            g = y - E[i]
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            vhat = np.maximum(vhat, v)
            u = m / np.sqrt(vhat)
            if ga is not None:
                u = alpha * u + (1 - alpha) * ga
            y = y - lr * u
        deltas.append(y - x)
        vhats.append(vhat)
    return deltas, vhats


@pytest.mark.parametrize("name", ["localadam", "fedlada"])
def test_local_amsgrad(name):
    lr, alpha = 0.01, 0.05
    x, vhat = np.zeros(3), np.full(3, 1e-8)  # v_hat^0 = eps_v^2 = 1e-8
    ga = np.zeros(3) if name == "fedlada" else None
    for _ in range(3):
        deltas, vhats = _amsgrad_round(x, vhat, lr, alpha=alpha, ga=ga)
        d = P[0] * deltas[0] + P[1] * deltas[1]
        vhat = P[0] * vhats[0] + P[1] * vhats[1]  # server averages the clients' v_hat
        if ga is not None:
            ga = -d / (LR_STEPS_MEAN * lr)
        x = x + d
    got, state = engine(name, 3, lr=lr)
    np.testing.assert_allclose(got, x, rtol=1e-12)
    np.testing.assert_allclose(state.vhat["x"].numpy(), vhat, rtol=1e-12)
    if ga is not None:
        np.testing.assert_allclose(state.direction["x"].numpy(), ga, rtol=1e-12)


LR_STEPS_MEAN = P @ TAU


E3 = np.array([[1.0, 0.0], [0.0, 2.0], [-3.0, 1.0]])
TAU3 = [2, 3, 4]


def test_scaffold_partial_participation():
    """Option II, three clients, two per round; the left-out client keeps its c_i."""
    n = 3
    x, c = np.zeros(2), np.zeros(2)
    ci = [np.zeros(2) for _ in range(n)]
    schedule = [[0, 1], [1, 2], [0, 2], [0, 1]]
    for S in schedule:
        dys, dcs = [], []
        for i in S:
            dy = local_gd(x, E3[i], TAU3[i], LR, corr=c - ci[i])
            new_ci = ci[i] - c + (-dy) / (TAU3[i] * LR)
            dys.append(dy)
            dcs.append(new_ci - ci[i])
            ci[i] = new_ci
        x = x + 1.0 * np.mean(dys, axis=0)
        c = c + (len(S) / n) * np.mean(dcs, axis=0)
    steps = [[TAU3[i] if i in S else 0 for i in range(n)] for S in schedule]
    got, state = engine("scaffold", len(schedule), steps=steps, weights=[0.5] * n, centers=E3, p=None)
    np.testing.assert_allclose(got, x, rtol=1e-13)
    np.testing.assert_allclose(state.c["x"].numpy(), c, rtol=1e-13)
    for i in range(n):
        np.testing.assert_allclose(state.c_clients[i]["x"].numpy(), ci[i], rtol=1e-13)


def test_vrlsgd_with_unequal_steps():
    """Liang et al. 2019 with tau_i: Delta_i += (xhat - y_i)/(tau_i lr), local gradient g - Delta_i."""
    n = 3
    x = np.zeros(2)
    dl = [np.zeros(2) for _ in range(n)]
    for _ in range(3):
        ys = [x + local_gd(x, E3[i], TAU3[i], LR, corr=-dl[i]) for i in range(n)]
        xhat = np.mean(ys, axis=0)
        for i in range(n):
            dl[i] = dl[i] + (xhat - ys[i]) / (TAU3[i] * LR)
        x = xhat
    got, state = engine("vrlsgd", 3, steps=TAU3, centers=E3, p=None)
    np.testing.assert_allclose(got, x, rtol=1e-13)
    for i in range(n):
        np.testing.assert_allclose(state.c_clients[i]["x"].numpy(), dl[i], rtol=1e-13)


def test_vrlsgd_equals_scaffold_with_equal_steps():
    a, _ = engine("vrlsgd", 4, steps=[3, 3, 3], centers=E3, p=None)
    b, _ = engine("scaffold", 4, steps=[3, 3, 3], centers=E3, p=None)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_fednova_vr_with_momentum():
    """FedNova appendix H (Algorithm 2): momentum SGD, correction c - c_i, c_i the client's last
    normalized gradient (corrections excluded), FedNova aggregation."""
    rho, n = 0.5, 3
    p = np.array([0.2, 0.3, 0.5])
    a = [(t - rho * (1 - rho**t) / (1 - rho)) / (1 - rho) for t in TAU3]
    x, c = np.zeros(2), np.zeros(2)
    ci = [np.zeros(2) for _ in range(n)]
    for _ in range(3):
        deltas = []
        for i in range(n):
            y, b = x.copy(), np.zeros(2)
            for _ in range(TAU3[i]):
                b = rho * b + (y - E3[i] + c - ci[i])
                y = y - LR * b
            deltas.append(y - x)
        tau_eff = p @ a
        x = x + tau_eff * sum(p[i] * deltas[i] / a[i] for i in range(n))
        ci = [-deltas[i] / (LR * a[i]) - (c - ci[i]) for i in range(n)]
        c = sum(p[i] * ci[i] for i in range(n))
    got, state = engine("fednova_vr", 3, steps=TAU3, centers=E3, p=p, momentum=rho)
    np.testing.assert_allclose(got, x, rtol=1e-12)
    np.testing.assert_allclose(state.c["x"].numpy(), c, rtol=1e-12)


def test_fednova_hybrid_momentum_buffer_in_gradient_units_across_a_milestone():
    """FedNova's hybrid momentum (paper section 5; official code distoptim/FedNova.py ``average``):
    b = beta b + d / eta_t, x += eta_t b, with the local lr eta_t dropping 10x at round 2. FedAvgM
    on the same rounds keeps Flower's v = beta v + d, which ignores eta_t (issue 12 item 20)."""
    beta, lrs = 0.9, [0.1, 0.1, 0.01, 0.01]
    p = np.array([0.2, 0.3, 0.5])
    x, b = np.zeros(2), np.zeros(2)
    xm, v = np.zeros(2), np.zeros(2)
    for eta in lrs:
        deltas = [local_gd(x, E3[i], TAU3[i], eta) for i in range(3)]
        d = (p @ TAU3) * sum(p[i] * deltas[i] / TAU3[i] for i in range(3))
        b = beta * b + d / eta
        x = x + eta * b
        dm = sum(p[i] * local_gd(xm, E3[i], TAU3[i], eta) for i in range(3))
        v = beta * v + dm
        xm = xm + v
    for name, want, buf in (("fednova", x, b * lrs[-1]), ("fedavgm", xm, v)):
        over = {"server_momentum": beta} if name == "fednova" else {}
        spec = spec_for(name, **over)
        work = quadratic_work(E3, p)
        params, state = start(spec, work)
        for r, eta in enumerate(lrs):
            params, state, _ = run_round(spec, work, params, state, TAU3, eta, key=r)
        np.testing.assert_allclose(params["x"].numpy(), want, rtol=1e-13, err_msg=name)
        np.testing.assert_allclose(state.opt["v.x"].numpy(), buf, rtol=1e-13, err_msg=name)
    # the rules differ after the milestone (and only then)
    assert np.linalg.norm(x - xm) > 1e-3
