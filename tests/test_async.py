"""Asynchronous FL (round.policy async): FedBuff and FedAsync through the whole pipeline.

Hand-made worlds on F_i(x) = 1/2 ||x - e_i||^2 (exact gradients, float64) are compared with
exact lists (arrival order, versions, staleness) and with hand-run models; FedBuff with the buffer
= all clients reproduces FedAvg's ``wait`` policy; FedAsync with a_s = 1 and one client is local
SGD; checkpoints hold the live model versions so a resumed async run is byte-identical.
"""

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import fedsim.runner.execute as execute
from fedsim.algorithms.asynchronous import Arrivals, NormState, async_apply, staleness_weight
from fedsim.algorithms.algorithm import algorithm
from fedsim.algorithms.state import RoundUpdate
from fedsim.cli import main
from fedsim.scenario import AlgorithmConfig, load_scenario
from fedsim.algorithms.spec import resolve

E3 = [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]
WORLD = {  # clients of speeds 1, 2, 4 steps/s, 0.5 s transfers, 4 steps each, all always in flight
    "name": "world", "seed": 0, "rounds": 7,
    "data": {"name": "quadratic", "centers": E3},
    "system": {"speed": [1.0, 2.0, 4.0], "latency": 0.5},
    "round": {"policy": "async", "local_steps": 4, "concurrency": 3, "buffer": 1},
    "algorithm": {"name": "fedbuff", "lr": 0.1, "batch_size": 1},
    "engine": {"dtype": "float64"},
}
# (round, client, status, steps, start, end, version, staleness) of WORLD: client 2 (fastest)
# arrives first; two arrivals at t = 6 are processed in job-key order (tests/test_clock.py).
WORLD_ROWS = [
    (0, 2, "completed", 4, 0.0, 2.0, 0, 0),
    (1, 1, "completed", 4, 0.0, 3.0, 0, 1),
    (2, 2, "completed", 4, 2.0, 4.0, 1, 1),
    (3, 0, "completed", 4, 0.0, 5.0, 0, 3),
    (4, 1, "completed", 4, 3.0, 6.0, 2, 2),
    (5, 2, "completed", 4, 4.0, 6.0, 3, 2),
    (6, 2, "completed", 4, 6.0, 8.0, 6, 0),
]
SYSTEM_COLS = ["round", "client", "status", "steps", "start", "end", "version", "staleness"]


def _with(base, **sections):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for sec, over in sections.items():
        if isinstance(over, dict):
            raw[sec] = {**raw.get(sec, {}), **over}
        else:
            raw[sec] = over
    return raw


def _run(tmp_path, raw, name="run"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / name
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    return path, out


def _local_sgd(x, e, lr, steps):
    for _ in range(steps):
        x = x - lr * (x - e)
    return x


# ---------------------------------------------------------------------------- staleness weights
def test_staleness_weights_hand_values():
    def w(kind, s, **kw):
        return staleness_weight(algorithm(resolve(AlgorithmConfig(name="fedbuff", staleness=kind, **kw))), s)

    assert [w("constant", s) for s in (0, 1, 7)] == [1.0, 1.0, 1.0]
    assert [w("polynomial", s, staleness_exponent=0.5) for s in (0, 3, 8)] == [1.0, 0.5, 1 / 3]
    assert w("polynomial", 4, staleness_exponent=1.0) == pytest.approx(0.2, abs=1e-16)
    assert w("polynomial", 5, staleness_exponent=0.0) == 1.0
    # FedAsync hinge: 1 up to b, then 1 / (a (s - b) + 1)
    assert [w("hinge", s, hinge_a=10.0, hinge_b=4.0) for s in (0, 4, 5, 6)] == [1.0, 1.0, 1 / 11, 1 / 21]
    assert [w("hinge", s, hinge_a=2.0, hinge_b=0.0) for s in (0, 1, 3)] == [1.0, 1 / 3, 1 / 7]


def test_normalized_full_buffer_is_fednova_aggregation():
    """normalize_async on a first buffer at staleness 0 = FedNova's d (tau_eff = sum w ||a||_1)."""
    spec = resolve(AlgorithmConfig(name="fedbuff", staleness="constant", normalize_async=True))
    nova = resolve(AlgorithmConfig(name="fednova"))
    g = torch.Generator().manual_seed(0)
    deltas = {"x": torch.randn(3, 4, generator=g, dtype=torch.float64)}
    p = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    a = torch.tensor([2.0, 5.0, 9.0], dtype=torch.float64)
    arr = Arrivals(deltas, None, p, torch.zeros(3, dtype=torch.float64), a)
    x = {"x": torch.zeros(4, dtype=torch.float64)}
    got, _, norm, coef = async_apply(algorithm(spec), x, {}, arr, NormState())
    upd = RoundUpdate(clients=(0, 1, 2), deltas=deltas, weights=p, a_norm=a, steps=a, lr=0.1, num_clients=3)
    torch.testing.assert_close(got["x"], algorithm(nova).aggregate(upd)["x"], rtol=0, atol=1e-15)
    assert norm.tau_eff == pytest.approx(float((p * a).sum()), abs=1e-15)
    torch.testing.assert_close(coef, p)
    # tau_eff is a running mean over every arrival: a later buffer of one job is still rescaled
    one = Arrivals({"x": deltas["x"][:1]}, None, p[:1], torch.zeros(1, dtype=torch.float64), a[:1])
    got1, _, norm1, _ = async_apply(algorithm(spec), x, {}, one, norm)
    assert norm1.tau_eff == pytest.approx((0.2 * 2 + 0.3 * 5 + 0.5 * 9 + 0.2 * 2) / 1.2)
    torch.testing.assert_close(got1["x"], deltas["x"][0] * norm1.tau_eff / 2.0, rtol=0, atol=1e-15)


# ---------------------------------------------------------------------------- hand-made async worlds
@pytest.mark.parametrize("algo", ["fedbuff", "fedasync"])
def test_hand_world_order_versions_staleness_and_model(tmp_path, algo):
    """Every job trains from the version it downloaded; the server weighs it by its staleness."""
    raw = _with(WORLD, algorithm={"name": algo, "staleness": "polynomial", "staleness_exponent": 0.5,
                                  "mixing": 0.6})
    _, out = _run(tmp_path, raw)
    cl = pd.read_csv(out / "clients.csv")
    assert [tuple(r) for r in cl[SYSTEM_COLS].itertuples(index=False)] == WORLD_ROWS
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["round"].tolist() == list(range(7))
    assert rounds["sim_time"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 6.0, 8.0]
    assert rounds["participants"].tolist() == [1] * 7
    # hand run: x^{u+1} = x^u + w(s) Delta (FedBuff, buffer of one) or
    #           x^{u+1} = x^u + a_s (x^v + Delta - x^u), a_s = 0.6 w(s) (FedAsync)
    e = np.array(E3)
    xs = [np.zeros(2)]
    weights = []
    for _, c, _, steps, _, _, v, s in WORLD_ROWS:
        w = (1 + s) ** -0.5
        delta = _local_sgd(xs[v], e[c], 0.1, steps) - xs[v]
        if algo == "fedbuff":
            xs.append(xs[-1] + w * delta)
        else:
            w *= 0.6
            xs.append(xs[-1] + w * (xs[v] + delta - xs[-1]))
        weights.append(w)
    np.testing.assert_allclose(torch.load(out / "model.pt").numpy(), xs[-1], rtol=0, atol=1e-14)
    opt = e.mean(0)
    np.testing.assert_allclose(rounds["dist_to_opt"], [np.linalg.norm(x - opt) for x in xs[1:]], rtol=0, atol=1e-14)
    np.testing.assert_allclose(cl["weight"], weights, rtol=0, atol=1e-15)
    assert cl["a_norm"].tolist() == [4.0] * 7


def test_buffer_outages_and_failed_jobs(tmp_path):
    """K = 2; client 1 is offline [2, 2.5) (upload done exactly at 2: it arrives) and [5, 5.5)
    (its job started at 4.5 fails at 5, lost, reported with the next update)."""
    raw = _with(WORLD, data={"centers": E3[:2]},
                system={"speed": [1.0, 2.0], "availability": [[], [[2.0, 2.5], [5.0, 5.5]]]},
                round={"local_steps": 2, "concurrency": 2, "buffer": 2}, rounds=3,
                algorithm={"name": "fedbuff", "staleness": "constant"})
    _, out = _run(tmp_path, raw)
    cl = pd.read_csv(out / "clients.csv")
    assert [tuple(r) for r in cl[SYSTEM_COLS].itertuples(index=False)] == [
        (0, 1, "completed", 2, 0.0, 2.0, 0, 0), (0, 0, "completed", 2, 0.0, 3.0, 0, 0),
        (1, 1, "completed", 2, 2.5, 4.5, 0, 1), (1, 1, "failed", 0, 4.5, 5.0, 1, 0),
        (1, 0, "completed", 2, 3.0, 6.0, 1, 0),
        (2, 1, "completed", 2, 5.5, 7.5, 1, 1), (2, 0, "completed", 2, 6.0, 9.0, 2, 0),
    ]
    assert cl["weight"].tolist() == [0.5, 0.5, 0.5, 0.0, 0.5, 0.5, 0.5]
    assert pd.read_csv(out / "rounds.csv")["participants"].tolist() == [2, 2, 2]
    # hand run: d = mean of the two deltas, each from its own version
    e = np.array(E3[:2])
    xs = [np.zeros(2)]
    for buf in ([(1, 0), (0, 0)], [(1, 0), (0, 1)], [(1, 1), (0, 2)]):
        d = sum(_local_sgd(xs[v], e[c], 0.1, 2) - xs[v] for c, v in buf) / 2
        xs.append(xs[-1] + d)
    np.testing.assert_allclose(torch.load(out / "model.pt").numpy(), xs[-1], rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------- reductions
EQUAL = {  # four clients with unequal weights p = (1, 2, 3, 4) / 10, equal speeds, no outages
    "name": "eq", "seed": 3, "rounds": 6,
    "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0], [3.0, 1.0]],
             "weights": [1.0, 2.0, 3.0, 4.0]},
    "system": {"speed": 2.0, "latency": 0.25},
    "round": {"policy": "wait", "local_steps": 3},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1},
    "engine": {"dtype": "float64"},
}


@pytest.mark.parametrize("sync, over", [
    ("fedavg", {}),
    ("fedadam", {"server_opt": "adam", "server_lr": 0.1}),
])
def test_full_buffer_fedbuff_is_fedavg_wait(tmp_path, sync, over):
    """buffer = concurrency = all clients, equal speeds, constant staleness, server_lr 1: every
    buffer holds each client once at staleness 0 and d = sum_k p_k Delta_k / sum_k p_k = FedAvg's
    sum_i p_i Delta_i (through the same server optimizer)."""
    _, ref = _run(tmp_path, _with(EQUAL, algorithm={"name": sync}), "wait")
    raw = _with(EQUAL, round={"policy": "async", "concurrency": 4, "buffer": 4},
                algorithm={"name": "fedbuff", "staleness": "constant", **over})
    _, out = _run(tmp_path, raw, "fedbuff")
    cb = pd.read_csv(out / "clients.csv")
    assert (cb["staleness"] == 0).all() and (cb["version"] == cb["round"]).all()
    # the two code paths agree to the bit: same times, weights, progress, losses and model
    for name in ("rounds.csv", "clients.csv", "model.pt"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name


def test_fedasync_one_client_is_local_sgd(tmp_path):
    """mixing 1, constant staleness: a_s = 1, x <- x_new, i.e. the client's own local SGD."""
    raw = _with(EQUAL, data={"centers": [[1.0, -2.0, 0.5]]}, rounds=5,
                round={"policy": "async", "concurrency": 1, "buffer": 1, "local_steps": 3},
                algorithm={"name": "fedasync", "mixing": 1.0, "staleness": "constant"})
    raw["data"].pop("weights")
    _, out = _run(tmp_path, raw)
    e = np.array([1.0, -2.0, 0.5])
    xs, x = [], np.zeros(3)
    for _ in range(5):
        x = _local_sgd(x, e, 0.1, 3)
        xs.append(x)
    np.testing.assert_allclose(torch.load(out / "model.pt").numpy(), xs[-1], rtol=0, atol=1e-14)
    np.testing.assert_allclose(torch.load(out / "model.pt").numpy(), e * (1 - 0.9**15), rtol=0, atol=1e-14)
    rounds = pd.read_csv(out / "rounds.csv")
    np.testing.assert_allclose(rounds["dist_to_opt"], [np.linalg.norm(x - e) for x in xs], rtol=0, atol=1e-14)
    assert rounds["sim_time"].tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]  # 0.25 + 3 / 2 + 0.25 per job
    cl = pd.read_csv(out / "clients.csv")
    assert cl["version"].tolist() == list(range(5)) and (cl["staleness"] == 0).all()
    assert cl["weight"].tolist() == [1.0] * 5


# ---------------------------------------------------------------------------- determinism, CRN, resume
MARKOV = {
    "name": "amarkov", "seed": 4, "rounds": 10,
    "data": {"name": "synthetic", "clients": 6},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "lognormal", "median": 4.0, "sigma": 0.6}, "latency": 0.2,
               "availability": {"model": "markov", "mean_online": 6.0, "mean_offline": 2.0}},
    "round": {"policy": "async", "local_steps": {"dist": "randint", "low": 2, "high": 8},
              "concurrency": 3, "buffer": 1},
    "algorithm": {"name": "fedasync", "lr": 0.05, "batch_size": 8, "staleness": "hinge",
                  "hinge_a": 2.0, "hinge_b": 1.0},
    "checkpoint": {"every": 3},
}


def test_determinism_and_common_random_numbers(tmp_path):
    """Same scenario twice: identical bytes. FedBuff vs FedAsync (other lr and staleness rule):
    the system columns of clients.csv are identical (the trace does not depend on the algorithm)."""
    _, a = _run(tmp_path, MARKOV, "a")
    _, b = _run(tmp_path, MARKOV, "b")
    for name in ("rounds.csv", "clients.csv", "model.pt"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    raw = _with(MARKOV, algorithm={"name": "fedbuff", "lr": 0.2, "staleness": "polynomial",
                                   "normalize_async": True, "server_opt": "adam", "server_lr": 0.05})
    _, c = _run(tmp_path, raw, "c")
    ca, cc = pd.read_csv(a / "clients.csv"), pd.read_csv(c / "clients.csv")
    pd.testing.assert_frame_equal(ca[SYSTEM_COLS], cc[SYSTEM_COLS])
    assert set(ca["status"]) >= {"completed", "failed"}  # the trace has outages mid-job
    assert (ca["staleness"] > 0).any()
    assert not ca["a_norm"].equals(cc["a_norm"]) or not ca["weight"].equals(cc["weight"])


@pytest.mark.parametrize("algo", [
    {"name": "fedasync"},
    {"name": "fedbuff", "staleness": "polynomial", "normalize_async": True, "server_opt": "adam",
     "server_lr": 0.05, "momentum": 0.5},
])
def test_resume_async_byte_identical(tmp_path, monkeypatch, algo):
    """Resume from every checkpoint (after updates 3, 6, 9) of a finished run: the checkpoint holds
    the model versions jobs in flight still need, the server moments and normalize_async's sums."""
    saved = []
    original = execute.save_checkpoint

    def keep(out, next_round, table_sizes, state, observed=None):
        original(out, next_round, table_sizes, state, observed)
        saved.append((next_round, (out / "checkpoint.pt").read_bytes()))

    monkeypatch.setattr(execute, "save_checkpoint", keep)
    raw = _with(MARKOV, algorithm=algo, round={"buffer": 2} if algo["name"] == "fedbuff" else {})
    path, ref = _run(tmp_path, raw, "ref")
    assert [k for k, _ in saved] == [3, 6, 9]
    old_versions = 0
    for k, blob in list(saved):
        out = tmp_path / f"from{k}"
        shutil.copytree(ref, out)
        (out / "model.pt").unlink()
        (out / "checkpoint.pt").write_bytes(blob)
        ck = torch.load(out / "checkpoint.pt", weights_only=True)
        assert ck["sim"]["server"]["version"] == k
        old_versions += len(ck["sim"]["versions"])
        assert all(v < k for v in ck["sim"]["versions"])
        assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
        for name in ("rounds.csv", "clients.csv", "model.pt"):
            assert (out / name).read_bytes() == (ref / name).read_bytes(), (k, name)
    assert old_versions > 0  # some checkpoint had to carry a stale version for a job in flight


# ---------------------------------------------------------------------------- bad input
BAD = [
    ({"round": {"buffer": 4}}, "round.buffer"),  # buffer > concurrency (3) for fedbuff
    ({"round": {"buffer": 0}}, "round.buffer"),
    ({"round": {"concurrency": 0}}, "round.concurrency"),
    ({"round": {"concurrency": 4}}, "round.concurrency"),  # more than the 3 clients
    ({"round": {"concurrency": None}}, "round.concurrency"),
    ({"round": {"local_steps": None}}, "round.local_steps"),
    ({"algorithm": {"staleness_exponent": -0.5}}, "algorithm.staleness_exponent"),
    ({"algorithm": {"staleness": "linear"}}, "algorithm.staleness"),
    ({"algorithm": {"hinge_a": 0}}, "algorithm.hinge_a"),
    ({"algorithm": {"hinge_b": -1}}, "algorithm.hinge_b"),
    ({"algorithm": {"name": "fedasync", "mixing": 0}}, "algorithm.mixing"),
    ({"algorithm": {"name": "fedasync", "mixing": 1.5}}, "algorithm.mixing"),
    ({"algorithm": {"name": "fedasync"}, "round": {"buffer": 2}}, "round.buffer"),
    ({"algorithm": {"aggregation": "nova"}}, "algorithm.aggregation"),
    ({"algorithm": {"correction": "scaffold"}}, "algorithm.correction"),
    ({"algorithm": {"solver": "amsgrad", "share_vhat": True}}, "algorithm.share_vhat"),
    ({"algorithm": {"name": "fedavg"}}, "algorithm.name"),  # async policy, synchronous algorithm
    ({"round": {"policy": "wait"}}, "algorithm.name"),  # fedbuff under a synchronous policy
    ({"round": {"policy": "window", "window": 5.0}, "algorithm": {"name": "fedasync"}}, "algorithm.name"),
]


@pytest.mark.parametrize("over, field", BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD)])
def test_bad_input_one_line_exit_2(tmp_path, capsys, over, field):
    raw = _with(WORLD, **over)
    for sec in ("round", "algorithm"):
        raw[sec] = {k: v for k, v in raw[sec].items() if v is not None}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{field}: "), err
    assert not (tmp_path / "o").exists()


def test_study_scenario_variants_share_the_trace():
    from pathlib import Path

    from fedsim.scenario import expand_variants, read_yaml

    path = Path(__file__).resolve().parents[1] / "scenarios" / "async_fedbuff_vs_fednova_window.yaml"
    sc = load_scenario(path)
    variants = dict(expand_variants(sc, read_yaml(path), path.parent))
    assert set(variants) == {"fedbuff_async", "fednova_window", "fedavg_wait"}
    assert {(v.seed, v.system) == (sc.seed, sc.system) for v in variants.values()} == {True}
    fb = variants["fedbuff_async"]
    assert (fb.round.policy, fb.algorithm.name, fb.round.buffer) == ("async", "fedbuff", 5)
    assert variants["fednova_window"].round.policy == "window"
    assert variants["fedavg_wait"].round.policy == "wait"
