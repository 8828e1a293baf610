"""``eval.per_client`` (issue 36 item 2): the global model on each sampled client's own test
data, by device tier; ``client_evals.csv``, its loaders and its figure. Expected values come from
a plain loop over the clients' test data with the saved model and torch, and from hand-made
speed lists."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import fedsim
from fedsim.cli import main
from fedsim.data import SyntheticPopulation
from fedsim.data.holdout import hold_out
from fedsim.runner.client_evals import CLIENT_EVAL_COLUMNS, sample_clients, speed_tiers, summary_rows

from _tiny_runs import exit_2

SPEEDS = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 2.5, 7.0]
RAW = {
    "name": "pc", "seed": 0, "rounds": 3,
    "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 8},
    "model": {"name": "logreg"},
    "system": {"speed": SPEEDS, "latency": 0.5},
    "round": {"policy": "window", "window": 5.0, "max_local_steps": 20},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
    "eval": {"per_client": {"clients": 5, "tiers": 2}},
}


def _write(tmp_path: Path, raw: dict, name: str = "s") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_speed_tiers_by_hand():
    # speeds 5 1 3 2 4 6: ranks 4 0 2 1 3 5; floor(3 rank / 6) = 2 0 1 0 1 2
    assert speed_tiers([5, 1, 3, 2, 4, 6], 3).tolist() == [2, 0, 1, 0, 1, 2]
    # ties: lower client first; 4 clients, 2 tiers
    assert speed_tiers([1, 1, 1, 1], 2).tolist() == [0, 0, 1, 1]
    assert speed_tiers([3.0, 1.0], 1).tolist() == [0, 0]


def test_summary_rows_by_hand():
    acc = np.arange(1, 12) / 10.0  # 0.1 .. 1.1, 11 clients: ceil(1.1) = 2 in each tail
    loss = np.ones(11)
    tiers = np.array([0] * 5 + [1] * 6)
    rows = summary_rows(acc, loss, tiers, 3)
    assert [r["group"] for r in rows] == ["all", "tier0", "tier1", "tier2"]
    assert rows[0]["acc_worst10"] == pytest.approx(0.15) and rows[0]["acc_best10"] == pytest.approx(1.05)
    assert rows[0]["acc_mean"] == pytest.approx(0.6) and rows[0]["acc_std"] == pytest.approx(math.sqrt(0.1))
    assert rows[1]["clients"] == 5 and rows[1]["acc_worst10"] == pytest.approx(0.1)  # ceil(0.5) = 1
    assert rows[3] == {"group": "tier2", "clients": 0}


def test_per_client_rows_equal_a_plain_loop(tmp_path):
    """The last evaluation's rows equal accuracies computed here from model.pt and each sampled
    client's own 10 % test split (SyntheticPopulation.client), grouped by tiers of the speed list."""
    out = tmp_path / "run"
    assert main(["run", str(_write(tmp_path, RAW)), "--out", str(out)]) == 0
    sd = torch.load(out / "model.pt")
    w, b = sd["1.weight"].double(), sd["1.bias"].double()
    pop = SyntheticPopulation(1.0, 1.0, clients=8, seed=0)  # data.seed defaults to the seed
    sample = sample_clients(8, 5, 0)
    accs = []
    for k in sample:
        c = pop.client(int(k))
        x = torch.as_tensor(c.x[c.test].astype(np.float32)).double()
        pred = (x @ w.T + b).argmax(1).numpy()
        accs.append(float((pred == c.y[c.test]).mean()))
    accs = np.array(accs)
    tiers = np.array([speed_tiers(SPEEDS, 2)[k] for k in sample])
    df = pd.read_csv(out / "client_evals.csv")
    assert list(df.columns) == CLIENT_EVAL_COLUMNS
    assert sorted(set(df["round"])) == [0, 1, 2]  # eval.every 1: every round
    last = df[df["round"] == 2].set_index("group")
    assert last.loc["all", "clients"] == 5
    assert last.loc["all", "acc_mean"] == pytest.approx(accs.mean(), abs=1e-6)
    assert last.loc["all", "acc_std"] == pytest.approx(accs.std(), abs=1e-6)
    assert last.loc["all", "acc_worst10"] == pytest.approx(accs.min(), abs=1e-6)  # ceil(0.5) = 1 client
    assert last.loc["all", "acc_best10"] == pytest.approx(accs.max(), abs=1e-6)
    for t in (0, 1):
        assert last.loc[f"tier{t}", "clients"] == (tiers == t).sum()
        assert last.loc[f"tier{t}", "acc_mean"] == pytest.approx(accs[tiers == t].mean(), abs=1e-6)
    # the loaders and the figure
    run = fedsim.load_run(out)
    rounds, clients = run
    assert len(rounds) == 3 and run.client_evals.equals(df)
    assert fedsim.load_run(out).client_evals is not None
    long = fedsim.load_compare(tmp_path, "client_evals")
    assert len(long) == len(df) and "cell" in long.columns
    from fedsim.report.plots import plot_dir

    assert (tmp_path / "fig2" / "client_accuracy.png") in plot_dir(out, tmp_path / "fig2")


def test_training_is_unchanged_and_grid_times_match(tmp_path):
    """The per-client evaluation only reads the model: rounds, clients and the model are the
    run's without it; on a time grid its rows sit at evals.csv's times and rounds."""
    raw = yaml.safe_load(yaml.safe_dump(RAW))
    raw["eval"]["every_seconds"] = 4.0
    plain = yaml.safe_load(yaml.safe_dump(raw))
    del plain["eval"]["per_client"]
    for name, r in (("a", raw), ("b", plain)):
        assert main(["run", str(_write(tmp_path, r, name)), "--out", str(tmp_path / name)]) == 0
    for f in ("rounds.csv", "clients.csv", "model.pt", "evals.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    ev = pd.read_csv(tmp_path / "a" / "evals.csv")
    ce = pd.read_csv(tmp_path / "a" / "client_evals.csv")
    alls = ce[ce["group"] == "all"]
    assert alls["sim_time"].tolist() == ev["sim_time"].tolist() == [4.0, 8.0, 12.0]
    assert alls["round"].tolist() == ev["round"].tolist()
    assert not (tmp_path / "b" / "client_evals.csv").exists()


def test_holdout_splits_each_client_and_digits_run(tmp_path):
    from fedsim.data.digits import digits
    from fedsim.data.partition import PartitionSpec

    ds = digits(6, PartitionSpec(name="dirichlet", alpha=0.5), seed=0)
    trimmed, held = hold_out(ds, 0.25, seed=0)
    for k, ix in enumerate(ds.client_indices):
        n = len(ix)
        assert len(held[k]) == min(n // 4, n - 1)
        assert sorted(np.concatenate([trimmed.client_indices[k], held[k]]).tolist()) == sorted(ix.tolist())
    raw = {"name": "d", "seed": 0, "rounds": 2, "data": {"name": "digits", "clients": 6,
                                                         "partition": {"name": "dirichlet", "alpha": 0.5}},
           "model": {"name": "logreg"}, "system": {"speed": 2.0},
           "round": {"policy": "wait", "local_steps": 3},
           "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
           "eval": {"per_client": {"clients": 6, "tiers": 1, "holdout": 0.25}}}
    out = tmp_path / "d"
    assert main(["run", str(_write(tmp_path, raw, "d")), "--out", str(out)]) == 0
    ce = pd.read_csv(out / "client_evals.csv")
    assert set(ce["group"]) == {"all", "tier0"} and (ce["clients"] == 6).all()
    # the clients trained on what was left: n_i in the clock are the trimmed sizes
    parts = pd.read_csv(out / "partition.csv")
    assert parts.groupby("client")["count"].sum().tolist() == [len(ix) for ix in trimmed.client_indices]


@pytest.mark.parametrize("override, needle", [
    ("eval.per_client.clients=0", "eval.per_client.clients"),
    ("eval.per_client.tiers=0", "eval.per_client.tiers"),
    ("eval.per_client.holdout=0", "eval.per_client.holdout"),
    ("eval.per_client.holdout=1", "eval.per_client.holdout"),
    ("eval.per_client.holdout=-0.2", "eval.per_client.holdout"),
    ("eval.per_client.holdout=nan", "eval.per_client.holdout"),
    ("eval.per_client.tiers=1.5", "eval.per_client.tiers"),
    ("eval.per_client.colour=1", "eval.per_client.colour"),
])
def test_bad_per_client_keys_are_one_line(tmp_path, capsys, override, needle):
    exit_2(capsys, ["validate", str(_write(tmp_path, RAW)), "--set", override], needle)


def test_sources_and_holdout_refusals(tmp_path, capsys):
    syn = yaml.safe_load(yaml.safe_dump(RAW))
    syn["eval"]["per_client"]["holdout"] = 0.2
    exit_2(capsys, ["run", str(_write(tmp_path, syn, "a")), "--out", str(tmp_path / "a")],
           "eval.per_client.holdout: synthetic carries per-client test data")
    dig = {"name": "d", "seed": 0, "rounds": 1, "data": {"name": "digits", "clients": 4},
           "model": {"name": "logreg"}, "round": {"policy": "wait", "local_steps": 1},
           "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10}, "eval": {"per_client": {}}}
    exit_2(capsys, ["run", str(_write(tmp_path, dig, "b")), "--out", str(tmp_path / "b")],
           "eval.per_client.holdout: digits has no per-client test data")
    quad = {"name": "q", "seed": 0, "rounds": 1, "data": {"name": "quadratic", "centers": [[1.0], [2.0]]},
            "round": {"policy": "wait", "local_steps": 1}, "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1},
            "eval": {"per_client": {}}}
    exit_2(capsys, ["run", str(_write(tmp_path, quad, "c")), "--out", str(tmp_path / "c")],
           "eval.per_client: the quadratic problem has no test data")


def test_per_user_test_parts_from_python_data(tmp_path):
    """A FederatedData with per-user test parts (LEAF's split, here made by hand): each sampled
    client is evaluated on its own part; the rows equal a loop with the saved model; coupling
    and per-client evaluation run together."""
    from fedsim.data import FederatedData

    rng = np.random.default_rng(0)
    train, test = [], []
    for k in range(6):
        x = rng.normal(k % 3, 1.0, (20 + k, 4)).astype(np.float32)
        y = (x[:, 0] > k % 3).astype(np.int64) + 2 * (k % 2)
        train.append((x, y))
        xt = rng.normal(k % 3, 1.0, (5 + k, 4)).astype(np.float32)
        test.append((xt, (xt[:, 0] > k % 3).astype(np.int64) + 2 * (k % 2)))
    data = FederatedData.from_clients(train, client_test=test, num_classes=4)
    raw = {"name": "u", "seed": 2, "rounds": 2, "data": {"name": "from_python"}, "model": {"name": "logreg"},
           "system": {"speed": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                      "coupling": {"by": "speed", "to": "dominant_label", "strength": 1.0}},
           "round": {"policy": "wait", "local_steps": 3},
           "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 5},
           "eval": {"per_client": {"clients": 4, "tiers": 3}}}
    out = tmp_path / "u"
    fedsim.run(raw, out=out, data=data)
    sd = torch.load(out / "model.pt")
    w, b = sd["1.weight"].double(), sd["1.bias"].double()
    sample = sample_clients(6, 4, 2)  # data.seed defaults to the seed
    accs = np.array([float(((torch.as_tensor(test[k][0]).double() @ w.T + b).argmax(1).numpy() == test[k][1]).mean())
                     for k in sample])
    last = pd.read_csv(out / "client_evals.csv").query("round == 1").set_index("group")
    assert last.loc["all", "acc_mean"] == pytest.approx(accs.mean(), abs=1e-6)
    assert last.loc["all", "clients"] == 4


def test_docs_state_the_columns_keys_and_measured_cost():
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "client-accuracy.md").read_text()
    table = text.split("## `client_evals.csv`", 1)[1].split("## Cost", 1)[0]
    import re

    assert re.findall(r"^\| `([a-z_0-9]+)` \|", table, re.M) == CLIENT_EVAL_COLUMNS
    from fedsim.scenario.settings import PerClientEval

    assert set(PerClientEval.model_fields) == {"clients", "tiers", "holdout"}
    for key, default in (("clients", 50), ("tiers", 4)):
        assert PerClientEval.model_fields[key].default == default
        assert f"`eval.per_client.{key}` (default {default})" in text
    # the cost table's ratios are the recorded benchmark's rows
    rows = pd.read_csv(root / "benchmarks" / "results" / "client_eval.csv")
    for _, r in rows.iterrows():
        assert f"{r['ratio_wall']:.3f} | {r['ratio_cpu']:.3f}" in text
        per = 1000 * r["eval_wall_s"] / r["evaluations"]
        assert f"{per:.0f} ms" in text


@pytest.mark.parametrize("grid", [False, True])
def test_resume_keeps_the_rows_before_and_redoes_the_rest(tmp_path, grid):
    """A finished run resumed from its last checkpoint (round 6 of 8) rewrites client_evals.csv
    byte for byte: the rows before the resumed round (grid: its open) kept, the rest recomputed
    once (not appended twice)."""
    import shutil

    raw = yaml.safe_load(yaml.safe_dump(RAW))
    raw.update(rounds=8, checkpoint={"every": 2})
    if grid:
        raw["eval"]["every_seconds"] = 3.0
    path = _write(tmp_path, raw)
    ref = tmp_path / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    out = tmp_path / "copy"
    shutil.copytree(ref, out)
    (out / "model.pt").unlink()
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    text = (ref / "client_evals.csv").read_text()
    assert (out / "client_evals.csv").read_text() == text
    df = pd.read_csv(out / "client_evals.csv")
    assert not df.duplicated(["sim_time", "group"]).any()
    if not grid:  # one evaluation per round, three groups (all, tier0, tier1)
        assert df["round"].tolist() == [r for r in range(8) for _ in range(3)]


def test_leaf_files_couple_and_evaluate_per_writer(tmp_path):
    """FEMNIST in LEAF's layout (four writers, each with its own test part): coupling by speed to
    the dominant label sorts the devices exactly, and the per-client rows equal a loop over the
    writers' own test parts with model.pt."""
    from _leaf_files import femnist_user, write_leaf_folder
    from fedsim.data.femnist import load_femnist

    sizes = {"w0": (6, 3), "w1": (5, 2), "w2": (7, 4), "w3": (4, 3)}
    write_leaf_folder(tmp_path / "data", femnist_user, sizes, seed=3)
    fd = load_femnist(tmp_path / "data")
    dominant = [int(np.argmax(np.bincount(fd.client_data(k)[1]))) for k in range(4)]
    raw = {"name": "leaf", "seed": 0, "rounds": 2,
           "data": {"name": "femnist", "root": str(tmp_path / "data")}, "model": {"name": "logreg"},
           "system": {"speed": [4.0, 1.0, 3.0, 2.0],
                      "coupling": {"by": "speed", "to": "dominant_label", "strength": 1.0}},
           "round": {"policy": "wait", "local_steps": 2},
           "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 2},
           "eval": {"per_client": {"clients": 4, "tiers": 2}}}
    out = tmp_path / "run"
    fedsim.run(raw, out=out)
    # exact sort: the writer with the k-th smallest dominant label (ties: lower number) on the k-th slowest device
    order = sorted(range(4), key=lambda k: (dominant[k], k))
    speeds = np.empty(4)
    speeds[order] = [1.0, 2.0, 3.0, 4.0]
    clients = pd.read_csv(out / "clients.csv")
    assert set(clients["client"]) == {0, 1, 2, 3}
    sd = torch.load(out / "model.pt")
    w, b = sd["1.weight"].double(), sd["1.bias"].double()
    accs = []
    for k in range(4):
        x, y = fd.client_test(k)
        x = torch.as_tensor(np.asarray(x, np.float32)).reshape(len(y), -1).double()
        accs.append(float(((x @ w.T + b).argmax(1).numpy() == np.asarray(y)).mean()))
    accs = np.array(accs)
    tiers = speed_tiers(speeds, 2)
    last = pd.read_csv(out / "client_evals.csv").query("round == 1").set_index("group")
    assert last.loc["all", "acc_mean"] == pytest.approx(accs.mean(), abs=1e-6)
    for t in (0, 1):
        assert last.loc[f"tier{t}", "acc_mean"] == pytest.approx(accs[tiers == t].mean(), abs=1e-6)
    # the wait round lasts the slowest selected job: 2 steps at the slowest device speed (1.0), no transfers
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["sim_time"].tolist() == [2.0, 4.0]
