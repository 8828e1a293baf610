"""Batched and one-client-at-a-time execution give the same model (issue 5, item 2).

``train_cohort`` with ``chunk = N`` (the whole cohort stepped together), ``chunk = 1`` (one client
at a time) and an uneven chunking must agree after a round -- float64 to 1e-10 relative, float32
to 1e-5 -- for every registered synchronous algorithm, with unequal tau_i, momentum, the proximal
term and the adaptive solvers, on a small MLP (the hand-batched forward) and on logistic
regression; the ``vmap`` path (conv nets, dropout) against ``vmap(grad_and_value(loss))``; and
whole runs through ``engine.clients_per_batch``.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedsim.algorithms.algorithm import algorithm
from fedsim.engine import chunking, dropout_plan, gradients
from fedsim.engine import stacked as S
from fedsim.engine import train as T
from fedsim.engine.chunking import auto_chunk
from fedsim.engine.gradients import cohort_grad
from fedsim.engine.stacked import stacked_forward
from fedsim.engine.train import Task, train_cohort
from fedsim.engine.workload import build_workload
from fedsim.engine.workload_value import Workload
from fedsim.scenario import parse_scenario

from _algorithms_helpers import SYNC, run_round, spec_for, start

STEPS = [5, 1, 3, 4, 0, 2, 5]  # unequal tau_i (one client reports nothing)


def small_work(name="digits", model="mlp", dtype=torch.float64, clients=7, **data):
    sc = parse_scenario({
        "data": {"name": name, "clients": clients, **data},
        "model": {"name": model, "hidden": 12},
        "round": {"policy": "wait", "local_steps": 1},
    })
    return build_workload(sc, torch.device("cpu"), dtype)


def overrides(name):
    """Exercise momentum and prox on the SGD-family algorithms (adaptive ones keep their solver)."""
    if name in ("localadam", "fedlada"):
        return 0.01, {}
    return 0.05, {"momentum": 0.5, "mu": 0.1, "weight_decay": 1e-3}


def close(a: dict, b: dict, rtol: float, what: str) -> None:
    assert a.keys() == b.keys(), what
    for k in a:
        scale = max(float(a[k].abs().max()), 1e-12)
        err = float((a[k] - b[k]).abs().max())
        assert err <= rtol * scale, f"{what}[{k}]: max diff {err:.3e} vs scale {scale:.3e}"


def state_tensors(state) -> dict:
    out = {f"opt.{k}": v for k, v in state.opt.items()}
    for field in ("c", "direction", "vhat"):
        for k, v in (getattr(state, field) or {}).items():
            out[f"{field}.{k}"] = v
    for i, ci in state.c_clients.items():
        out.update({f"c{i}.{k}": v for k, v in ci.items()})
    return out


def two_rounds(spec, work, chunk, lr):
    """Two rounds (the second sees control variates / global direction / v_hat from the first)."""
    params, state = start(spec, work)
    for r, steps in enumerate([STEPS, STEPS[::-1]]):
        params, state, res = run_round(spec, work, params, state, steps, lr, chunk=chunk, key=r)
    return params, state, res


@pytest.fixture(scope="module")
def mlp64():
    return small_work()


@pytest.mark.parametrize("name", SYNC)
def test_every_algorithm_same_model_batched_or_one_at_a_time(name, mlp64):
    lr, over = overrides(name)
    spec = spec_for(name, **over)
    spec = replace(spec, batch_size=4)
    ref_p, ref_s, ref_r = two_rounds(spec, mlp64, 1, lr)
    for chunk in (len(STEPS), 4):  # whole cohort; uneven chunks (4 + 2 after balancing 6 reporters)
        p, s, r = two_rounds(spec, mlp64, chunk, lr)
        close(ref_p, p, 1e-10, f"{name} chunk {chunk} params")
        close(state_tensors(ref_s), state_tensors(s), 1e-10, f"{name} chunk {chunk} server state")
        close(ref_r.deltas, r.deltas, 1e-10, f"{name} chunk {chunk} deltas")
        assert torch.equal(ref_r.a_norm, r.a_norm)


@pytest.mark.parametrize("name", ["fednova", "fedprox", "scaffold", "localadam"])
def test_float32_logreg_same_model(name):
    work = small_work("synthetic", "logreg", torch.float32, clients=7, alpha=1.0, beta=1.0)
    lr, over = overrides(name)
    spec = spec_for(name, **over)
    spec = replace(spec, batch_size=5)
    ref_p, ref_s, _ = two_rounds(spec, work, 1, lr)
    p, s, _ = two_rounds(spec, work, len(STEPS), lr)
    close(ref_p, p, 1e-5, f"{name} params")
    close(state_tensors(ref_s), state_tensors(s), 1e-5, f"{name} server state")


def test_stacked_forward_covers_logreg_and_mlp_only(mlp64):
    assert stacked_forward(mlp64.module) is not None
    assert stacked_forward(small_work("synthetic", "logreg", clients=3).module) is not None
    assert stacked_forward(nn.Sequential(nn.Linear(3, 3), nn.Dropout(), nn.Linear(3, 2))) is None
    assert stacked_forward(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 2))) is None


def reference_grads(work, params, xb, yb):
    return vmap(grad_and_value(work.loss), randomness="different")(params, xb, yb)


def stacked(work, c):
    return {k: (v.unsqueeze(0) + 0.01 * torch.randn((c,) + v.shape, dtype=v.dtype)) for k, v in work.init_params.items()}


@pytest.mark.parametrize("c", [1, 3])
def test_cohort_grad_equals_vmap_grad_mlp(mlp64, c):
    torch.manual_seed(0)
    params = stacked(mlp64, c)
    ib = torch.randint(0, mlp64.x_train.shape[0], (c, 4))
    xb, yb = mlp64.x_train[ib], mlp64.y_train[ib]
    g, loss, _ = cohort_grad(mlp64)(params, xb, yb)
    g_ref, loss_ref = reference_grads(mlp64, params, xb, yb)
    close(g_ref, g, 1e-12, "grad")
    assert torch.allclose(loss, loss_ref, rtol=1e-12)
    assert all(v.is_contiguous() for v in g.values())


def autograd_grads(module, params, xb, yb):
    """What ``cohort_grad`` computed before its backward was written out: autograd through
    ``stacked_forward`` (``_StackedLinear``'s own backward) of the clients' summed mean losses."""
    leaves = [v.detach().requires_grad_(True) for v in params.values()]
    with torch.enable_grad():
        logits = stacked_forward(module)(dict(zip(params, leaves)), xb)
        loss, loss_sq = gradients.per_client_loss(None)(logits, yb)
        g = torch.autograd.grad(loss.sum(), leaves, materialize_grads=True)
    return dict(zip(params, g)), loss.detach(), loss_sq


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_written_out_backward_is_autograds_bit_for_bit(dtype):
    """Logistic regression and MLPs (flattened input, a bias-less layer, a ReLU before the first
    Linear) with fedsim's cross-entropy: gradients, losses and squared losses equal autograd's
    exactly, for cohorts of 1 to 90 clients and minibatches of 1 to 17."""
    gen = torch.Generator().manual_seed(1)
    modules = [nn.Sequential(nn.Linear(60, 10)), nn.Sequential(nn.Flatten(), nn.Linear(12, 5)),
               nn.Sequential(nn.Flatten(), nn.Linear(12, 9), nn.ReLU(), nn.Linear(9, 9), nn.ReLU(), nn.Linear(9, 4)),
               nn.Sequential(nn.ReLU(), nn.Linear(12, 7, bias=False), nn.ReLU(), nn.Linear(7, 3))]
    for module in modules:
        first = next(m for m in module if isinstance(m, nn.Linear))
        shape = (3, first.in_features // 3) if isinstance(module[0], nn.Flatten) else (first.in_features,)
        classes = module[-1].out_features
        work = Workload(name="toy", x_train=torch.zeros(1), y_train=torch.zeros(1), x_test=None, y_test=None,
                        client_indices=[], weights=np.ones(0), init_params=dict(module.named_parameters()),
                        loss=None, predict=None, module=module)
        grad_fn = cohort_grad(work)
        for c, b in [(1, 1), (3, 17), (90, 10), (7, 4)]:
            params = {k: torch.randn((c,) + v.shape, generator=gen, dtype=dtype) for k, v in module.named_parameters()}
            xb = 3 * torch.randn((c, b) + shape, generator=gen, dtype=dtype)
            yb = torch.randint(0, classes, (c, b), generator=gen)
            g, loss, loss_sq = grad_fn(params, xb, yb)
            g_ref, loss_ref, sq_ref = autograd_grads(module, params, xb, yb)
            assert list(g) == list(g_ref)
            for k in g:
                assert torch.equal(g[k], g_ref[k]), (module, c, b, k)
                assert g[k].is_contiguous()
            assert torch.equal(loss, loss_ref) and torch.equal(loss_sq, sq_ref)


def test_a_users_loss_is_differentiated_by_autograd(mlp64, monkeypatch):
    """The written-out backward is fedsim's cross-entropy's only: with a user's loss (even the same
    function, registered again) the gradient comes from ``autograd.grad``."""
    calls = []
    real = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: calls.append(1) or real(*a, **k))
    params = stacked(mlp64, 2)
    xb, yb = mlp64.x_train[:8].view(2, 4, -1), mlp64.y_train[:8].view(2, 4)
    cohort_grad(mlp64)(params, xb, yb)
    assert calls == []
    own = replace(mlp64, loss_fn=lambda out, y: nn.functional.cross_entropy(out, y))
    g, _, _ = cohort_grad(own)(params, xb, yb)
    assert calls == [1]
    close(autograd_grads(mlp64.module, params, xb, yb)[0], g, 1e-12, "user's cross-entropy")


def test_cohort_grad_equals_vmap_grad_cnn():
    work = small_work("cifar10", "cnn", torch.float64, clients=2, standin=True, n_train=16, n_test=4)
    torch.manual_seed(0)
    params = stacked(work, 2)
    ib = torch.randint(0, work.x_train.shape[0], (2, 2))
    xb, yb = work.x_train[ib], work.y_train[ib]
    g, loss, _ = cohort_grad(work)(params, xb, yb)
    g_ref, loss_ref = reference_grads(work, params, xb, yb)
    close(g_ref, g, 1e-10, "cnn grad")
    g1, _, _ = cohort_grad(work)({k: v[:1] for k, v in params.items()}, xb[:1], yb[:1])  # module path
    close({k: v[:1] for k, v in g_ref.items()}, g1, 1e-10, "cnn grad, one client")


def test_dropout_is_independent_per_client():
    module = nn.Sequential(nn.Flatten(), nn.Linear(8, 32), nn.Dropout(0.5), nn.Linear(32, 3)).double()
    x = torch.randn(40, 8, dtype=torch.float64)
    y = torch.randint(0, 3, (40,))

    def predict(p, xb):
        return functional_call(module, p, (xb,))

    work = Workload(
        name="toy", x_train=x, y_train=y, x_test=None, y_test=None, client_indices=[], weights=np.ones(0),
        init_params={k: v.detach().clone() for k, v in module.named_parameters()},
        loss=lambda p, xb, yb: nn.functional.cross_entropy(predict(p, xb), yb), predict=predict, module=module,
    )
    params = {k: v.unsqueeze(0).expand((2,) + v.shape).clone() for k, v in work.init_params.items()}
    xb, yb = x[:5].expand(2, 5, 8), y[:5].expand(2, 5)  # two clients, same model, same minibatch
    module.train()
    g, _, _ = cohort_grad(work)(params, xb, yb)
    assert not torch.equal(g["1.weight"][0], g["1.weight"][1])  # different dropout masks


def test_full_runs_same_model_for_any_clients_per_batch(tmp_path):
    from fedsim.runner import run
    from fedsim.report.tables import load_run

    base = {
        "name": "eq", "seed": 3, "rounds": 3,
        "data": {"name": "digits", "clients": 8},
        "model": {"name": "mlp", "hidden": 12},
        "system": {"speed": {"dist": "lognormal", "median": 3.0, "sigma": 0.7}, "latency": 0.1},
        "round": {"policy": "window", "window": 2.0, "max_local_steps": 8, "clients_per_round": 6},
        "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 4, "momentum": 0.5, "mu": 0.05},
        "engine": {"dtype": "float64"},
    }
    models, tables = [], []
    for cpb in (1, 4, "auto"):
        sc = parse_scenario({**base, "engine": {**base["engine"], "clients_per_batch": cpb}})
        out = tmp_path / str(cpb)
        run(sc, out, progress=False)
        models.append(torch.load(out / "model.pt"))
        tables.append(load_run(out))
    for m, t in zip(models[1:], tables[1:]):
        close(models[0], m, 1e-10, "model.pt")
        r0, r1 = tables[0].rounds, t.rounds
        assert list(r0.columns) == list(r1.columns)
        assert (r0[["round", "sim_time", "participants", "tau_min", "tau_max"]]
                == r1[["round", "sim_time", "participants", "tau_min", "tau_max"]]).all().all()
        for col in ("train_loss", "test_loss", "test_acc"):
            assert ((r0[col] - r1[col]).abs() <= 1e-10 * r0[col].abs().max()).all(), col
        assert tables[0].clients.equals(t.clients)
    assert (tables[0].rounds["tau_min"] < tables[0].rounds["tau_max"]).any()  # unequal tau_i


def test_auto_chunk_rule(mlp64):
    cpu = torch.device("cpu")
    assert auto_chunk(small_work("synthetic", "logreg", clients=3), cpu) == chunking.MAX_CHUNK
    per = sum(v.numel() * v.element_size() for v in mlp64.init_params.values())
    assert auto_chunk(mlp64, cpu) == min(chunking.MAX_CHUNK, chunking.CPU_CHUNK_BYTES // per)
    assert auto_chunk(mlp64, cpu, threads=2) == min(chunking.MAX_CHUNK, 2 * chunking.CPU_CHUNK_BYTES // per)
    cnn = small_work("cifar10", "cnn", torch.float32, clients=2, standin=True, n_train=16, n_test=4)
    assert auto_chunk(cnn, cpu) == 1
    assert auto_chunk(cnn, torch.device("cuda")) == 16


def test_chunks_are_balanced_and_sorted(mlp64, monkeypatch):
    seen = []
    orig = T._run_chunk

    def spy(work, alg, tasks, *a):
        seen.append([t.steps for t in tasks])
        return orig(work, alg, tasks, *a)

    monkeypatch.setattr(T, "_run_chunk", spy)
    spec = spec_for("fedavg")
    tasks = [Task(i, s, 0) for i, s in enumerate([2, 5, 1, 4, 3, 3, 1])]
    train_cohort(mlp64, algorithm(spec), dict(mlp64.init_params), tasks, round_lr=0.1, seed=0, chunk=5)
    assert seen == [[5, 4, 3, 3], [2, 1, 1]]


def test_no_host_round_trip_in_the_step_loop():
    """The step loop and the gradient never move data to the host (.item/.cpu/.tolist/.numpy)."""
    for fn in (T._run_chunk, gradients.cohort_grad, S.stacked_forward, S._StackedLinear.forward,
               S._StackedLinear.backward):
        src = inspect.getsource(fn)
        if fn is T._run_chunk:
            src = src[src.index("for k in range(tmax)") : src.index("done_x.append(x)")]
        for bad in (".item(", ".cpu(", ".tolist(", ".numpy(", "float(", "int(loss", "bool("):
            assert bad not in src, f"{fn.__qualname__} calls {bad}"


def test_vgg11_dropout_masks_do_not_depend_on_chunking():
    """Each client's dropout masks are keyed by (seed, client, key, step): chunk 1 == chunk 3."""
    from fedsim.models.dropout import KeyedDropout

    sc = parse_scenario({
        "data": {"name": "cifar10", "clients": 3, "standin": True, "n_train": 64, "n_test": 4},
        "model": {"name": "vgg11"},
        "round": {"policy": "wait", "local_steps": 1},
        "engine": {"threads": 1},
    })
    work = build_workload(sc, torch.device("cpu"), torch.float64)
    work.module.train()
    spec = replace(spec_for("fedavg"), batch_size=4)
    tasks = [Task(0, 2, 7), Task(1, 1, 7), Task(2, 2, 7)]  # unequal tau_i
    runs = {chunk: train_cohort(work, algorithm(spec), dict(work.init_params), tasks, round_lr=0.05, seed=3, chunk=chunk)
            for chunk in (1, 3)}
    assert sum(isinstance(m, KeyedDropout) for m in work.module.modules()) == 2
    close(runs[1].deltas, runs[3].deltas, 1e-10, "vgg11 deltas")
    # same data, same model, two clients: their masks (hence gradients) differ
    params = {k: v.unsqueeze(0).expand((2,) + v.shape).clone() for k, v in work.init_params.items()}
    xb, yb = work.x_train[:4].expand(2, *work.x_train[:4].shape), work.y_train[:4].expand(2, 4)
    sites = dropout_plan.dropout_plan(work)
    size = dropout_plan.noise_size(sites, 4)
    noise = torch.stack([torch.rand(size, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
                         for s in (1, 2)])
    g, _, _ = cohort_grad(work, sites)(params, xb, yb, noise)
    assert not torch.equal(g["classifier.1.weight"][0], g["classifier.1.weight"][1])
    g1, _, _ = cohort_grad(work, sites)({k: v[1:] for k, v in params.items()}, xb[1:], yb[1:], noise[1:])
    close({k: v[1:] for k, v in g.items()}, g1, 1e-10, "client 1 alone")
    work.module.eval()  # dropout off: no noise drawn, the same model for any masks
    assert dropout_plan.dropout_plan(work) is None
