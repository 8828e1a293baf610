"""FedDyn (Acar et al. 2021, Algorithm 1) written outside the package from fedsim's public parts
(a Correction, a server-optimizer Transform, a preset), run through the engine's own round
(``engine.run.train_and_apply``) and checked against an independent numpy transcription of the
paper's algorithm on F_i(x) = 1/2 ||x - e_i||^2 with exact gradients, unequal local steps, two
rounds. Tolerance 1e-12 relative (float64): the two compute the same sums in the same order
except the server's mean (a tensordot over clients against numpy's pairwise mean)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from fedsim.algorithms import transforms as T
from fedsim.algorithms.parts import Correction, ServerOpt
from fedsim.algorithms.spec import resolve
from fedsim.registries import ALGORITHMS, CORRECTIONS, SERVER_OPTS
from fedsim.scenario import AlgorithmConfig

from _algorithms_helpers import quadratic_work, run_round, start

ALPHA, LR = 0.2, 0.1
CENTERS = [[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]]
STEPS = [[2, 1, 3], [1, 3, 2]]


def memory_correction(state, client, like):
    g = state.c_clients.get(client)
    return {k: torch.zeros_like(v) for k, v in like.items()} if g is None else {k: -g[k] for k in like}


def memory_update(state, upd, d, spec):
    mem = dict(state.c_clients)
    for row, i in enumerate(upd.clients):
        old = mem.get(i)
        mem[i] = {k: (0 if old is None else old[k]) - spec.mu * upd.deltas[k][row] for k in upd.deltas}
    return replace(state, c_clients=mem)


def feddyn_server(spec):
    alpha = spec.mu

    def init(params, vhat0=None):
        return {"h." + k: torch.zeros_like(v) for k, v in params.items()}

    def update(d, state, ctx):
        upd = ctx.update
        h = {k: state["h." + k] - alpha * upd.deltas[k].sum(0) / upd.num_clients for k in d}
        return {k: upd.deltas[k].mean(0) - h[k] / alpha for k in d}, {"h." + k: h[k] for k in d}

    return T.Transform(init, update, name="feddyn_server")


@pytest.fixture
def feddyn():
    CORRECTIONS.register("feddyn_t", Correction(before=lambda spec: [T.add_correction()], client=memory_correction,
                                                server=memory_update, needs="linear"))
    SERVER_OPTS.register("feddyn_t", ServerOpt(feddyn_server))
    ALGORITHMS.register("feddyn_t", {"correction": "feddyn_t", "server_opt": "feddyn_t", "mu": ALPHA})
    yield resolve(AlgorithmConfig(name="feddyn_t", lr=LR, batch_size=1))
    for reg in (ALGORITHMS, CORRECTIONS, SERVER_OPTS):
        reg.unregister("feddyn_t")


def reference(e: np.ndarray, rounds, lr: float, alpha: float):
    """Acar et al. 2021, Algorithm 1 (full participation), local SGD on the dynamic-regularized objective."""
    m, dim = e.shape
    theta, h, g = np.zeros(dim), np.zeros(dim), np.zeros((m, dim))
    for steps in rounds:
        thetas = np.zeros((m, dim))
        for i in range(m):
            th = theta.copy()
            for _ in range(steps[i]):
                grad = th - e[i]
                th = th - lr * (grad - g[i] + alpha * (th - theta))
            thetas[i] = th
        g = g - alpha * (thetas - theta)
        h = h - alpha * (thetas - theta).sum(0) / m
        theta = thetas.mean(0) - h / alpha
    return theta, g, h


def test_feddyn_two_rounds_match_the_paper(feddyn):
    work = quadratic_work(CENTERS)
    params, state = start(feddyn, work)
    for r, steps in enumerate(STEPS):
        params, state, _ = run_round(feddyn, work, params, state, steps, LR, key=r)
    theta, g, h = reference(np.asarray(CENTERS), STEPS, LR, ALPHA)
    np.testing.assert_allclose(params["x"].numpy(), theta, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(state.opt["h.x"].numpy(), h, rtol=1e-12, atol=1e-15)
    for i in range(3):
        np.testing.assert_allclose(state.c_clients[i]["x"].numpy(), g[i], rtol=1e-12, atol=1e-15)


def test_feddyn_with_unequal_client_sizes_still_averages_plainly(feddyn):
    """Issue 28: clients of 10, 25 and 40 samples (p_i = n_i / n) aggregate a weighted d; FedDyn's
    server takes the plain mean of the models, as Algorithm 1 (the reference ignores p_i)."""
    sizes = np.array([10.0, 25.0, 40.0])
    work = quadratic_work(CENTERS, weights=sizes / sizes.sum())
    params, state = start(feddyn, work)
    for r, steps in enumerate(STEPS):
        params, state, _ = run_round(feddyn, work, params, state, steps, LR, key=r)
    theta, _, h = reference(np.asarray(CENTERS), STEPS, LR, ALPHA)
    np.testing.assert_allclose(params["x"].numpy(), theta, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(state.opt["h.x"].numpy(), h, rtol=1e-12, atol=1e-15)


def test_the_docs_feddyn_is_the_plain_mean():
    """docs/extending.md's example server optimizer is this file's (the paper's plain mean)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    assert "return {k: upd.deltas[k].mean(0) - h[k] / alpha for k in d}" in text
    assert "return {k: d[k] - h[k] / alpha" not in text


def test_feddyn_one_round_by_hand(feddyn):
    """One round, one step each, from 0: theta_i = lr e_i (the correction and prox are 0 at the
    start); h = -alpha lr mean(e); theta = lr mean(e) + lr mean(e) = 2 lr mean(e)."""
    work = quadratic_work(CENTERS)
    params, state = start(feddyn, work)
    params, state, _ = run_round(feddyn, work, params, state, [1, 1, 1], LR)
    mean = np.mean(CENTERS, axis=0)
    np.testing.assert_allclose(params["x"].numpy(), 2 * LR * mean, rtol=1e-14)
    np.testing.assert_allclose(state.opt["h.x"].numpy(), -ALPHA * LR * mean, rtol=1e-14)


def test_feddyn_composes_with_fednova_and_momentum(feddyn):
    """The same user parts with FedNova's normalization and local momentum, by naming them."""
    spec = resolve(AlgorithmConfig(name="feddyn_t", lr=LR, batch_size=1, aggregation="nova", momentum=0.5))
    assert (spec.aggregation, spec.momentum, spec.correction) == ("nova", 0.5, "feddyn_t")
    work = quadratic_work(CENTERS)
    params, state = start(spec, work)
    params, state, res = run_round(spec, work, params, state, [2, 1, 3], LR)
    assert torch.isfinite(params["x"]).all()
    # a_norm of momentum 0.5 with prox mu: the shadow run of the same chain, not tau_i
    assert not torch.equal(res.a_norm, res.steps)


def test_a_registered_solver_whose_state_changes_shape_is_one_line_before_the_run():
    from fedsim.algorithms.algorithm import Algorithm
    from fedsim.algorithms.parts import Solver
    from fedsim.errors import ScenarioError
    from fedsim.registries import SOLVERS

    def leaky(spec):
        return [T.Transform(lambda p, v=None: {"n." + k: torch.zeros(1) for k in p},
                            lambda u, s, ctx: (u, {k: torch.cat([t, t]) for k, t in s.items()}), name="leaky")]

    SOLVERS.register("leaky_t", Solver(leaky))
    ALGORITHMS.register("leaky_t", {"solver": "leaky_t"})
    try:
        spec = resolve(AlgorithmConfig(name="leaky_t"))
        with pytest.raises(ScenarioError) as err:
            Algorithm.build(spec).check({"x": torch.zeros(2)})
        assert str(err.value) == "algorithm: local piece 1 (leaky): state 'n.x' changed from (1,) torch.float32 to (2,) torch.float32 after one update"
    finally:
        SOLVERS.unregister("leaky_t")
        ALGORITHMS.unregister("leaky_t")


def test_unknown_part_names_list_the_known_ones():
    from fedsim.errors import ScenarioError

    ALGORITHMS.register("typo_t", {"correction": "scafold"})
    try:
        with pytest.raises(ScenarioError) as err:
            resolve(AlgorithmConfig(name="typo_t"))
        assert str(err.value) == ("algorithm.correction: unknown correction 'scafold'; known: fedcm, lada, none, "
                                  "nova_vr, scaffold, vrlsgd")
        assert type(err.value) is ScenarioError  # the registry's one error, not a second kind
    finally:
        ALGORITHMS.unregister("typo_t")
