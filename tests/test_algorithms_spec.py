"""Presets, overrides and nonsense combinations (``algorithm.x: ...``, exit status 2), learning
rate schedules, clipping and weight decay."""

import math

import pytest
import torch

from fedsim.algorithms.algorithm import algorithm
from fedsim.algorithms.spec import SpecError
from fedsim.cli import main

from _algorithms_helpers import spec_for


@pytest.mark.parametrize("name,parts", [
    ("fedavg", dict(solver="sgd", aggregation="avg", correction="none", server_opt="sgd")),
    ("fednova", dict(aggregation="nova", tau_eff="a_norm")),
    ("fedprox", dict(aggregation="avg", mu=0.01)),
    ("fednova_prox", dict(aggregation="nova", tau_eff="tau", mu=0.01)),
    ("scaffold", dict(correction="scaffold", aggregation="avg")),
    ("vrlsgd", dict(correction="vrlsgd")),
    ("fednova_vr", dict(correction="nova_vr", aggregation="nova")),
    ("fedavgm", dict(server_opt="momentum", server_momentum=0.9, server_lr=1.0)),
    ("fedadam", dict(server_opt="adam", server_lr=0.1, server_betas=(0.9, 0.999), server_eps=1e-3)),
    ("fedyogi", dict(server_opt="yogi")),
    ("fedadagrad", dict(server_opt="adagrad")),
    ("fedcm", dict(correction="fedcm", amend=0.1, solver="sgd")),
    ("localadam", dict(solver="amsgrad", share_vhat=True, correction="none")),
    ("fedlada", dict(solver="amsgrad", share_vhat=True, correction="lada", amend=0.05)),
])
def test_presets(name, parts):
    spec = spec_for(name)
    for k, v in parts.items():
        assert getattr(spec, k) == v, k


@pytest.mark.parametrize("name,over,parts", [
    # FedNova Table 1: FedNova with momentum, prox, server momentum ("hybrid momentum")
    ("fednova", dict(momentum=0.9), dict(momentum=0.9, aggregation="nova")),
    ("fednova", dict(server_momentum=0.9), dict(server_opt="momentum", server_momentum=0.9)),
    ("fednova_vr", dict(momentum=0.9), dict(momentum=0.9, correction="nova_vr")),
    # FedLADA Table III: local / global adaptive, with and without the amendment
    ("fedlada", dict(amend=1.0, correction="none"), dict(solver="amsgrad", correction="none")),
    ("localadam", dict(amend=0.05), dict(correction="lada", amend=0.05)),
    ("fedadam", dict(amend=0.1), dict(server_opt="adam", correction="fedcm", amend=0.1)),
    ("fedlada", dict(solver="sgd"), dict(correction="fedcm", share_vhat=False)),
    ("fedcm", dict(solver="amsgrad"), dict(correction="lada")),
    ("fedavg", dict(server_opt="momentum"), dict(server_momentum=0.9)),
    ("fedavgm", dict(server_opt="adam"), dict(server_momentum=0.0)),
    ("fedavg", dict(correction="vrlsgd"), dict(correction="vrlsgd")),
    ("fedavg", dict(weight_decay=1e-3, clip_norm=5.0, lr_decay=0.99, lr_round_decay=0.998),
     dict(weight_decay=1e-3, clip_norm=5.0, lr_decay=0.99, lr_round_decay=0.998)),
])
def test_overrides(name, over, parts):
    spec = spec_for(name, **over)
    for k, v in parts.items():
        assert getattr(spec, k) == v, k


@pytest.mark.parametrize("name,over,path", [
    ("localadam", dict(momentum=0.9), "algorithm.momentum"),
    ("fedavg", dict(share_vhat=True), "algorithm.share_vhat"),
    ("fedavg", dict(correction="lada"), "algorithm.correction"),
    ("scaffold", dict(solver="amsgrad"), "algorithm.solver"),
    ("fedavg", dict(correction="none", amend=0.5), "algorithm.amend"),
    ("scaffold", dict(amend=0.5), "algorithm.amend"),
    ("fedcm", dict(amend=0.0), "algorithm.amend"),
    ("fedavg", dict(correction="nova_vr"), "algorithm.correction"),
    ("fednova_vr", dict(aggregation="avg"), "algorithm.aggregation"),
    ("fedavg", dict(tau_eff="tau"), "algorithm.tau_eff"),
    ("fedadam", dict(server_momentum=0.9), "algorithm.server_momentum"),
    ("fedavg", dict(server_opt="momentum", server_momentum=0.0), "algorithm.server_momentum"),
    ("fedavg", dict(server_betas=(0.9, 0.99)), "algorithm.server_betas"),
    ("fedavgm", dict(server_eps=1e-6), "algorithm.server_eps"),
    ("localadam", dict(betas=(0.9, 1.0)), "algorithm.betas"),
    ("fedbuff", dict(correction="scaffold"), "algorithm.correction"),
])
def test_nonsense_is_an_error_naming_the_key(name, over, path):
    with pytest.raises(SpecError) as err:
        spec_for(name, **over)
    assert err.value.path == path
    assert str(err.value).startswith(path + ": ")


def test_unknown_algorithm_is_refused_by_the_scenario_listing_the_registered_ones():
    from fedsim.scenario import ScenarioError, parse_scenario

    with pytest.raises(ScenarioError) as err:
        parse_scenario({"algorithm": {"name": "nosuch"}})
    assert str(err.value).startswith("algorithm.name: unknown algorithm 'nosuch'; known: fedadagrad, fedadam, ")


def test_cli_exit_2_names_the_key(write_yaml, capsys):
    path = write_yaml({"name": "t", "round": {"policy": "wait", "local_steps": 2},
                       "algorithm": {"name": "localadam", "momentum": 0.9}})
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("algorithm.momentum: ") and "\n" not in err
    assert main(["validate", str(path), "--set", "algorithm.name=fednova"]) == 0


def test_round_lr_schedules():
    # FedNova: /10 after 50% and /100 after 75% of the rounds
    spec = spec_for("fednova", lr=0.02, lr_milestones=(0.5, 0.75), lr_milestone_factor=0.1)
    lrs = [spec.round_lr(r, 100) for r in range(100)]
    assert lrs[0] == lrs[49] == 0.02
    assert lrs[50] == pytest.approx(0.002) and lrs[74] == pytest.approx(0.002)
    assert lrs[75] == pytest.approx(0.0002) and lrs[99] == pytest.approx(0.0002)
    # odd totals: decayed once at least half the rounds are done (ceil)
    short = [spec.round_lr(r, 5) for r in range(5)]
    assert short[:3] == [0.02] * 3 and short[3] == pytest.approx(0.002) and short[4] == pytest.approx(0.0002)
    # FedLADA: exponential 0.998 per round
    spec = spec_for("fedlada", lr=0.001, lr_round_decay=0.998)
    assert spec.round_lr(10, 100) == pytest.approx(0.001 * 0.998**10, rel=1e-14)


def test_clip_weight_decay_and_prox_in_one_step():
    """g <- clip(grad) + wd x (norm over all of a client's tensors); u <- g + mu (x - x0)."""
    spec = spec_for("fedprox", mu=0.5, weight_decay=0.1, clip_norm=1.0)
    x = {"a": torch.tensor([[1.0, 2.0], [0.0, 0.0]], dtype=torch.float64),
         "b": torch.tensor([[3.0], [1.0]], dtype=torch.float64)}
    x0 = {"a": torch.zeros(2, 2, dtype=torch.float64), "b": torch.tensor([[1.0], [1.0]], dtype=torch.float64)}
    g = {"a": torch.tensor([[3.0, 0.0], [0.3, 0.0]], dtype=torch.float64),
         "b": torch.tensor([[4.0], [0.4]], dtype=torch.float64)}
    new, _ = algorithm(spec).client_step(x, g, algorithm(spec).client_init(x), 0.1, x0=x0)
    # client 0: |g| = 5 -> scaled by 1/5; client 1: |g| = 0.5 <= 1, unchanged
    s = [1 / 5, 1.0]
    for i in range(2):
        for k in ("a", "b"):
            u = s[i] * g[k][i] + 0.1 * x[k][i] + 0.5 * (x[k][i] - x0[k][i])
            torch.testing.assert_close(new[k][i], x[k][i] - 0.1 * u, rtol=1e-12, atol=1e-13)
    assert math.isclose(float(torch.cat([g["a"][0], g["b"][0]]).norm()), 5.0)
