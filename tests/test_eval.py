"""Evaluation: batched test metrics and global objective against plain per-sample loops, and the
``eval.every`` cadence in rounds.csv (every N rounds and always the last)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fedsim.cli import main
from fedsim.engine import evaluate
from fedsim.engine.workload import build_workload
from fedsim.scenario import parse_scenario


pytestmark = pytest.mark.usefixtures("one_thread")


def _work(model: str, n_test: int, seed: int = 1):
    sc = parse_scenario(
        {
            "seed": seed,
            "data": {"name": "cifar10", "standin": True, "n_train": 60, "n_test": n_test, "clients": 3},
            "model": {"name": model},
            "round": {"policy": "wait", "local_steps": 1},
        }
    )
    work = build_workload(sc, torch.device("cpu"), torch.float32)
    gen = torch.Generator().manual_seed(seed)
    # away from the initialization so that predictions are spread over classes
    params = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in work.init_params.items()}
    return work, params


def _loop_metrics(work, params):
    """One sample at a time through the plain module (no functional_call, no batching)."""
    m = work.module
    with torch.no_grad():
        for k, p in m.named_parameters():
            p.copy_(params[k])
        loss, correct = 0.0, 0
        for i in range(work.x_test.shape[0]):
            logits = m(work.x_test[i : i + 1])
            loss += float(F.cross_entropy(logits, work.y_test[i : i + 1]))
            correct += int(logits.argmax(1).item() == work.y_test[i].item())
    n = work.x_test.shape[0]
    return loss / n, correct / n


@pytest.mark.parametrize("eval_batch", [8, 2048])
def test_batched_test_metrics_equal_a_per_sample_loop(monkeypatch, eval_batch):
    monkeypatch.setattr(evaluate, "EVAL_BATCH", eval_batch)  # 8: 37 = 4 full chunks + a remainder
    work, params = _work("cnn", n_test=37)
    work.module.eval()
    loss, acc = evaluate.test_metrics(work, params)
    ref_loss, ref_acc = _loop_metrics(work, params)
    assert acc == ref_acc
    assert 0 < acc < 1  # a non-trivial check
    assert loss == pytest.approx(ref_loss, rel=1e-5)


def test_dropout_is_off_in_evaluation():
    # VGG-11 has dropout in its classifier: evaluation through the simulation must be deterministic
    from fedsim.records import RoundRecord
    from fedsim.runner.build import build_run

    sc = parse_scenario(
        {
            "seed": 2,
            "data": {"name": "cifar10", "standin": True, "n_train": 40, "n_test": 6, "clients": 2},
            "model": {"name": "vgg11"},
            "round": {"policy": "wait", "local_steps": 1},
            "eval": {"train_loss": False},
            "engine": {"threads": 1},
        }
    )
    sim = build_run(sc).engine
    blank = RoundRecord(round=0, sim_time=0.0, participants=0, tau_mean=None, tau_min=None, tau_max=None)
    sim.work.module.train()  # as after a training step
    a = sim.evaluate(blank)
    sim.work.module.train()
    b = sim.evaluate(blank)
    assert a.test_loss == b.test_loss and a.test_acc == b.test_acc
    ref_loss, ref_acc = _loop_metrics(sim.work, sim.params)  # module left in eval mode
    assert a.test_acc == ref_acc and a.test_loss == pytest.approx(ref_loss, rel=1e-5)


def test_global_objective_is_the_weighted_mean_of_client_losses(monkeypatch):
    monkeypatch.setattr(evaluate, "EVAL_BATCH", 7)
    work, params = _work("logreg", n_test=5)
    got = evaluate.global_objective(work, params)
    ref = 0.0
    with torch.no_grad():
        for p_i, ix in zip(work.weights, work.client_indices):
            losses = [float(F.cross_entropy(work.predict(params, work.x_train[j : j + 1]), work.y_train[j : j + 1]))
                      for j in ix]  # fmt: skip
            ref += p_i * float(np.mean(losses))
    assert got == pytest.approx(ref, rel=1e-6)


def _digits_run(tmp_path, rounds, every, train_loss=True):
    sc = tmp_path / f"d{rounds}_{every}_{train_loss}.yaml"
    sc.write_text(
        "name: d\nseed: 0\n"
        f"rounds: {rounds}\n"
        "data: {name: digits, clients: 4, partition: {name: iid}}\n"
        "model: {name: logreg}\n"
        "round: {policy: wait, local_steps: 2}\n"
        "algorithm: {name: fedavg, lr: 0.1, batch_size: 16}\n"
        f"eval: {{every: {every}, train_loss: {str(train_loss).lower()}}}\n"
    )
    out = tmp_path / f"run_{rounds}_{every}_{train_loss}"
    assert main(["run", str(sc), "--out", str(out), "--quiet"]) == 0
    return pd.read_csv(out / "rounds.csv")


@pytest.mark.parametrize(
    "rounds, every, evaluated",
    [(5, 2, [1, 3, 4]), (4, 2, [1, 3]), (3, 10, [2]), (3, 1, [0, 1, 2])],
)
def test_eval_every_and_always_the_last_round(tmp_path, rounds, every, evaluated):
    df = _digits_run(tmp_path, rounds, every)
    assert list(df["round"]) == list(range(rounds))
    for col in ("test_acc", "test_loss", "train_loss"):
        assert col in df.columns
        got = [int(r) for r, v in zip(df["round"], df[col]) if not (isinstance(v, float) and math.isnan(v))]
        assert got == evaluated, col
    acc = df.loc[df["round"].isin(evaluated), "test_acc"]
    assert ((acc >= 0) & (acc <= 1)).all()


def test_train_loss_off_keeps_test_metrics(tmp_path):
    df = _digits_run(tmp_path, 3, 2, train_loss=False)
    assert df["train_loss"].isna().all()
    assert list(df["test_acc"].notna()) == [False, True, True]


def test_evaluation_shared_over_ranks_is_bit_identical(monkeypatch):
    """torchrun: batch b is evaluated on rank b mod world and the partial sums are exchanged;
    emulated here with two ranks in one process. The totals equal one process's bit for bit."""
    from fedsim.engine import distributed

    work, params = _work("mlp", n_test=300)
    monkeypatch.setattr(evaluate, "EVAL_BATCH", 64)  # 1 train batch, 5 test batches

    def both():
        return evaluate.global_objective(work, params), evaluate.test_metrics(work, params)

    one = both()
    rank = {"r": 0}
    parts: dict[int, list] = {0: [], 1: []}
    monkeypatch.setattr(distributed, "world", lambda: (rank["r"], 2))
    monkeypatch.setattr(distributed, "all_reduce_sum", lambda t: parts[rank["r"]].append(t.clone()) or t)
    for r in (0, 1):  # pass 1: what each rank contributes
        rank["r"] = r
        both()
    test0, test1 = parts[0][1], parts[1][1]
    assert torch.count_nonzero(test0[:, 0]) == 3 and torch.count_nonzero(test1[:, 0]) == 2  # batches 0,2,4 / 1,3
    calls = iter(range(2))

    def reduce(t):  # pass 2: the all_reduce hands every rank the sum of both contributions
        i = next(calls)
        return parts[0][i] + parts[1][i]

    monkeypatch.setattr(distributed, "all_reduce_sum", reduce)
    assert both() == one
