"""The clock-free ``Algorithm`` driven by hand for one or two rounds: three scalar quadratic clients
F_i(x) = 1/2 (x - e_i)^2, e = (1, -2, 4), weights w = (1/4, 1/4, 1/2), lr 1/2, tau = (1, 2, 3).

GD from x: y_i - x = (1 - (1/2)^tau_i) (e_i - x); from x = 0 the changes are (1/2, -3/2, 7/2), every
number a short binary fraction, so FedAvg's and FedNova's first round are exact (``==``).
"""

import pytest
import torch

from fedsim.algorithms import Algorithm
from fedsim.algorithms.spec import resolve
from fedsim.scenario import AlgorithmConfig

E = torch.tensor([[1.0], [-2.0], [4.0]], dtype=torch.float64)
W = [0.25, 0.25, 0.5]
TAU = [1, 2, 3]
LR = 0.5


def grad(x, clients):
    return {"x": x["x"] - E[list(clients)]}


def build(name, **over):
    return Algorithm.build(resolve(AlgorithmConfig(name=name, batch_size=1, **over)))


def one_round(alg, params, state, steps=TAU):
    upd = alg.client_update(params, state, grad, steps, LR, weights=W, client_p=W)
    return upd, *alg.server_update(params, state, upd)


def zero():
    return {"x": torch.zeros(1, dtype=torch.float64)}


def test_fedavg_round():
    alg = build("fedavg")
    upd, x, _ = one_round(alg, zero(), alg.init(zero()))
    assert upd.deltas["x"].flatten().tolist() == [0.5, -1.5, 3.5]
    assert upd.a_norm.tolist() == [1.0, 2.0, 3.0]
    assert x["x"].item() == 0.25 * 0.5 + 0.25 * -1.5 + 0.5 * 3.5 == 1.5


def test_fednova_round():
    """tau_eff = sum w tau = 2.25; d = tau_eff sum w Delta / tau = 0.28125 - 0.421875 + 1.3125."""
    alg = build("fednova")
    _, x, _ = one_round(alg, zero(), alg.init(zero()))
    assert x["x"].item() == 1.171875


def test_client_without_steps_does_not_report():
    alg = build("fedavg")
    upd, x, _ = one_round(alg, zero(), alg.init(zero()), steps=[0, 2, 3])
    assert upd.clients == (1, 2)
    # weights of the reporting clients as given (no redistribution here): 0.25 * -1.5 + 0.5 * 3.5
    assert x["x"].item() == 1.375


def test_fedavgm_two_rounds():
    """v = 0.9 v + d, x += v: round 1 d = 1.5; round 2 from x = 1.5 the changes are
    (1/2, 3/4, 7/8) * (e - 1.5) = (-1/4, -21/8, 35/16), d = 3/8."""
    alg = build("fedavgm")
    x, state = zero(), alg.init(zero())
    _, x, state = one_round(alg, x, state)
    _, x, state = one_round(alg, x, state)
    assert state.opt["v.x"].item() == pytest.approx(0.9 * 1.5 + 0.375, rel=1e-15)
    assert x["x"].item() == pytest.approx(1.5 + 0.9 * 1.5 + 0.375, rel=1e-15)


def test_scaffold_control_variates_after_one_round():
    """c_i = -Delta_i / (lr tau_i) = (-1, 3/2, -7/3); c = sum w_i c_i = -25/24."""
    alg = build("scaffold")
    _, _, state = one_round(alg, zero(), alg.init(zero()))
    assert [state.c_clients[i]["x"].item() for i in range(3)] == pytest.approx([-1.0, 1.5, -7 / 3], rel=1e-15)
    assert state.c["x"].item() == pytest.approx(-25 / 24, rel=1e-15)
    # the next round's correction for client 0 is c - c_0
    assert alg.correction(state, 0, zero())["x"].item() == pytest.approx(-1 / 24, rel=1e-15)


def test_shadow_run_is_the_local_chain_without_gradient_pieces():
    """Weight decay and clipping change the local step but not a_i (momentum 1/2: 1, 5/2, 17/4)."""
    alg = build("fednova", momentum=0.5, weight_decay=0.1, clip_norm=0.1)
    assert alg.a_norm([1, 2, 3], [1.0] * 3).tolist() == [1.0, 2.5, 4.25]
