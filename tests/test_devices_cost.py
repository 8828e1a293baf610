"""FLOP and byte counts of fedsim.devices.cost against hand formulas."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedsim.algorithms.spec import resolve
from fedsim.devices.cost import WorkCost, cost_info, model_bytes, step_flops, upload_bytes, work_cost
from fedsim.models import build_model
from fedsim.scenario import AlgorithmConfig


def test_single_linear_convention():
    # forward: one (B, in) x (in, out) product = 2*B*in*out; backward: the weight gradient
    # (out, B) x (B, in) = 2*B*in*out; the input needs no gradient; bias adds count nothing.
    B, i, o = 4, 5, 3
    assert step_flops(nn.Linear(i, o), (i,), B) == 2 * (2 * B * i * o)


def test_logreg_flops():
    B, d, c = 32, 60, 10
    assert step_flops(build_model("logreg", (d,), c), (d,), B) == 4 * B * d * c


def test_mlp_flops():
    # layers d->h, h->h, h->c; forward 2B(dh + hh + hc); backward: weight gradients of all three
    # (same again) plus activation gradients of the 2nd and 3rd layers' inputs (2B(hh + hc))
    B, d, h, c = 8, 64, 200, 10
    expected = 2 * B * (d * h + h * h + h * c) * 2 + 2 * B * (h * h + h * c)
    assert step_flops(build_model("mlp", (d,), c, hidden=h), (d,), B) == expected


def test_flops_scale_with_batch_and_leave_module_untouched():
    m = build_model("mlp", (20,), 5, hidden=7)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    rng = torch.get_rng_state()
    assert step_flops(m, (20,), 6) == 3 * step_flops(m, (20,), 2)
    assert torch.equal(rng, torch.get_rng_state())  # no random numbers drawn
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert next(m.parameters()).device.type == "cpu"


def test_conv_flops_hand():
    # Conv2d(1 -> 2, 3x3, padding 1) on 4x4, flatten, Linear(32 -> 3), batch 1
    # conv forward: 2 * (H*W*out) * (in*k*k) = 2*16*2*9; weight grad same; no input grad
    # linear: forward 2*32*3, weight grad 2*32*3, activation grad 2*32*3; conv output needs a grad
    m = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(), nn.Linear(32, 3))
    conv = 2 * 16 * 2 * 9
    lin = 2 * 32 * 3
    assert step_flops(m, (1, 4, 4), 1) == 2 * conv + 3 * lin


def test_bytes():
    m = build_model("logreg", (60,), 10)
    assert model_bytes(m) == (60 * 10 + 10) * 4
    assert model_bytes({"a": torch.zeros(3, dtype=torch.float64), "b": torch.zeros(2, 2)}) == 3 * 8 + 4 * 4
    assert upload_bytes(100, False) == 100
    assert upload_bytes(100, True) == 200


@pytest.mark.parametrize("name, variates", [("fedavg", False), ("fednova", False), ("scaffold", True)])
def test_work_cost_upload_follows_control_variates(name, variates):
    spec = resolve(AlgorithmConfig(name=name))
    assert spec.uses_control_variates is variates
    m = build_model("logreg", (6,), 3)
    cost = work_cost(m, (6,), 2, spec.uses_control_variates)
    size = (6 * 3 + 3) * 4
    assert cost == WorkCost(step_flops=4 * 2 * 6 * 3, model_bytes=size, upload_bytes=size * (2 if variates else 1),
                            params=6 * 3 + 3)
    assert cost_info(cost) == {"step_flops": 144, "model_bytes": size, "upload_bytes": cost.upload_bytes}


def test_quadratic_has_no_cost():
    with pytest.raises(ValueError, match="^model.name: quadratic"):
        work_cost(None, (3,), 1, False)


def test_work_cost_of_a_built_workload():
    from fedsim.engine.workload import build_workload
    from fedsim.scenario import parse_scenario

    sc = parse_scenario({"data": {"name": "synthetic", "clients": 3}, "model": {"name": "logreg"},
                         "round": {"window": 1.0}, "algorithm": {"name": "scaffold", "batch_size": 5}})  # fmt: skip
    work = build_workload(sc, torch.device("cpu"), torch.float64)
    assert work.input_shape == (60,)
    variates = resolve(sc.algorithm).uses_control_variates
    cost = work_cost(work.module, work.input_shape, sc.algorithm.batch_size, variates)
    assert cost == WorkCost(step_flops=4 * 5 * 60 * 10, model_bytes=610 * 8, upload_bytes=2 * 610 * 8, params=610)
