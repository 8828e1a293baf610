"""Populations at the cost of the participants: Synthetic generated per client, the evaluation
sample (``eval.clients``), cohorts fetched on demand, sizes without features."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedsim.cli import main
from fedsim.data import SyntheticPopulation
from fedsim.engine import evaluate
from fedsim.engine.workload import EVAL_CLIENTS, build_workload, client_sizes, eval_sample
from fedsim.rng import stream
from fedsim.scenario import parse_scenario

pytestmark = pytest.mark.usefixtures("one_thread")


def _sc(clients=10, eval_clients=None, **extra):
    raw = {
        "seed": 3,
        "rounds": 3,
        "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "clients": clients},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "uniform", "low": 1, "high": 4}},
        "round": {"policy": "window", "window": 3.0, "clients_per_round": 4},
        "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 8},
        "eval": {} if eval_clients is None else {"clients": eval_clients},
        **extra,
    }
    return parse_scenario(raw)


def test_sizes_are_the_reference_generators_first_draw_and_need_no_features(monkeypatch):
    pop = SyntheticPopulation(1.0, 1.0, clients=50, seed=9)
    n_k = stream(9, "synthetic").lognormal(4.0, 2.0, 50).astype(np.int64) + 50
    np.testing.assert_array_equal(pop.sample_sizes, n_k)
    np.testing.assert_array_equal(pop.client_sizes, (0.9 * n_k).astype(np.int64))

    def boom(self, k):
        raise AssertionError("features generated")

    monkeypatch.setattr(SyntheticPopulation, "client", boom)
    np.testing.assert_array_equal(client_sizes(_sc(clients=50)), SyntheticPopulation(0.5, 0.5, 50, seed=3).client_sizes)


def test_schedule_only_generates_no_features(monkeypatch, tmp_path, write_yaml):
    def boom(self, k):
        raise AssertionError("features generated")

    monkeypatch.setattr(SyntheticPopulation, "client", boom)
    path = write_yaml({
        "rounds": 2, "data": {"name": "synthetic", "clients": 100_000},
        "round": {"policy": "window", "window": 2.0, "clients_per_round": 5},
    })  # fmt: skip
    assert main(["run", str(path), "--schedule-only", "--out", str(tmp_path / "s")]) == 0
    assert (tmp_path / "s" / "clients.csv").read_text().count("\n") == 1 + 2 * 5


def test_a_client_is_its_own_stream():
    # client k is the same in any population that has it, and generated alone or with others
    small, big = SyntheticPopulation(1.0, 2.0, clients=5, seed=4), SyntheticPopulation(1.0, 2.0, clients=40, seed=4)
    for k in range(5):
        a, b = small.client(k), big.client(k)
        for f in ("x", "y", "w", "b", "mean_x", "train", "test"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    x, y, _, _ = big.gather([7, 2])
    c7, c2 = big.client(7), big.client(2)
    np.testing.assert_array_equal(x, np.concatenate([c7.x[c7.train], c2.x[c2.train]]).astype(np.float32))
    np.testing.assert_array_equal(y, np.concatenate([c7.y[c7.train], c2.y[c2.train]]))
    with pytest.raises(IndexError):
        big.client(40)


@pytest.mark.parametrize("iid", [False, True])
def test_a_client_is_the_reference_generators_draws_from_its_stream(iid):
    # FedProx's generate_synthetic.py order: u, B, v, W, b, then x = v + sqrt(Sigma) N(0, I), y = argmax
    from fedsim.rng import stream

    pop = SyntheticPopulation(0.5, 1.5, clients=6, dim=7, classes=3, seed=2, iid=iid)
    shared = stream(2, "synthetic")
    n_k = shared.lognormal(4.0, 2.0, 6).astype(np.int64) + 50
    for k in (0, 5):
        rng = stream(2, "synthetic-client", k)
        if iid:
            w, b, v = _iid_model(2) + (np.zeros(7),)
        else:
            u, big_b = rng.normal(0.0, 0.5), rng.normal(0.0, 1.5)
            v = rng.normal(big_b, 1.0, 7)
            w, b = rng.normal(u, 1.0, (7, 3)), rng.normal(u, 1.0, 3)
        x = v + np.sqrt(np.arange(1, 8, dtype=np.float64) ** -1.2) * rng.standard_normal((int(n_k[k]), 7))
        order = rng.permutation(int(n_k[k]))
        c = pop.client(k)
        np.testing.assert_array_equal(c.x, x)
        np.testing.assert_array_equal(c.y, np.argmax(x @ w + b, axis=1))
        np.testing.assert_array_equal(c.train, order[: int(0.9 * n_k[k])])
        xtr, ytr, xte, yte = pop.gather([k])
        np.testing.assert_array_equal(xtr, x[c.train].astype(np.float32))
        np.testing.assert_array_equal(xte, x[c.test].astype(np.float32))
        train_only = pop.gather([k, 0], test=False)
        assert len(train_only) == 2
        np.testing.assert_array_equal(train_only[0], pop.gather([k, 0])[0])
        np.testing.assert_array_equal(train_only[1], pop.gather([k, 0])[1])


def _iid_model(seed):
    from fedsim.rng import stream

    rng = stream(seed, "synthetic")
    rng.lognormal(4.0, 2.0, 6)
    return rng.normal(0.0, 1.0, (7, 3)), rng.normal(0.0, 1.0, 3)


def test_eval_sample_rule():
    assert eval_sample(EVAL_CLIENTS, None, 0) is None  # all clients up to EVAL_CLIENTS
    s = eval_sample(EVAL_CLIENTS + 1, None, 0)
    assert len(s) == EVAL_CLIENTS and len(set(s.tolist())) == EVAL_CLIENTS and list(s) == sorted(s)
    assert eval_sample(10, 10, 0) is None and eval_sample(10, 50, 0) is None
    expected = np.sort(stream(5, "eval-clients").choice(10, size=3, replace=False))
    np.testing.assert_array_equal(eval_sample(10, 3, 5), expected)


def test_sampled_workload_holds_only_the_sample_and_fetches_the_rest():
    full = build_workload(_sc(), torch.device("cpu"), torch.float32)
    part = build_workload(_sc(eval_clients=3), torch.device("cpu"), torch.float32)
    sample = eval_sample(10, 3, 3).tolist()
    assert sorted(part.client_indices) == sample and part.num_clients == 10
    np.testing.assert_array_equal(part.client_sizes, full.client_sizes)
    np.testing.assert_array_equal(part.weights, full.weights)
    assert part.x_train.shape[0] == sum(len(full.client_indices[c]) for c in sample)
    assert full.for_clients([1, 2]) is full  # everything held: nothing to fetch
    others = [c for c in range(10) if c not in sample]
    cohort = part.for_clients([others[0], sample[0], others[1]])
    for c in (others[0], sample[0], others[1]):
        assert torch.equal(cohort.x_train[cohort.client_indices[c]], full.x_train[full.client_indices[c]])
        assert torch.equal(cohort.y_train[cohort.client_indices[c]], full.y_train[full.client_indices[c]])
    # partition.csv counts: the held clients' rows, zero elsewhere
    np.testing.assert_array_equal(part.class_counts[sample], full.class_counts[sample])
    assert not part.class_counts[others].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fetching_client_by_client_gives_the_rows_of_fetching_them_together(dtype):
    """``fetch_one`` (each generated client copied straight into the cohort's tensor) against
    ``fetch`` (the listed clients concatenated, then joined to the held ones): every client's rows
    the same values, and nothing else in the cohort."""
    from dataclasses import replace

    part = build_workload(_sc(eval_clients=3), torch.device("cpu"), dtype)
    assert part.fetch_one is not None and part.fetch is None
    pop = SyntheticPopulation(0.5, 0.5, 10, seed=3)
    sample = eval_sample(10, 3, 3).tolist()
    cohort = [9, sample[1], 0, sample[0], 4]
    together = replace(part, fetch_one=None, fetch=lambda clients: pop.gather(clients, test=False))
    new, old = part.for_clients(cohort), together.for_clients(cohort)
    assert new.x_train.dtype == old.x_train.dtype == dtype
    assert new.x_train.shape == old.x_train.shape == (sum(int(part.client_sizes[c]) for c in cohort), 60)
    for c in cohort:
        assert torch.equal(new.x_train[new.client_indices[c]], old.x_train[old.client_indices[c]])
        assert torch.equal(new.y_train[new.client_indices[c]], old.y_train[old.client_indices[c]])


def test_sampled_objective_is_the_samples_weighted_mean(monkeypatch):
    monkeypatch.setattr(evaluate, "EVAL_BATCH", 13)
    full = build_workload(_sc(), torch.device("cpu"), torch.float64)
    part = build_workload(_sc(eval_clients=4), torch.device("cpu"), torch.float64)
    gen = torch.Generator().manual_seed(0)
    params = {k: v + 0.1 * torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in full.init_params.items()}
    sample = eval_sample(10, 4, 3).tolist()
    with torch.no_grad():
        f = {c: float(F.cross_entropy(full.predict(params, full.x_train[ix]), full.y_train[ix]))
             for c, ix in enumerate(full.client_indices)}  # fmt: skip
    p = full.weights
    assert evaluate.global_objective(full, params) == pytest.approx(sum(p[c] * f[c] for c in range(10)), rel=1e-12)
    ref = sum(p[c] * f[c] for c in sample) / sum(p[c] for c in sample)
    assert evaluate.global_objective(part, params) == pytest.approx(ref, rel=1e-12)


def test_real_dataset_sample_restricts_only_the_training_objective():
    def work(eval_clients=None):
        raw = {"seed": 1, "data": {"name": "digits", "clients": 6, "partition": {"name": "iid"}},
               "model": {"name": "logreg"}, "round": {"policy": "wait", "local_steps": 1},
               "eval": {} if eval_clients is None else {"clients": eval_clients}}  # fmt: skip
        return build_workload(parse_scenario(raw), torch.device("cpu"), torch.float64)

    full, part = work(), work(2)
    assert part.for_clients([0, 5]) is part and torch.equal(part.x_train, full.x_train)  # held whole
    params = {k: v + 0.01 for k, v in full.init_params.items()}
    sample = eval_sample(6, 2, 1).tolist()
    with torch.no_grad():
        f = {c: float(F.cross_entropy(full.predict(params, full.x_train[full.client_indices[c]]),
                                      full.y_train[full.client_indices[c]])) for c in sample}  # fmt: skip
    p = full.weights
    ref = sum(p[c] * f[c] for c in sample) / sum(p[c] for c in sample)
    assert evaluate.global_objective(part, params) == pytest.approx(ref, rel=1e-12)
    assert evaluate.test_metrics(part, params) == evaluate.test_metrics(full, params)


def test_training_does_not_depend_on_what_is_held(tmp_path, write_yaml):
    # the same run with every client held and with 2 held (the rest fetched per round): same
    # schedule and the same final model, bit for bit; only the reported objective's sample differs
    base = {
        "seed": 3, "rounds": 3,
        "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "clients": 10},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "uniform", "low": 1, "high": 4}},
        "round": {"policy": "window", "window": 3.0, "clients_per_round": 4},
        "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 8},
        "engine": {"threads": 1},
    }  # fmt: skip
    outs = []
    for name, ev in (("all", {}), ("two", {"clients": 2})):
        path = write_yaml({**base, "eval": ev}, f"{name}.yaml")
        assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
        outs.append(tmp_path / name)
    a, b = (torch.load(o / "model.pt") for o in outs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (outs[0] / "clients.csv").read_text() == (outs[1] / "clients.csv").read_text()


def test_eval_info():
    from fedsim.engine.workload import eval_info

    full = build_workload(_sc(), torch.device("cpu"), torch.float32)
    part = build_workload(_sc(eval_clients=3), torch.device("cpu"), torch.float32)
    total = int(SyntheticPopulation(0.5, 0.5, 10, seed=3).client_sizes.sum())
    assert eval_info(full) == {"eval_clients": 10, "train_samples": total, "engine_path": "batched"}
    assert eval_info(part) == {"eval_clients": 3, "train_samples": total, "engine_path": "batched"}


def test_empty_cohort():
    part = build_workload(_sc(eval_clients=3), torch.device("cpu"), torch.float32)
    empty = part.for_clients([])
    assert empty.x_train.shape == (0, 60) and empty.client_indices == {} and empty.num_clients == 10


def test_a_federated_data_run_without_the_training_loss_reads_only_the_samples_test_parts(tmp_path):
    """FederatedData of 12 clients (client_test per client), eval.clients 4: with train_loss on
    the start reads the sample's training data (4 clients); with it off one client's (for the
    shape) and the sample's 4 test parts, the rest when picked; the trained model, clients.csv and
    the test accuracy are the same bit for bit, and partition.csv is written only when the
    sample's class counts are known."""
    import fedsim

    m, rng = 12, np.random.default_rng(0)
    xs = [rng.normal(size=(6 + k, 5)).astype(np.float32) for k in range(m)]
    ys = [rng.integers(0, 3, len(x)) for x in xs]
    tests = [(rng.normal(size=(3, 5)).astype(np.float32), rng.integers(0, 3, 3)) for _ in range(m)]
    sc = {"seed": 1, "rounds": 3, "system": {"speed": {"dist": "uniform", "low": 1, "high": 4}},
          "round": {"policy": "window", "window": 3.0, "clients_per_round": 3}, "model": {"name": "logreg"},
          "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 4}, "engine": {"threads": 1}}
    outs, reads = {}, {}
    for train_loss in (True, False):
        log = reads[train_loss] = []

        def train(k, log=log):
            log.append(("train", k))
            return xs[k], ys[k]

        def test(k, log=log):
            log.append(("test", k))
            return tests[k]

        data = fedsim.FederatedData(sizes=np.array([len(x) for x in xs]), client_data=train, client_test=test,
                                    num_classes=3)
        out = outs[train_loss] = tmp_path / str(train_loss)
        fedsim.run({**sc, "eval": {"clients": 4, "train_loss": train_loss}}, data=data, out=out)
    sample = eval_sample(m, 4, 1).tolist()
    start_on = [c for kind, c in reads[True] if kind == "train"][:4]
    assert start_on == sample
    start_off = reads[False][:1 + 4]
    assert start_off == [("train", sample[0])] + [("test", c) for c in sample]
    a, b = (torch.load(outs[t] / "model.pt") for t in (True, False))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (outs[True] / "clients.csv").read_text() == (outs[False] / "clients.csv").read_text()
    acc = [np.genfromtxt(outs[t] / "rounds.csv", delimiter=",", names=True)["test_acc"] for t in (True, False)]
    assert np.array_equal(acc[0], acc[1], equal_nan=True)
    assert (outs[True] / "partition.csv").exists() and not (outs[False] / "partition.csv").exists()


def test_fetched_images_are_the_clients_rows_normalized_and_the_callers_arrays_untouched():
    """``fetcher`` copies each client's rows into one tensor as they come and normalizes it in
    place; a test set given as a callable is built once and normalized in place too. Both equal
    numpy's float32 ``(x - mean) / std`` of the concatenated rows exactly, and neither the client
    arrays nor a test set given as arrays is changed."""
    import fedsim
    from fedsim.engine.from_data import federated_workload, fetcher

    rng = np.random.default_rng(5)
    xs = [rng.random((n, 3, 4, 4)).astype(np.float32) for n in (3, 1, 5)]
    ys = [rng.integers(0, 4, len(x)) for x in xs]
    kept = [x.copy() for x in xs]
    xt, yt = rng.random((6, 3, 4, 4)).astype(np.float32), rng.integers(0, 4, 6)
    xt_kept = xt.copy()
    mean, std = (0.25, 0.5, 0.75), (0.5, 0.25, 2.0)
    m, s = np.float32(mean).reshape(1, 3, 1, 1), np.float32(std).reshape(1, 3, 1, 1)
    calls = []

    def test_set():
        calls.append(1)
        return xt.copy(), yt
    sc = parse_scenario({"seed": 0, "rounds": 1, "data": {"name": "synthetic"}, "model": {"name": "logreg"},
                         "round": {"policy": "wait", "clients_per_round": 2, "local_steps": 1},
                         "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 2}})
    for test in ((xt, yt), test_set):
        data = fedsim.FederatedData(sizes=np.array([3, 1, 5]), client_data=lambda k: (xs[k], ys[k]), test=test,
                                    num_classes=4, mean=mean, std=std)
        x, y = fetcher(data, torch.device("cpu"), torch.float32)([2, 0, 1])
        assert np.array_equal(x.numpy(), (np.concatenate([xs[2], xs[0], xs[1]]) - m) / s)
        assert y.tolist() == np.concatenate([ys[2], ys[0], ys[1]]).tolist()
        w = federated_workload(sc, data, torch.device("cpu"), torch.float32)
        assert np.array_equal(w.x_test.numpy(), (xt_kept - m) / s) and w.y_test.tolist() == yt.tolist()
        assert all(np.array_equal(a, b) for a, b in zip(xs, kept)) and np.array_equal(xt, xt_kept)
    assert calls == [1]
