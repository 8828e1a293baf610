"""Compression wired into the engine (issue 26 item 1): what the server aggregates, what the
clients train from, where error feedback's residuals live, and that a run with them stops and
resumes byte-identically.

Hand-made worlds on F_i(x) = 1/2 ||x - e_i||^2 (exact gradients, float64): every expected model
is recomputed here in numpy from the equations of docs/compression.md and docs/algorithms.md
(local SGD, top-k by magnitude, FedNova's normalisation, SCAFFOLD's option II, fp16 rounding),
never read from the code under test.
"""

from __future__ import annotations

import signal
from itertools import islice

import numpy as np
import pytest
import torch
import yaml

from fedsim.cli import main
from fedsim.runner.build import build_run
from fedsim.scenario import parse_scenario

E = np.array([[1.0, -0.3, 3.1, -2.2], [0.4, 2.05, -1.3, 0.55], [-1.7, -0.9, 0.25, 4.3]])
LR = 0.1
WORLD = {  # speeds 1, 2, 4 steps/s in 2.5 s windows with 0.25 s transfers: tau = 2, 4, 8 every round
    "name": "wired", "seed": 0, "rounds": 4,
    "data": {"name": "quadratic", "centers": E.tolist()},
    "system": {"speed": [1.0, 2.0, 4.0], "latency": 0.25},
    "round": {"policy": "window", "window": 2.5},
    "algorithm": {"name": "fednova", "lr": LR, "batch_size": 1},
    "engine": {"dtype": "float64"},
}
TAU = [2, 4, 8]


def _with(base, **sections):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for sec, over in sections.items():
        raw[sec] = {**raw.get(sec, {}), **over} if isinstance(over, dict) else over
    return raw


def _steps(raw, rounds=None):
    """Run ``raw`` plan by plan (no folder); the engine after each round."""
    built = build_run(parse_scenario(raw))
    eng = built.engine
    for plan in islice(built.clock.plans(), rounds or raw["rounds"]):
        assert [j.steps for j in plan.jobs if j.status == "completed"] == TAU
        eng.step(plan)
        yield eng


def _local(x, e, steps, corr=0.0):
    y = x.copy()
    for _ in range(steps):
        y = y - LR * (y - e + corr)
    return y


def _topk(u, k):
    """The k entries of largest |u_j| (ties: the lowest index), the rest 0."""
    keep = np.argsort(-np.abs(u), kind="stable")[:k]
    out = np.zeros_like(u)
    out[keep] = u[keep]
    return out


# --------------------------------------------------------------------------- uplink, sync
def test_fednova_normalises_the_decompressed_topk_updates_with_error_feedback():
    """Per round: u_i = Delta_i + e_i, applied_i = topk(u_i, 2 of 4), e_i' = u_i - applied_i;
    FedNova d = tau_eff sum_i w_i applied_i / ||a_i||_1 with ||a_i||_1 = tau_i (plain SGD)."""
    raw = _with(WORLD, algorithm={"compression": {"name": "topk", "ratio": 0.5, "error_feedback": True}})
    x, res = np.zeros(4), np.zeros((3, 4))
    w = np.full(3, 1 / 3)
    for eng in _steps(raw):
        u = np.stack([_local(x, E[i], TAU[i]) - x for i in range(3)]) + res
        applied = np.stack([_topk(u[i], 2) for i in range(3)])
        res = u - applied
        tau_eff = float(w @ TAU)
        x = x + tau_eff * sum(w[i] * applied[i] / TAU[i] for i in range(3))
        np.testing.assert_allclose(eng.params["x"].numpy(), x, rtol=0, atol=1e-14)
        assert sorted(eng.server.residuals) == [0, 1, 2]
        for i in range(3):
            np.testing.assert_allclose(eng.server.residuals[i]["x"].numpy(), res[i], rtol=0, atol=1e-14)
            # applied + residual = u exactly (top-k keeps or leaves each entry whole)
            assert np.count_nonzero(res[i]) == 2


def test_without_error_feedback_no_residual_is_kept():
    raw = _with(WORLD, rounds=2, algorithm={"compression": {"name": "topk", "ratio": 0.25}})
    x = np.zeros(4)
    for eng in _steps(raw):
        applied = [_topk(_local(x, E[i], TAU[i]) - x, 1) for i in range(3)]
        x = x + float(np.mean(TAU)) * sum(applied[i] / TAU[i] for i in range(3)) / 3
        np.testing.assert_allclose(eng.params["x"].numpy(), x, rtol=0, atol=1e-14)
        assert eng.server.residuals == {}


def test_scaffold_control_variates_come_from_the_raw_deltas():
    """SCAFFOLD option II with top-k uploads: the model moves by the mean of the compressed
    changes; c_i+ = c_i - c - Delta_i / (eta tau_i) from the client's own (raw) change, sent
    uncompressed; c += sum_i p_i (c_i+ - c_i)."""
    raw = _with(WORLD, rounds=3, algorithm={"name": "scaffold", "compression": {"name": "topk", "ratio": 0.5}})
    x, c, ci = np.zeros(4), np.zeros(4), np.zeros((3, 4))
    for eng in _steps(raw):
        deltas = np.stack([_local(x, E[i], TAU[i], corr=c - ci[i]) - x for i in range(3)])
        new = ci - c - deltas / (LR * np.array(TAU, dtype=float))[:, None]
        c = c + (new - ci).sum(axis=0) / 3
        ci = new
        x = x + np.mean([_topk(d, 2) for d in deltas], axis=0)
        np.testing.assert_allclose(eng.params["x"].numpy(), x, rtol=0, atol=1e-13)
        np.testing.assert_allclose(eng.server.c["x"].numpy(), c, rtol=0, atol=1e-13)
        for i in range(3):
            np.testing.assert_allclose(eng.server.c_clients[i]["x"].numpy(), ci[i], rtol=0, atol=1e-13)


# --------------------------------------------------------------------------- downlink
def test_clients_train_from_the_fp16_broadcast_and_the_server_keeps_full_precision():
    """Each round the clients start from h = fp16(x); Delta_i = y_i - h; x += sum_i w_i Delta_i
    (FedAvg), x itself never rounded."""
    raw = _with(WORLD, algorithm={"name": "fedavg", "downlink_compression": "fp16"})
    x = np.array([0.1, -0.2, 1 / 3, 2.0 ** -30])  # none of them a half
    sc = parse_scenario(raw)
    built = build_run(sc)
    eng = built.engine
    eng.params = {"x": torch.tensor(x)}
    for plan in islice(built.clock.plans(), 4):
        eng.step(plan)
        h = x.astype(np.float16).astype(np.float64)
        assert not np.array_equal(h, x)
        x = x + np.mean([_local(h, E[i], TAU[i]) - h for i in range(3)], axis=0)
        np.testing.assert_allclose(eng.params["x"].numpy(), x, rtol=0, atol=1e-14)


# --------------------------------------------------------------------------- off and none
def test_the_none_compressor_writes_what_no_key_writes(tmp_path):
    outs = []
    for name, alg in (("off", {}), ("none", {"compression": {"name": "none", "error_feedback": True},
                                             "downlink_compression": "none"})):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_with(WORLD, algorithm=alg)))
        assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
        outs.append(tmp_path / name)
    for f in ("rounds.csv", "clients.csv", "model.pt"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f


# --------------------------------------------------------------------------- async
EQUAL = {  # four clients, p = (1, 2, 3, 4) / 10, equal speeds, no outages
    "name": "eq", "seed": 3, "rounds": 5,
    "data": {"name": "quadratic", "centers": [[1.0, 0.0, 0.5], [0.0, 2.0, -0.7], [-1.0, -1.0, 0.3], [3.0, 1.0, -2.1]],
             "weights": [1.0, 2.0, 3.0, 4.0]},
    "system": {"speed": 2.0, "latency": 0.25},
    "round": {"policy": "wait", "local_steps": 3},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1,
                  "compression": {"name": "topk", "ratio": 0.34, "error_feedback": True},
                  "downlink_compression": "fp16"},
    "engine": {"dtype": "float64"},
}


def test_full_buffer_fedbuff_with_compression_is_fedavg_wait_with_it(tmp_path):
    """buffer = concurrency = all clients, equal speeds, constant staleness: each buffer holds
    every client once at staleness 0, so FedBuff is FedAvg's wait round (tests/test_async.py) --
    with top-k + error feedback on the uploads (compressed at report time, residuals per client)
    and fp16 broadcasts (one per version) too, to the bit."""
    outs = []
    for name, raw in (("wait", EQUAL), ("fedbuff", _with(EQUAL, round={"policy": "async", "concurrency": 4, "buffer": 4},
                                                           algorithm={"name": "fedbuff", "staleness": "constant"}))):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
        outs.append(tmp_path / name)
    for f in ("rounds.csv", "clients.csv", "model.pt"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(_with(EQUAL, algorithm={"compression": None, "downlink_compression": None})))
    assert main(["run", str(plain), "--out", str(tmp_path / "plain"), "--quiet"]) == 0
    assert (tmp_path / "plain" / "model.pt").read_bytes() != (outs[0] / "model.pt").read_bytes()


def test_fedasync_mixes_toward_the_full_precision_start_plus_the_compressed_change():
    """One client, mixing 1, constant staleness: x <- x^{v} + topk(Delta) with Delta = y - fp16(x^v),
    y the local SGD from fp16(x^v): the start the server adds the change to is its own x^v."""
    raw = _with(EQUAL, rounds=4, data={"centers": [[1.0, -2.0, 0.5]]},
                round={"policy": "async", "concurrency": 1, "buffer": 1, "local_steps": 3},
                algorithm={"name": "fedasync", "mixing": 1.0, "staleness": "constant",
                           "compression": {"name": "topk", "ratio": 0.34}})
    raw["data"].pop("weights")
    built = build_run(parse_scenario(raw))
    eng = built.engine
    x = np.array([0.1, 0.2, -1 / 3])
    eng.params = eng.versions[0] = {"x": torch.tensor(x)}
    e = np.array([1.0, -2.0, 0.5])
    for plan in islice(built.clock.plans(), 4):
        eng.step(plan)
        h = x.astype(np.float16).astype(np.float64)
        x = x + _topk(_local(h, e, 3) - h, 2)
        np.testing.assert_allclose(eng.params["x"].numpy(), x, rtol=0, atol=1e-14)


def _async_scenario():
    return parse_scenario({
        "name": "batched", "seed": 4, "rounds": 8,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 40},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5,
                   "availability": {"model": "markov", "mean_online": 40.0, "mean_offline": 10.0}},
        "round": {"policy": "async", "concurrency": 16, "buffer": 4,
                  "local_steps": {"dist": "randint", "low": 2, "high": 6}},
        "algorithm": {"name": "fedbuff", "lr": 0.05, "batch_size": 5,
                      "compression": {"name": "topk", "ratio": 0.05, "error_feedback": True},
                      "downlink_compression": {"name": "qsgd", "levels": 255}},
        "engine": {"dtype": "float64", "threads": 1, "clients_per_batch": 1},
    })


def _async_models(prefetch_min):
    built = build_run(_async_scenario())
    eng = built.engine
    eng.prefetch_min = prefetch_min
    models, hits = [], 0
    for plan in islice(built.clock.plans(), 8):
        hits += sum(j.key in eng.trained for j in plan.jobs if j.status == "completed")
        eng.step(plan)
        models.append({k: v.clone() for k, v in eng.params.items()})
    return models, hits, eng


def test_prefetched_updates_are_compressed_when_they_report():
    """Jobs trained when their version's plan arrives (prefetch) hold raw updates until they
    report; compressed then, in the plan's order, the models equal those of jobs trained at
    report time, bit for bit (one client per chunk)."""
    a, hits, eng = _async_models(prefetch_min=1)
    b, none, _ = _async_models(prefetch_min=10**9)
    assert hits > 0 and none == 0
    assert len(eng.server.residuals) > 4
    for x, y in zip(a, b):
        assert all(torch.equal(x[k], y[k]) for k in x)


# --------------------------------------------------------------------------- checkpoint and resume
RESUME = {
    "name": "resume-wire", "seed": 1, "rounds": 8,
    "data": {"name": "synthetic", "clients": 6},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "uniform", "low": 2.0, "high": 6.0}, "latency": 0.1,
               "availability": {"model": "markov", "mean_online": 8.0, "mean_offline": 2.0}},
    "round": {"policy": "window", "window": 2.0, "clients_per_round": 4},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8,
                  "compression": {"name": "topk", "ratio": 0.01, "error_feedback": True},
                  "downlink_compression": {"name": "qsgd", "levels": 15}},
    "checkpoint": {"every": 2},
}
ASYNC = _with(RESUME, name="resume-wire-async", rounds=10,
              round={"policy": "async", "concurrency": 4, "buffer": 2, "local_steps": 3, "window": None,
                     "clients_per_round": None},
              algorithm={"name": "fedbuff", "server_opt": "adam"}, checkpoint={"every": 3})


@pytest.mark.parametrize("raw, fault", [(RESUME, "round:5"), (ASYNC, "round:7")], ids=["sync", "async"])
def test_killed_and_resumed_with_error_feedback_is_byte_identical(tmp_path, raw, fault):
    """SIGKILL after round 5's (async: update 7's) rows, before its checkpoint; resumed from the
    checkpoint, which holds every client's residual, the run ends byte-identical."""
    from tests.test_resume import FILES, _killed

    raw = {k: v for k, v in raw.items()}
    raw["round"] = {k: v for k, v in raw["round"].items() if v is not None}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    ref = tmp_path / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    out = tmp_path / "run"
    assert _killed(path, out, fault).returncode == -signal.SIGKILL
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    residuals = ck["sim"]["server"]["residuals"]
    assert residuals and all(set(r) == set(ck["sim"]["params"]) for r in residuals.values())
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    for name in FILES:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
