"""Issue 17: a bad client of an on-demand ``FederatedData`` (``client_data(k)`` returning lengths
that differ, or that disagree with ``sizes``).

* default ``check_clients: "touched"``: a client outside the evaluation sample is checked when the
  run first fetches it; a bad one stops the run there with one line, exit 2, and the rows and
  checkpoint already written are kept intact (a resumed run with the data fixed ends
  byte-identical to an uninterrupted one);
* ``check_clients: "all"``: every client is fetched and checked once before the run folder is
  touched: the bad client is one line, exit 2, nothing written (an earlier run's folder stays as
  it was, even with ``--force``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import fedsim
from fedsim.data.federated import FederatedData
from fedsim.engine.from_data import fetcher
from fedsim.engine.workload_value import eval_sample
from fedsim.errors import ScenarioError
from fedsim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
M = 12
SCENARIO = {
    "name": "ondemand", "seed": 0, "rounds": 4,
    "data": {"name": "ondemand", "clients": M},
    "model": {"name": "logreg"},
    "round": {"policy": "wait", "local_steps": 2, "clients_per_round": 3},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 4},
    "system": {"speed": 1.0}, "eval": {"clients": 2}, "checkpoint": {"every": 1},
}
API = {**SCENARIO, "data": {}}  # fedsim.run(data=...): data.name from_python, data.clients from the data
SAMPLE = eval_sample(M, 2, parse_scenario({**SCENARIO, "data": {"name": "synthetic", "clients": M}}).data_seed).tolist()

# The plug-in's dataset: client FEDSIM_TEST_BAD returns 6 inputs and 5 targets; FEDSIM_TEST_CHECK
# sets check_clients; FEDSIM_TEST_CALLS (a file) records every call.
PLUGIN = '''
import os

import numpy as np

import fedsim
from fedsim.data.federated import FederatedData


def client(k):
    calls = os.environ.get("FEDSIM_TEST_CALLS")
    if calls:
        with open(calls, "a") as f:
            f.write(f"{k}\\n")
    rng = np.random.default_rng(k)
    x, y = rng.normal(size=(6, 3)).astype(np.float32), rng.integers(0, 2, 6)
    return (x, y[:5]) if k == int(os.environ.get("FEDSIM_TEST_BAD", "-1")) else (x, y)


def ondemand(config, seed):
    return FederatedData(sizes=np.full(config.clients, 6), client_data=client, test=client(0), num_classes=2,
                         name="ondemand", check_clients=os.environ.get("FEDSIM_TEST_CHECK", "touched"))


fedsim.register_dataset("ondemand", ondemand)
'''


def client(k, bad=-1):
    rng = np.random.default_rng(k)
    x, y = rng.normal(size=(6, 3)).astype(np.float32), rng.integers(0, 2, 6)
    return (x, y[:5]) if k == bad else (x, y)


def data(bad=-1, calls=None, **kw):
    def get(k):
        if calls is not None:
            calls.append(k)
        return client(k, bad)

    return FederatedData(sizes=np.full(M, 6), client_data=get, test=client(0), num_classes=2, name="ondemand", **kw)


def late_client(clients_csv: Path) -> int:
    """A client first selected in round 1 or later and outside the evaluation sample."""
    rows = pd.read_csv(clients_csv)
    first = rows.groupby("client")["round"].min()
    late = [int(c) for c, r in first.items() if r >= 1 and c not in SAMPLE]
    assert late, first
    return late[0]


def cli(tmp_path, *args, **env):
    """``fedsim run s.yaml ARGS --plugin ondemand_pieces`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "fedsim", "run", "s.yaml", "--quiet", "--plugin", "ondemand_pieces",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})


@pytest.fixture
def cli_dir(tmp_path):
    (tmp_path / "ondemand_pieces.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    return tmp_path


def files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ---------------------------------------------------------------------------------- default: lazy
def test_a_bad_client_met_mid_run_on_the_command_line_keeps_the_rows(cli_dir):
    good = cli(cli_dir, "--out", "good")
    assert good.returncode == 0, good.stderr
    bad = late_client(cli_dir / "good" / "clients.csv")
    proc = cli(cli_dir, "--out", "bad", FEDSIM_TEST_BAD=str(bad))
    assert proc.returncode == 2
    assert proc.stderr == f"data: client_data({bad}) returned 6 inputs and 5 targets\n"
    first = pd.read_csv(cli_dir / "good" / "clients.csv").groupby("client")["round"].min()[bad]
    lines = (cli_dir / "good" / "rounds.csv").read_text().splitlines(keepends=True)
    assert (cli_dir / "bad" / "rounds.csv").read_text() == "".join(lines[: first + 1])  # header + rounds before
    assert not (cli_dir / "bad" / "model.pt").exists()
    ck = torch.load(cli_dir / "bad" / "checkpoint.pt", weights_only=True)
    assert ck["next_round"] == first
    resumed = cli(cli_dir, "--resume", "bad")  # the data fixed: it ends as the uninterrupted run
    assert resumed.returncode == 0, resumed.stderr
    for name in ("rounds.csv", "clients.csv", "model.pt"):
        assert (cli_dir / "bad" / name).read_bytes() == (cli_dir / "good" / name).read_bytes(), name


def test_a_bad_client_met_mid_run_through_the_api(tmp_path):
    fedsim.run(API, data=data(), out=tmp_path / "good")
    bad = late_client(tmp_path / "good" / "clients.csv")
    calls = []
    with pytest.raises(ScenarioError) as err:
        fedsim.run(API, data=data(bad, calls), out=tmp_path / "bad")
    assert str(err.value) == f"data: client_data({bad}) returned 6 inputs and 5 targets"
    assert calls[-1] == bad and bad not in calls[:-1]  # lazy: met when its round fetched it
    rounds = pd.read_csv(tmp_path / "bad" / "rounds.csv")
    good = pd.read_csv(tmp_path / "good" / "rounds.csv")
    assert len(rounds) >= 1
    pd.testing.assert_frame_equal(rounds, good.iloc[: len(rounds)])


# ---------------------------------------------------------------------------------- "all": up front
def test_check_all_refuses_a_bad_client_before_the_folder_through_the_api(tmp_path):
    calls = []
    with pytest.raises(ScenarioError) as err:
        fedsim.run(API, data=data(bad=7, calls=calls, check_clients="all"), out=tmp_path / "out")
    assert str(err.value) == "data: client_data(7) returned 6 inputs and 5 targets"
    assert not (tmp_path / "out").exists()
    assert calls == SAMPLE + list(range(8))  # the evaluation sample, then one client at a time up to 7


def test_check_all_calls_every_client_once_more_and_then_runs(tmp_path):
    calls = []
    fedsim.run(API, data=data(calls=calls, check_clients="all"), out=tmp_path / "out")
    assert calls[: 2 + M] == SAMPLE + list(range(M))
    lazy = []
    fedsim.run(API, data=data(calls=lazy), out=tmp_path / "lazy")
    assert calls[2 + M:] == lazy[2:]  # the run's own fetches are the same
    assert (tmp_path / "out" / "rounds.csv").read_bytes() == (tmp_path / "lazy" / "rounds.csv").read_bytes()


def test_check_all_on_the_command_line_writes_nothing(cli_dir):
    proc = cli(cli_dir, "--out", "out", FEDSIM_TEST_BAD="11", FEDSIM_TEST_CHECK="all")
    assert (proc.returncode, proc.stderr) == (2, "data: client_data(11) returned 6 inputs and 5 targets\n")
    assert not (cli_dir / "out").exists()
    assert cli(cli_dir, "--out", "out").returncode == 0
    before = files(cli_dir / "out")
    proc = cli(cli_dir, "--out", "out", "--force", FEDSIM_TEST_BAD="11", FEDSIM_TEST_CHECK="all")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert files(cli_dir / "out") == before  # the earlier run is untouched, even with --force


def test_check_clients_is_checked():
    with pytest.raises(ValueError, match="^ondemand: check_clients must be 'touched' or 'all', got 'every'$"):
        data(check_clients="every")


# ---------------------------------------------------------------------------------- a failing callable
def test_a_callable_that_raises_is_one_line_naming_it():
    def boom(k):
        raise KeyError(k)

    d = FederatedData(sizes=np.full(3, 2), client_data=boom, test=client(0), num_classes=2)
    with pytest.raises(ScenarioError) as err:
        fetcher(d, torch.device("cpu"), torch.float32)([2])
    assert str(err.value) == "data: client_data(2) failed: KeyError: 2"
    d = FederatedData(sizes=np.full(3, 2), client_data=lambda k: 5, test=client(0), num_classes=2)
    with pytest.raises(ScenarioError, match=r"^data: client_data\(0\) must return \(x, y\): "):
        fetcher(d, torch.device("cpu"), torch.float32)([0])
    d = FederatedData(sizes=np.full(3, 2), client_data=lambda k: (np.array(["a", "b"]), np.zeros(2)), test=client(0),
                      num_classes=2)
    with pytest.raises(ScenarioError, match=r"^data: client_data\(1\) returned arrays torch cannot take: TypeError"):
        fetcher(d, torch.device("cpu"), torch.float32)([1])


def test_a_test_set_callable_that_raises_is_one_line_naming_it(tmp_path):
    """``FederatedData.test`` as a callable: called when the run builds its data, before the run
    folder is written; a failure is one line naming it (a reader's own error kept as it is)."""
    sc = {"seed": 0, "rounds": 1, "model": {"name": "logreg"}, "engine": {"threads": 1},
          "round": {"policy": "wait", "clients_per_round": 2, "local_steps": 1},
          "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 2}}

    def boom():
        raise KeyError("pixels")

    def reader():
        raise ScenarioError("test.csv: line 3: label_id 'x' is not an integer")

    for test, message in ((boom, "data: test() failed: KeyError: 'pixels'"),
                          (reader, "test.csv: line 3: label_id 'x' is not an integer"),
                          (lambda: 5, "data: the test set must be (x, y): ")):
        d = FederatedData(sizes=np.full(3, 6), client_data=client, test=test, num_classes=2)
        with pytest.raises(ScenarioError) as err:
            fedsim.run(sc, data=d, out=tmp_path / "run")
        assert str(err.value).startswith(message) and "\n" not in str(err.value), err.value
        assert not (tmp_path / "run").exists()


def test_a_readers_own_error_is_kept_as_it_is():
    def reader(k):
        raise ScenarioError("train/all_data_0.json: user 'f7': label 9 out of range [0, 2)")

    d = FederatedData(sizes=np.full(3, 2), client_data=reader, test=client(0), num_classes=2)
    with pytest.raises(ScenarioError) as err:
        fetcher(d, torch.device("cpu"), torch.float32)([1])
    assert str(err.value) == "train/all_data_0.json: user 'f7': label 9 out of range [0, 2)"
