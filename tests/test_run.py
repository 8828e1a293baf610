"""End to end: run folder contract, determinism, common random numbers, divergence, refusal."""

import filecmp

import numpy as np
import pandas as pd
import pytest
import torch

from fedsim import load_run
from fedsim.cli import main
from fedsim.report.tables import CLIENT_COLUMNS
from fedsim.runner.folder import table_columns

ROUND_COLUMNS = table_columns(quadratic=False)["rounds.csv"]

SYNTH = {
    "name": "synth",
    "seed": 3,
    "rounds": 4,
    "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 8},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "lognormal", "median": 4.0, "sigma": 0.7}, "latency": 0.25,
               "slowdown": {"dist": "uniform", "low": 1.0, "high": 1.5}},
    "round": {"policy": "window", "window": 3.0, "clients_per_round": 5},
    "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 8},
    "eval": {"every": 2},
}


def _run(write_yaml, tmp_path, raw, out, *sets):
    path = write_yaml(raw, name=f"{out}.yaml")
    args = ["run", str(path), "--out", str(tmp_path / out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return tmp_path / out


def test_run_folder_contract(write_yaml, tmp_path):
    out = _run(write_yaml, tmp_path, SYNTH, "a")
    for name in ("scenario.yaml", "rounds.csv", "clients.csv", "model.pt"):
        assert (out / name).is_file()
    rounds, clients = load_run(out)
    assert list(rounds.columns) == ROUND_COLUMNS
    assert list(clients.columns) == CLIENT_COLUMNS
    assert rounds["round"].tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(rounds["sim_time"], [3.0, 6.0, 9.0, 12.0])
    # evaluated every 2 rounds and at the end
    assert rounds["test_acc"].notna().tolist() == [False, True, False, True]
    assert set(clients["status"]) <= {"completed", "dropped", "offline", "failed"}
    # 5 of 8 clients selected each round
    assert clients.groupby("round").size().tolist() == [5, 5, 5, 5]
    # participants and tau stats agree with clients.csv
    done = clients[clients.status == "completed"]
    g = done.groupby("round")["steps"]
    assert rounds["participants"].tolist() == g.size().tolist()
    assert rounds["tau_max"].tolist() == g.max().tolist()
    # SGD: ||a_i||_1 = tau_i
    assert (done["a_norm"] == done["steps"]).all()
    state = torch.load(out / "model.pt", weights_only=True)
    assert set(state) == {"linear.weight", "linear.bias"} or all(isinstance(v, torch.Tensor) for v in state.values())


def test_same_seed_byte_identical(write_yaml, tmp_path):
    a = _run(write_yaml, tmp_path, SYNTH, "a")
    b = _run(write_yaml, tmp_path, SYNTH, "b")
    for name in ("rounds.csv", "clients.csv"):
        assert filecmp.cmp(a / name, b / name, shallow=False)
    c = _run(write_yaml, tmp_path, SYNTH, "c", "seed=4")
    assert not filecmp.cmp(a / "clients.csv", c / "clients.csv", shallow=False)


def test_common_random_numbers_across_algorithms(write_yaml, tmp_path):
    keys = ["round", "client", "status", "steps", "start", "end"]
    ref = load_run(_run(write_yaml, tmp_path, SYNTH, "nova")).clients[keys]
    for algo, extra in [("fedavg", []), ("fedprox", []), ("fedadam", []), ("localadam", ["algorithm.lr=0.01"])]:
        other = load_run(_run(write_yaml, tmp_path, SYNTH, algo, f"algorithm.name={algo}", *extra)).clients[keys]
        pd.testing.assert_frame_equal(ref, other)


def test_divergence_is_a_result(write_yaml, tmp_path):
    raw = {
        "name": "div", "rounds": 30,
        "data": {"name": "quadratic", "centers": [[1.0], [3.0]]},
        "round": {"policy": "wait", "local_steps": 5},
        "algorithm": {"name": "fedavg", "lr": 30.0, "batch_size": 1},
    }
    out = _run(write_yaml, tmp_path, raw, "div")
    rounds = load_run(out).rounds
    assert rounds["diverged"].iloc[-1] == 1 and (rounds["diverged"].iloc[:-1] == 0).all()
    assert len(rounds) < 30  # stopped at the first non-finite round
    assert (out / "model.pt").exists()


def test_refuses_other_run_without_force(write_yaml, tmp_path, capsys):
    out = _run(write_yaml, tmp_path, SYNTH, "x")
    path = write_yaml({**SYNTH, "seed": 9}, name="other.yaml")
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    assert "different scenario" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(out), "--quiet", "--force"]) == 0


def test_progress_silent_when_not_a_terminal(write_yaml, tmp_path, capsys):
    path = write_yaml(SYNTH)
    assert main(["run", str(path), "--out", str(tmp_path / "p")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "synth" in captured.out  # the summary table


def test_info_names_the_dataset_actually_used(write_yaml, tmp_path, capsys):
    import yaml

    raw = {**SYNTH, "data": {"name": "cifar10", "standin": True, "clients": 2, "n_train": 40, "n_test": 20},
           "model": {"name": "logreg"}, "rounds": 1, "round": {"policy": "wait", "local_steps": 1},
           "engine": {"threads": 1}}
    raw.pop("system")
    out = _run(write_yaml, tmp_path, raw, "standin")
    info = yaml.safe_load((out / "info.yaml").read_text())
    assert info["data"] == "cifar10-standin" and info["standin"] is True
    assert info["parameters"] == 3 * 32 * 32 * 10 + 10  # logreg on 3x32x32, 10 classes
    assert "cifar10-standin" in capsys.readouterr().out


def test_data_seed_fixes_the_dataset_across_run_seeds():
    from fedsim.engine.workload import build_workload
    from fedsim.scenario import parse_scenario

    def work(seed, data_seed=None):
        data = {**SYNTH["data"], **({} if data_seed is None else {"seed": data_seed})}
        return build_workload(parse_scenario({**SYNTH, "seed": seed, "data": data}), torch.device("cpu"), torch.float32)

    a, b, c = work(1, data_seed=7), work(2, data_seed=7), work(2)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    wa, wb = (next(iter(w.init_params.values())) for w in (a, b))
    assert not torch.equal(wa, wb)  # the training seed (model init) still differs
    assert a.x_train.shape != c.x_train.shape or not torch.equal(a.x_train, c.x_train)


def test_digits_test_fraction_is_used(write_yaml, tmp_path):
    import yaml

    sizes = {}
    for frac in (0.2, 0.5):
        raw = {"name": "dg", "rounds": 1, "data": {"name": "digits", "clients": 3, "test_fraction": frac},
               "model": {"name": "logreg"}, "round": {"policy": "wait", "local_steps": 1}}
        out = _run(write_yaml, tmp_path, raw, f"dg{frac}")
        sizes[frac] = yaml.safe_load((out / "info.yaml").read_text())
    total = sizes[0.2]["train_samples"] + sizes[0.2]["test_samples"]
    assert total == 1797  # scikit-learn's digits
    assert abs(sizes[0.2]["test_samples"] - 0.2 * total) < 10 and abs(sizes[0.5]["test_samples"] - 0.5 * total) < 10
