"""``eval.every_seconds`` (issue 19 point 4): the model as it stands at S, 2S, ... in evals.csv.

The model standing at time g is the one after the last round (server update) closing at or
before g; with ``eval.every: 1`` every round's model is also evaluated in rounds.csv, so each grid
row must repeat exactly the metrics of the rounds.csv row of its ``round``. The grid only reads the
model: rounds.csv and clients.csv are byte-identical with and without it. A killed and resumed run
writes the same evals.csv.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fedsim.cli import main

S = 1.7
BASE = {
    "name": "grid", "seed": 1, "rounds": 8,
    "data": {"name": "synthetic", "clients": 6}, "model": {"name": "logreg"},
    "system": {"speed": {"dist": "uniform", "low": 2.0, "high": 6.0}, "latency": 0.1,
               "availability": {"model": "markov", "mean_online": 8.0, "mean_offline": 2.0}},
    "round": {"policy": "window", "window": 2.0, "clients_per_round": 4},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8},
    "eval": {"every": 1, "every_seconds": S},
}
POLICIES = {
    "window": {},
    "wait": {"policy": "wait", "local_steps": 5, "window": None},
    "deadline": {"policy": "deadline", "local_steps": 5, "deadline": 1.5, "window": None},
    "async": {"policy": "async", "local_steps": 5, "concurrency": 3, "buffer": 2, "window": None,
              "clients_per_round": None},
}


def scenario(policy: str, **top) -> dict:
    rnd = {k: v for k, v in {**BASE["round"], **POLICIES[policy]}.items() if v is not None}
    raw = {**BASE, "round": rnd, **top}
    if policy == "async":
        raw["algorithm"] = {**BASE["algorithm"], "name": "fedbuff"}
    return raw


@pytest.mark.parametrize("policy", list(POLICIES))
def test_grid_rows_are_the_standing_models_metrics(policy, tmp_path, write_yaml):
    out = tmp_path / "run"
    assert main(["run", str(write_yaml(scenario(policy))), "--out", str(out), "--quiet"]) == 0
    rounds = pd.read_csv(out / "rounds.csv")
    evals = pd.read_csv(out / "evals.csv")
    assert list(evals.columns) == ["sim_time", "round", "test_loss", "test_acc", "train_loss"]
    end = rounds["sim_time"].iloc[-1]
    n = math.floor(end / S)
    assert evals["sim_time"].tolist() == [k * S for k in range(1, n + 1)]  # S, 2S, ... up to the end
    closes = rounds["sim_time"].tolist()
    for row in evals.itertuples():
        standing = max((r for r, c in enumerate(closes) if c <= row.sim_time), default=-1)
        assert row.round == standing
        if standing >= 0:
            ref = rounds.iloc[standing]
            assert (row.test_loss, row.test_acc, row.train_loss) == (ref.test_loss, ref.test_acc, ref.train_loss)
        else:
            assert math.isfinite(row.test_loss) and 0 <= row.test_acc <= 1
    assert (evals["round"] == -1).any() or closes[0] <= S


def test_the_grid_does_not_change_the_run(tmp_path, write_yaml):
    raw = scenario("wait")
    plain = {**raw, "eval": {"every": 1}}
    for name, r in (("grid", raw), ("plain", plain)):
        assert main(["run", str(write_yaml(r, name + ".yaml")), "--out", str(tmp_path / name), "--quiet"]) == 0
    for f in ("rounds.csv", "clients.csv", "model.pt"):
        assert (tmp_path / "grid" / f).read_bytes() == (tmp_path / "plain" / f).read_bytes(), f
    assert not (tmp_path / "plain" / "evals.csv").exists()


FAULTS = Path(__file__).with_name("_faults.py")


@pytest.mark.parametrize("policy, fault", [("wait", "round:5"), ("async", "round:6")])
def test_killed_then_resumed_writes_the_same_grid(policy, fault, tmp_path, write_yaml):
    path = write_yaml({**scenario(policy), "checkpoint": {"every": 2}})
    ref = tmp_path / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    out = tmp_path / "run"
    killed = subprocess.run([sys.executable, str(FAULTS), fault, "run", str(path), "--quiet", "--out", str(out)],
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    for f in ("evals.csv", "rounds.csv", "clients.csv"):
        assert (out / f).read_bytes() == (ref / f).read_bytes(), f


def test_summary_reads_the_grid_first_grid_time_reached():
    """With evals.csv, accuracies come from the grid and time to target is the first grid time
    reaching it (no interpolation); rounds.csv alone keeps the interpolated crossing."""
    from fedsim.report.summary import run_summary

    rounds = pd.DataFrame({"round": [0, 1, 2], "sim_time": [4.0, 9.0, 15.0], "test_acc": [0.2, 0.5, 0.9],
                           "test_loss": [2.0, 1.0, 0.5], "train_loss": [2.1, 1.1, 0.6], "diverged": [0, 0, 0]})
    evals = pd.DataFrame({"sim_time": [5.0, 10.0, 15.0], "round": [0, 1, 2], "test_acc": [0.2, 0.5, 0.9],
                          "test_loss": [2.0, 1.0, 0.5], "train_loss": [2.1, 1.1, 0.6]})
    plain = run_summary(rounds, 0.7)
    assert plain["time_to_target"] == 9.0 + (0.7 - 0.5) / (0.9 - 0.5) * 6.0
    grid = run_summary(rounds, 0.7, evals)
    assert grid["time_to_target"] == 15.0 and grid["final_acc"] == 0.9 and grid["sim_time"] == 15.0
    assert run_summary(rounds, 0.5, evals)["time_to_target"] == 10.0


def test_compare_summary_and_plots_use_the_grid(tmp_path, write_yaml):
    from fedsim.report.plots import plot_dir
    from fedsim.report.results import summarize

    raw = {**scenario("window"), "rounds": 5,
           "variants": {"window": {}, "wait": {"round.policy": "wait", "round.local_steps": 5}}}
    out = tmp_path / "runs"
    assert main(["run", str(write_yaml(raw)), "--out", str(out), "--quiet"]) == 0
    runs, _ = summarize(out, 0.3, write=False)
    for row in runs.itertuples():
        evals = pd.read_csv(out / row.cell / "evals.csv")
        assert row.final_acc == evals["test_acc"].iloc[-1]
        hit = evals[evals["test_acc"] >= 0.3]
        assert (math.isnan(row.time_to_target) and hit.empty) or row.time_to_target == hit["sim_time"].iloc[0]
    names = [p.name for p in plot_dir(out, tmp_path / "fig", target=0.3, per_cell=False)]
    assert "acc_vs_time.png" in names and "time_to_target.png" in names


def test_too_many_grid_times_are_refused(tmp_path, write_yaml, capsys, monkeypatch):
    # windows: the run's length is known (8 x 2 s = 16 s), so validation refuses 16 / 1e-6 grid times
    path = write_yaml({**BASE, "eval": {"every": 1, "every_seconds": 1e-6}})
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "eval.every_seconds: 8 windows of 2 s hold more than 1,000,000 grid times; use a larger interval")
    # other policies: the run stops with one line when it reaches the bound; the rows written stay
    import fedsim.runner.evals as evals_module

    monkeypatch.setattr(evals_module, "MAX_EVAL_ROWS", 3)
    out = tmp_path / "wait"
    assert main(["run", str(write_yaml(scenario("wait"), name="w.yaml")), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eval.every_seconds: the run reached 3 grid times")
    assert pd.read_csv(out / "evals.csv")["sim_time"].tolist() == [S, 2 * S, 3 * S]
