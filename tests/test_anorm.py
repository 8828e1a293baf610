"""||a_i||_1, the local progress FedNova normalizes by (Wang et al. 2020, section 4 and table in
docs/algorithms.md, "Progress"), against closed forms and against brute-force coefficient tracking.

Brute force: run the *real* local solver on a linear problem whose gradient at step k is the
basis vector e_k (so it does not depend on x). The solver is linear in its gradients, so after
tau steps Delta = -lr_0 * sum_k a_k e_k: the model itself holds the coefficient vector a.
The expected vectors come either from the closed forms or from an independent numpy recursion of
the documented rule (heavy-ball buffer b <- rho b + g, step u = b + mu (x - x0), optional amended
direction, x <- x - lr_k u).
"""

import math

import numpy as np
import pytest
import torch

from fedsim.algorithms.algorithm import algorithm, masked
from fedsim.engine.train import Task, train_cohort

from _algorithms_helpers import quadratic_work, spec_for

LR = 0.1


def brute_force_a(spec, tau, lr=LR):
    """Coefficient vector a (length tau) of the gradients, by the real solver on basis gradients."""
    x0 = {"w": torch.zeros(1, tau, dtype=torch.float64)}
    x = {"w": x0["w"].clone()}
    st = algorithm(spec).client_init(x)
    direction = None
    if spec.uses_global_direction:  # constant direction: track it in an extra coordinate
        raise AssertionError("use brute_force_a_with_direction")
    for k in range(tau):
        g = torch.zeros(1, tau, dtype=torch.float64)
        g[0, k] = 1.0
        x, st = algorithm(spec).client_step(x, {"w": g}, st, lr * spec.lr_decay**k, x0=x0, direction=direction)
    return (-x["w"][0] / lr).numpy()


def numpy_a(tau, lr=LR, rho=0.0, mu=0.0, gamma=1.0, amend=1.0):
    """Independent recursion of the documented rule over coefficient vectors (numpy).

    Tracks Delta = x - x0 and the momentum buffer as linear combinations of the gradients g_0..;
    with the amended direction D, tracks D's coefficient in an extra last slot.
    """
    d = np.zeros(tau + 1)
    b = np.zeros(tau + 1)
    for k in range(tau):
        g = np.zeros(tau + 1)
        g[k] = 1.0
        b = rho * b + g
        u = b + mu * d
        dvec = np.zeros(tau + 1)
        dvec[tau] = 1.0
        u = amend * u + (1 - amend) * dvec if amend != 1.0 else u
        d = d - lr * gamma**k * u
    a = -d / lr
    return a[:tau], a[tau]


def momentum_closed(rho, tau):
    return (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)


def shadow(spec, tau, lr=LR):
    ratios = [spec.lr_decay**k for k in range(max(tau) if isinstance(tau, list) else tau)]
    steps = tau if isinstance(tau, list) else [tau]
    return algorithm(spec).a_norm(steps, ratios, lr=lr).numpy()


TAUS = [1, 2, 7, 20]


@pytest.mark.parametrize("tau", TAUS)
def test_sgd_is_tau(tau):
    assert shadow(spec_for("fedavg"), tau)[0] == pytest.approx(tau, rel=1e-14)


@pytest.mark.parametrize("rho", [0.5, 0.9])
@pytest.mark.parametrize("tau", TAUS)
def test_momentum_closed_form(rho, tau):
    spec = spec_for("fednova", momentum=rho)
    expected = momentum_closed(rho, tau)
    assert shadow(spec, tau)[0] == pytest.approx(expected, rel=1e-12)
    a = brute_force_a(spec, tau)
    np.testing.assert_allclose(a, [(1 - rho ** (tau - k)) / (1 - rho) for k in range(tau)], rtol=1e-12)
    assert a.sum() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("mu,lr", [(0.1, 0.1), (1.0, 0.05), (4.0, 0.2)])
@pytest.mark.parametrize("tau", TAUS)
def test_prox_closed_form(mu, lr, tau):
    spec = spec_for("fedprox", mu=mu)
    alpha = lr * mu
    expected = (1 - (1 - alpha) ** tau) / alpha
    assert shadow(spec, tau, lr)[0] == pytest.approx(expected, rel=1e-12)
    a = brute_force_a(spec, tau, lr)
    np.testing.assert_allclose(a, [(1 - alpha) ** (tau - 1 - k) for k in range(tau)], rtol=1e-12)


@pytest.mark.parametrize("gamma", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("tau", TAUS)
def test_lr_decay_closed_form(gamma, tau):
    spec = spec_for("fednova", lr_decay=gamma)
    expected = (1 - gamma**tau) / (1 - gamma)
    assert shadow(spec, tau)[0] == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(brute_force_a(spec, tau), [gamma**k for k in range(tau)], rtol=1e-12)


COMBOS = [
    dict(momentum=0.9, mu=0.5),
    dict(momentum=0.5, lr_decay=0.9),
    dict(mu=2.0, lr_decay=0.8),
    dict(momentum=0.7, mu=1.0, lr_decay=0.95),
    dict(momentum=0.9, mu=0.1, lr_decay=0.97, weight_decay=0.3, clip_norm=0.5),
]


@pytest.mark.parametrize("over", COMBOS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
@pytest.mark.parametrize("tau", [1, 3, 12])
def test_combinations_match_brute_force(over, tau):
    spec = spec_for("fednova", **over)
    expected, _ = numpy_a(tau, rho=over.get("momentum", 0.0), mu=over.get("mu", 0.0), gamma=over.get("lr_decay", 1.0))
    assert (expected > 0).all()
    if "weight_decay" not in over and "clip_norm" not in over:
        # the real solver on basis gradients (weight decay / clipping would change the gradients)
        np.testing.assert_allclose(brute_force_a(spec, tau), expected, rtol=1e-12)
    # shadow run: exact, and unaffected by weight decay and clipping (they belong to the gradient)
    assert shadow(spec, tau)[0] == pytest.approx(expected.sum(), rel=1e-12)


def test_prox_with_momentum_is_not_the_reference_code_double_count():
    """FedNova's public code adds the counter *and* 1 per step when both are on; we do not."""
    rho, mu, tau = 0.9, 1.0, 5
    alpha = LR * mu
    vec, counter = 0.0, 0.0
    for _ in range(tau):  # distoptim/FedNova.py
        counter = counter * rho + 1
        vec += counter
        vec = vec * (1 - alpha) + 1
    ours = shadow(spec_for("fednova", momentum=rho, mu=mu), tau)[0]
    expected, _ = numpy_a(tau, rho=rho, mu=mu)
    assert ours == pytest.approx(expected.sum(), rel=1e-12)
    assert abs(ours - vec) > 1.0


@pytest.mark.parametrize("over", [dict(amend=0.1), dict(amend=0.3, momentum=0.5), dict(amend=0.5, mu=1.0)])
def test_amended_direction_counts_like_a_gradient(over):
    """FedCM: ||a||_1 is the progress along a constant direction when every gradient equals D."""
    tau = 6
    spec = spec_for("fedcm", **over)
    a, a_dir = numpy_a(tau, rho=over.get("momentum", 0.0), mu=over.get("mu", 0.0), amend=over["amend"])
    assert shadow(spec, tau)[0] == pytest.approx(a.sum() + a_dir, rel=1e-12)
    if "momentum" not in over and "mu" not in over:
        assert shadow(spec, tau)[0] == pytest.approx(tau, rel=1e-12)


@pytest.mark.parametrize("name", ["localadam", "fedlada"])
def test_adaptive_reports_tau(name):
    spec = spec_for(name)
    np.testing.assert_array_equal(algorithm(spec).a_norm([3, 1, 8], [1.0] * 8), [3.0, 1.0, 8.0])


def test_unequal_steps_in_one_call_and_lr_needed_for_prox():
    spec = spec_for("fednova_prox", mu=1.0, momentum=0.9)
    got = algorithm(spec).a_norm([1, 4, 9], [1.0] * 9, lr=LR).numpy()
    want = [numpy_a(t, rho=0.9, mu=1.0)[0].sum() for t in (1, 4, 9)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="lr"):
        algorithm(spec).a_norm([1], [1.0])


def test_engine_reports_exact_a_norm_and_decayed_steps():
    """train_cohort: a_norm per client (momentum + per-step decay) and Delta of decayed GD."""
    gamma, rho, lr = 0.9, 0.5, 0.05
    work = quadratic_work([[1.0, 2.0], [3.0, -1.0], [0.0, 0.0]])
    spec = spec_for("fednova", momentum=rho, lr_decay=gamma)
    x = {k: v.clone() for k, v in work.init_params.items()}
    tasks = [Task(0, 4, 0), Task(1, 9, 0), Task(2, 1, 0)]
    res = train_cohort(work, algorithm(spec), x, tasks, round_lr=lr, seed=0, chunk=2)
    for row, t in enumerate(tasks):
        assert float(res.a_norm[row]) == pytest.approx(numpy_a(t.steps, lr, rho=rho, gamma=gamma)[0].sum(), rel=1e-12)
    # plain decayed GD on 1/2||x - e||^2 from 0: Delta = (1 - prod_k (1 - lr gamma^k)) e
    spec = spec_for("fednova", lr_decay=gamma)
    res = train_cohort(work, algorithm(spec), x, tasks[:2], round_lr=lr, seed=0, chunk=2)
    for row, t in enumerate(tasks[:2]):
        shrink = math.prod(1 - lr * gamma**k for k in range(t.steps))
        np.testing.assert_allclose(res.deltas["x"][row].numpy(), (1 - shrink) * work.x_train[t.client].numpy(), rtol=1e-13)


def test_masked_freezes_whole_state():
    spec = spec_for("fednova", momentum=0.9)
    x = {"w": torch.ones(2, 3)}
    st = algorithm(spec).client_init(x)
    nx, ns = algorithm(spec).client_step(x, {"w": torch.ones(2, 3)}, st, 0.1)
    mask = torch.tensor([True, False])
    fx, fs = masked(mask, nx, x), masked(mask, ns, st)
    assert torch.equal(fx["w"][1], x["w"][1]) and torch.equal(fs["buf.w"][1], st["buf.w"][1])
    assert torch.equal(fx["w"][0], nx["w"][0]) and torch.equal(fs["buf.w"][0], ns["buf.w"][0])


def test_step_lrs_are_computed_when_read():
    """Issue 12 item 12: no list of every step's lr. Entries equal the stored lists of earlier
    versions bit for bit (lr * gamma**k, and the ratio as the quotient), at any step index."""
    from fedsim.algorithms.lr import StepLrs

    lr, gamma = 0.07, 0.93
    lazy = StepLrs(lr, gamma)
    stored = [lr * gamma**k for k in range(40)]
    assert [lazy[k] for k in range(40)] == stored
    assert [lazy.ratios()[k] for k in range(40)] == [q / lr for q in stored]
    assert lazy[10**12] == lr * gamma ** (10**12) and StepLrs(lr, 1.0)[10**12] == lr
    spec = spec_for("fednova", momentum=0.7, mu=1.0, lr_decay=gamma)
    a = algorithm(spec).a_norm([1, 4, 13, 0, 40], [q / lr for q in stored], lr=lr)
    assert torch.equal(algorithm(spec).a_norm([1, 4, 13, 0, 40], lazy.ratios(), lr=lr), a)
