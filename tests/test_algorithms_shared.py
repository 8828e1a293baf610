"""One table every registered synchronous algorithm passes (optax style): converges on a
quadratic with identical clients and equal steps; deterministic; keeps dtype; one client alone
gives the same result as inside a cohort (chunk 1 vs chunk N in ``engine.train.train_cohort``).
"""

import numpy as np
import pytest
import torch

from fedsim.algorithms.presets import PRESETS

from _algorithms_helpers import SYNC, quadratic_work, run, run_round, spec_for, start

EXPECTED = {
    "fedavg", "fednova", "fedprox", "fednova_prox", "scaffold", "vrlsgd", "fednova_vr", "fedavgm",
    "fedadam", "fedyogi", "fedadagrad", "fedcm", "localadam", "fedlada",
}


def test_registry_names():
    assert set(SYNC) == EXPECTED
    assert set(PRESETS) == EXPECTED | {"fedbuff", "fedasync"}


def hyper(name):
    """(local lr, overrides) that converge in a modest number of rounds."""
    if name == "localadam":
        return 0.02, {}
    if name == "fedlada":
        return 0.05, {"amend": 0.3}
    if name == "fedadagrad":
        return 0.1, {"server_lr": 0.5}
    return 0.1, {}


def state_tensors(state):
    out = dict(state.opt)
    for field in ("c", "direction", "vhat"):
        for k, v in (getattr(state, field) or {}).items():
            out[f"{field}.{k}"] = v
    for i, ci in state.c_clients.items():
        for k, v in ci.items():
            out[f"c{i}.{k}"] = v
    return out


HETERO = [[2.0, -1.0, 0.5], [-1.0, 3.0, 1.0], [0.5, 0.5, -2.0]]
STEPS = [1, 3, 5]


@pytest.mark.parametrize("name", SYNC)
def test_converges_with_identical_clients_and_equal_steps(name):
    e = [1.0, -2.0, 0.5]
    work = quadratic_work([e, e, e])
    lr, over = hyper(name)
    spec = spec_for(name, **over)
    target = torch.tensor(e, dtype=torch.float64)
    params, state = start(spec, work)
    errs = []
    for r in range(150):
        params, state, _ = run_round(spec, work, params, state, [4, 4, 4], lr, key=r)
        errs.append(float((params["x"] - target).norm()))
    err, err_half = errs[-1], errs[74]
    assert err < 1e-3
    assert err < err_half / 5 or err < 1e-10


@pytest.mark.parametrize("name", SYNC)
def test_deterministic(name):
    work = quadratic_work(HETERO)
    lr, over = hyper(name)
    a = run(spec_for(name, **over), work, 3, STEPS, lr)
    b = run(spec_for(name, **over), work, 3, STEPS, lr)
    assert torch.equal(a[0]["x"], b[0]["x"])
    sa, sb = state_tensors(a[1]), state_tensors(b[1])
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", SYNC)
def test_keeps_dtype(name, dtype):
    work = quadratic_work(HETERO, dtype=dtype)
    lr, over = hyper(name)
    x, state = run(spec_for(name, **over), work, 3, STEPS, lr)
    assert x["x"].dtype == dtype and bool(torch.isfinite(x["x"]).all())
    for k, v in state_tensors(state).items():
        assert v.dtype == dtype, k
        assert bool(torch.isfinite(v).all()), k


@pytest.mark.parametrize("name", SYNC)
def test_one_client_alone_equals_inside_a_cohort(name):
    work = quadratic_work(HETERO)
    lr, over = hyper(name)
    spec = spec_for(name, **over)
    alone = run(spec, work, 3, STEPS, lr, chunk=1)
    cohort = run(spec, work, 3, STEPS, lr, chunk=3)
    np.testing.assert_allclose(alone[0]["x"].numpy(), cohort[0]["x"].numpy(), rtol=1e-14, atol=1e-15)
    sa, sc = state_tensors(alone[1]), state_tensors(cohort[1])
    assert sa.keys() == sc.keys()
    for k in sa:
        np.testing.assert_allclose(sa[k].numpy(), sc[k].numpy(), rtol=1e-14, atol=1e-15, err_msg=k)


@pytest.fixture(scope="module")
def logreg_work():
    from fedsim.engine.workload import build_workload
    from fedsim.scenario import parse_scenario

    sc = parse_scenario({"data": {"name": "synthetic", "clients": 4}, "model": {"name": "logreg"},
                         "round": {"policy": "wait", "local_steps": 1}})
    return build_workload(sc, torch.device("cpu"), torch.float64)


@pytest.mark.parametrize("name", SYNC)
def test_one_client_alone_equals_inside_a_cohort_logreg(name, logreg_work):
    """The same on a real model (vmap over per-client minibatches, not a closed-form gradient)."""
    lr, over = hyper(name)
    spec = spec_for(name, batch_size=8, **over)
    alone = run(spec, logreg_work, 2, [1, 2, 3, 4], lr, chunk=1)
    cohort = run(spec, logreg_work, 2, [1, 2, 3, 4], lr, chunk=4)
    for k in alone[0]:
        np.testing.assert_allclose(alone[0][k].numpy(), cohort[0][k].numpy(), rtol=1e-10, atol=1e-12, err_msg=k)
    sa, sc = state_tensors(alone[1]), state_tensors(cohort[1])
    assert sa.keys() == sc.keys()
    for k in sa:
        np.testing.assert_allclose(sa[k].numpy(), sc[k].numpy(), rtol=1e-10, atol=1e-12, err_msg=k)
