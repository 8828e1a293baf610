"""Issue 17, points 2 and 3: the user's model, loss and data in the engine.

* a model with buffers (BatchNorm) and a model ``vmap`` refuses (``nn.LSTM``) run one client at a
  time (``engine_path: per_client`` in info.yaml), each client with its own copy of the buffers,
  averaged after the round with the round's weights (checked by hand);
* a buffer-free model forced through both paths gives the same deltas (float64, 1e-12 relative:
  the batched path sums the clients' convolutions and matrix products in vmap's batched kernels,
  whose reduction order differs from the single-client kernels';  the same tolerance
  tests/test_batched_equivalence.py states for chunking);
* losses for regression and (B, L) token targets; accuracy only for class targets (NaN else);
* FederatedData: only the evaluation sample and each round's participants are ever built, for a
  population of 10^5 clients (a counting callable);
* bad pieces: one line naming the piece, exit 2, nothing written.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from torch import nn

from fedsim.algorithms.algorithm import algorithm
from fedsim.algorithms.spec import resolve
from fedsim.data.federated import FederatedData
from fedsim.engine import evaluate
from fedsim.engine.probe import probe
from fedsim.engine.run import average_buffers
from fedsim.engine.train import Task, train_cohort
from fedsim.engine.workload import build_workload
from fedsim.errors import ScenarioError
from fedsim.scenario import AlgorithmConfig, parse_scenario

CPU = torch.device("cpu")


def scenario(clients=6, eval_clients=None, **algo):
    d = {
        "name": "byo", "seed": 3, "rounds": 2,
        "data": {"name": "synthetic", "clients": clients},
        "model": {"name": "logreg"},
        "round": {"policy": "wait", "local_steps": 3, "clients_per_round": clients},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 4, **algo},
        "system": {"speed": 1.0},
    }
    if eval_clients is not None:
        d["eval"] = {"clients": eval_clients}
    return parse_scenario(d)


def class_data(clients=6, n=10, dim=5, k=3, seed=0):
    rng = np.random.default_rng(seed)
    parts = [(rng.standard_normal((n + i, dim)).astype(np.float32), rng.integers(0, k, n + i)) for i in range(clients)]
    test = (rng.standard_normal((7, dim)).astype(np.float32), rng.integers(0, k, 7))
    return FederatedData.from_clients(parts, test=test, num_classes=k, name="toy")


def bn_net(shape, k):
    return nn.Sequential(nn.Linear(shape[0], 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, k))


class Conv1(nn.Module):
    """Buffer-free, not a Linear/ReLU stack: the batched path is vmap(functional_call)."""

    def __init__(self, dim, k):
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 3, padding=1)
        self.out = nn.Linear(2 * dim, k)

    def forward(self, x):
        return self.out(torch.tanh(self.conv(x.unsqueeze(1))).flatten(1))


class CharLSTM(nn.Module):
    def __init__(self, vocab=11, emb=4, hidden=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.out(self.lstm(self.emb(x))[0])


def spec(**kw):
    kw.setdefault("batch_size", 4)
    return resolve(AlgorithmConfig(name=kw.pop("name", "fedavg"), **kw))


# ---------------------------------------------------------------------------------- engine path
def test_buffer_model_runs_per_client_and_buffer_free_model_batched():
    sc = scenario()
    bn = build_workload(sc, CPU, torch.float64, data=class_data(), model=bn_net)
    assert bn.engine_path == "per_client"
    assert set(bn.buffers) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    conv = build_workload(sc, CPU, torch.float64, data=class_data(), model=lambda s, k: Conv1(s[0], k))
    assert conv.engine_path == "batched" and conv.buffers == {}


def test_lstm_is_refused_by_vmap_and_runs_per_client():
    rng = np.random.default_rng(1)
    seq = [(rng.integers(0, 11, (5, 7)), rng.integers(0, 11, (5, 7))) for _ in range(4)]
    data = FederatedData.from_clients(seq, test=seq[0], num_classes=11)
    work = build_workload(scenario(4), CPU, torch.float32, data=data, model=lambda s, k: CharLSTM())
    assert work.engine_path == "per_client"
    assert work.x_train.dtype == torch.int64 and work.y_train.shape == (20, 7)
    res = train_cohort(work, algorithm(spec()), dict(work.init_params), [Task(0, 2, 0), Task(1, 3, 0)], round_lr=0.1, seed=0, chunk=8)
    assert all(torch.isfinite(d).all() for d in res.deltas.values())


def test_forced_paths_give_the_same_deltas():
    sc = scenario()
    work = build_workload(sc, CPU, torch.float64, data=class_data(), model=lambda s, k: Conv1(s[0], k))
    tasks = [Task(c, s, 0) for c, s in enumerate([3, 1, 4, 2, 2, 5])]
    out = {}
    for path in ("batched", "per_client"):
        w = probe(work, 4, path=path)
        assert w.engine_path == path
        res = train_cohort(w, algorithm(spec(momentum=0.5)), dict(w.init_params), tasks, round_lr=0.1, seed=0, chunk=6)
        out[path] = res.deltas
    for k in out["batched"]:
        a, b = out["batched"][k], out["per_client"][k]
        assert float((a - b).abs().max()) <= 1e-12 * max(float(a.abs().max()), 1e-12), k


def test_per_client_buffers_are_each_clients_own_and_averaged_with_the_weights():
    """Client c's running mean after one step from the global buffers is (1 - 0.1) m0 + 0.1 mean_b
    (BatchNorm momentum 0.1) of its own minibatch: computed by hand from the batch it drew."""
    sc = scenario()
    work = build_workload(sc, CPU, torch.float64, data=class_data(), model=bn_net)
    tasks = [Task(0, 1, 0), Task(2, 1, 0)]
    from fedsim.engine.batches import batch_indices

    res = train_cohort(work, algorithm(spec()), dict(work.init_params), tasks, round_lr=0.1, seed=0, chunk=2)
    lin_w, lin_b = work.init_params["0.weight"], work.init_params["0.bias"]
    for row, t in enumerate(tasks):
        idx = torch.as_tensor(batch_indices(work, 0, t, 4)[0])
        h = work.x_train[idx] @ lin_w.T + lin_b
        want = 0.9 * torch.zeros(8, dtype=torch.float64) + 0.1 * h.mean(0)
        assert torch.allclose(res.buffers["1.running_mean"][row], want, rtol=1e-12, atol=1e-15)
        assert int(res.buffers["1.num_batches_tracked"][row]) == 1
    w = torch.tensor([0.25, 0.75], dtype=torch.float64)
    avg = average_buffers(res.buffers, w)
    want = 0.25 * res.buffers["1.running_mean"][0] + 0.75 * res.buffers["1.running_mean"][1]
    assert torch.allclose(avg["1.running_mean"], want, rtol=1e-15)
    assert avg["1.num_batches_tracked"].dtype == torch.int64 and int(avg["1.num_batches_tracked"]) == 1
    # the global buffers the round started from are untouched
    assert float(work.buffers["1.running_mean"].abs().max()) == 0.0


# ---------------------------------------------------------------------------------- losses
def test_regression_loss_has_no_accuracy():
    rng = np.random.default_rng(2)
    parts = [(rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)) for _ in range(3)]
    data = FederatedData.from_clients(parts, test=parts[0])
    mse = lambda out, y: ((out - y) ** 2).mean()  # noqa: E731
    work = build_workload(scenario(3), CPU, torch.float64, data=data, model=lambda s, k: nn.Linear(s[0], 2), loss=mse)
    assert work.num_classes == 0 and work.engine_path == "batched"
    loss, acc = evaluate.test_metrics(work, work.init_params)
    x, y = torch.as_tensor(parts[0][0], dtype=torch.float64), torch.as_tensor(parts[0][1], dtype=torch.float64)
    want = float(((work.module(x) - y) ** 2).mean().detach())
    assert loss == pytest.approx(want, rel=1e-12) and math.isnan(acc)


def test_sequence_targets_default_cross_entropy_and_token_accuracy():
    rng = np.random.default_rng(3)
    seq = [(rng.integers(0, 5, (4, 6)), rng.integers(0, 5, (4, 6))) for _ in range(2)]
    data = FederatedData.from_clients(seq, test=seq[1], num_classes=5)

    class Tok(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 5)

        def forward(self, x):
            return self.emb(x)

    work = build_workload(scenario(2), CPU, torch.float64, data=data, model=lambda s, k: Tok())
    loss, acc = evaluate.test_metrics(work, work.init_params)
    logits = work.module.emb.weight[torch.as_tensor(seq[1][0])]
    y = torch.as_tensor(seq[1][1])
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, 5), y.reshape(-1))
    assert loss == pytest.approx(float(want.detach()), rel=1e-12)
    assert acc == float((logits.argmax(-1) == y).double().mean())


# ---------------------------------------------------------------------------------- data on demand
def test_a_population_of_100k_clients_builds_only_what_it_needs():
    calls = []
    m = 100_000
    sizes = 3 + np.arange(m) % 4

    def client(k):
        calls.append(k)
        rng = np.random.default_rng(k)
        return rng.standard_normal((sizes[k], 2)).astype(np.float32), rng.integers(0, 2, sizes[k])

    def client_test(k):
        return np.full((1, 2), k, dtype=np.float32), np.array([k % 2])

    data = FederatedData(sizes=sizes, client_data=client, client_test=client_test, num_classes=2)
    work = build_workload(scenario(eval_clients=20), CPU, torch.float32, data=data, model=lambda s, k: nn.Linear(2, 2))
    assert sorted(calls) == sorted(work.eval_clients.tolist()) and len(calls) == 20
    assert work.x_test.shape == (20, 2)  # the evaluation sample's test parts only
    assert sorted(work.x_test[:, 0].long().tolist()) == sorted(work.eval_clients.tolist())
    np.testing.assert_allclose(work.weights, sizes / sizes.sum())
    calls.clear()
    outside = [k for k in (5, 77_777, 99_999) if k not in set(work.eval_clients.tolist())]
    inside = int(work.eval_clients[0])
    cohort = work.for_clients(outside + [inside])
    assert calls == outside  # the evaluation sample's client is already held
    for k in outside:
        x, _ = client(k)
        assert torch.equal(cohort.x_train[torch.as_tensor(cohort.client_indices[k])], torch.as_tensor(x))


def test_client_test_parts_of_every_client_when_the_population_is_small():
    parts = [(np.ones((2, 2), np.float32) * k, np.array([0, 1])) for k in range(3)]
    tests = [(np.full((k + 1, 2), 10.0 + k, np.float32), np.zeros(k + 1, dtype=np.int64)) for k in range(3)]
    data = FederatedData.from_clients(parts, client_test=tests, num_classes=2)
    work = build_workload(scenario(3), CPU, torch.float64, data=data, model=lambda s, k: nn.Linear(2, 2))
    assert work.x_test[:, 0].tolist() == [10.0, 11.0, 11.0, 12.0, 12.0, 12.0]


# ---------------------------------------------------------------------------------- bad pieces
def _bad(**kw):
    data = kw.pop("data", class_data())
    with pytest.raises(ScenarioError) as err:
        build_workload(scenario(), CPU, torch.float64, data=data, **kw)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_bad_pieces_are_one_line_errors_naming_the_piece():
    assert _bad(model=lambda s, k: "not a module").startswith("model: the model factory returned str")
    assert _bad(model=lambda s, k: nn.Linear(s[0], k + 1)).startswith("model: outputs of shape (4, 4) do not fit")
    assert _bad(model=lambda s, k: nn.Linear(7, k)).startswith("model: the forward pass")
    assert _bad(model=lambda s, k: nn.Linear(s[0], k), loss=lambda o, y: o.sum(1)).startswith("loss: returned (4,)")
    assert _bad(model=lambda s, k: nn.Linear(s[0], k), loss=lambda o, y: o.sum() * float("nan")).startswith("loss: nan")
    assert _bad(model=lambda s, k: nn.Linear(s[0], k), loss=lambda o, y: o @ y).startswith("loss: failed on model outputs")
    short = FederatedData(sizes=np.array([3, 3]), client_data=lambda k: (np.zeros((3, 5), np.float32), np.zeros(2, np.int64)),
                          test=(np.zeros((1, 5), np.float32), np.zeros(1, np.int64)), num_classes=3)
    assert _bad(data=short, model=lambda s, k: nn.Linear(5, k)) == "data: client_data(0) returned 3 inputs and 2 targets"
    lying = FederatedData(sizes=np.array([4, 3]), client_data=lambda k: (np.zeros((3, 5), np.float32), np.zeros(3, np.int64)),
                          test=(np.zeros((1, 5), np.float32), np.zeros(1, np.int64)), num_classes=3)
    assert _bad(data=lying, model=lambda s, k: nn.Linear(5, k)) == "data: client_data(0) returned 3 examples; sizes[0] is 4"


# ---------------------------------------------------------------------------------- whole runs
def _run(tmp_path, monkeypatch, name, **pieces):
    from fedsim.runner import run

    out = tmp_path / name
    run(scenario(), out, progress=False, **pieces)
    return out


def test_whole_run_records_the_engine_path(tmp_path, monkeypatch):
    out = _run(tmp_path, monkeypatch, "bn", data=class_data(), model=bn_net)
    info = yaml.safe_load((out / "info.yaml").read_text())
    assert info["engine_path"] == "per_client"
    rounds = pd.read_csv(out / "rounds.csv")
    assert len(rounds) == 2 and rounds["test_acc"].notna().all()
    saved = torch.load(out / "model.pt", weights_only=True)
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked"} <= set(saved)
    assert int(saved["1.num_batches_tracked"]) > 0  # the averaged buffers, not the initial ones
    out = _run(tmp_path, monkeypatch, "conv", data=class_data(), model=lambda s, k: Conv1(s[0], k))
    assert yaml.safe_load((out / "info.yaml").read_text())["engine_path"] == "batched"


def test_regression_run_writes_empty_accuracy(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    parts = [(rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal(8).astype(np.float32)) for _ in range(6)]
    data = FederatedData.from_clients(parts, test=parts[0])
    out = _run(tmp_path, monkeypatch, "reg", data=data, model=lambda s, k: nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)),
               loss=lambda o, y: ((o - y) ** 2).mean())
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["test_acc"].isna().all() and rounds["test_loss"].notna().all()
    header = (out / "rounds.csv").read_text().splitlines()[1].split(",")
    cols = (out / "rounds.csv").read_text().splitlines()[0].split(",")
    assert header[cols.index("test_acc")] == ""


def test_buffers_with_async_are_refused():
    sc = parse_scenario({"data": {"name": "synthetic", "clients": 4}, "model": {"name": "logreg"},
                         "round": {"policy": "async", "local_steps": 2, "concurrency": 2, "buffer": 1},
                         "algorithm": {"name": "fedbuff"}})
    with pytest.raises(ScenarioError, match="^model: a model with buffers"):
        build_workload(sc, CPU, torch.float64, data=class_data(4), model=bn_net)


def test_bad_model_writes_nothing(tmp_path, monkeypatch):
    with pytest.raises(ScenarioError):
        _run(tmp_path, monkeypatch, "bad", data=class_data(), model=lambda s, k: 3)
    assert not (tmp_path / "bad").exists() or not any(Path(tmp_path / "bad").iterdir())
