"""Issue 17: a model with buffers (BatchNorm) is refused under torchrun and under async before the
run folder is touched: one line naming the model, nothing written."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from torch import nn

import fedsim
from fedsim.data.federated import FederatedData
from fedsim.engine.probe import check_ranks
from fedsim.engine.workload import build_workload
from fedsim.errors import ScenarioError
from fedsim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = "model: a model with buffers (BatchNorm statistics) is not supported under torchrun yet"
SYNC = {
    "name": "bn", "seed": 0, "rounds": 2,
    "round": {"policy": "wait", "local_steps": 2},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 4},
    "system": {"speed": 1.0},
}


def data(clients=4):
    rng = np.random.default_rng(0)
    parts = [(rng.normal(size=(6, 3)).astype(np.float32), rng.integers(0, 2, 6)) for _ in range(clients)]
    return FederatedData.from_clients(parts, test=parts[0], num_classes=2)


def bn_net(shape, k):
    return nn.Sequential(nn.Linear(shape[0], 4), nn.BatchNorm1d(4), nn.Linear(4, k))


def test_check_ranks_refuses_buffers_on_more_than_one_rank():
    sc = parse_scenario({**SYNC, "data": {"name": "synthetic", "clients": 4}})
    bn = build_workload(sc, torch.device("cpu"), torch.float32, data=data(), model=bn_net)
    plain = build_workload(sc, torch.device("cpu"), torch.float32, data=data(), model=lambda s, k: nn.Linear(s[0], k))
    check_ranks(bn, 1)
    check_ranks(plain, 2)
    with pytest.raises(ScenarioError) as err:
        check_ranks(bn, 2)
    assert str(err.value) == TORCHRUN


def test_buffers_under_torchrun_are_refused_before_the_folder(tmp_path, monkeypatch):
    from fedsim.runner import build

    # the world size build_run sees on rank 0 of two (the folder checks stay single-process)
    monkeypatch.setattr(build, "distributed", SimpleNamespace(world=lambda: (0, 2)))
    with pytest.raises(ScenarioError) as err:
        fedsim.run(SYNC, data=data(), model=bn_net, out=tmp_path / "out")
    assert str(err.value) == TORCHRUN
    assert not (tmp_path / "out").exists()


def test_buffers_with_async_are_refused_before_the_folder(tmp_path):
    sc = {**SYNC, "round": {"policy": "async", "local_steps": 2, "concurrency": 2, "buffer": 1},
          "algorithm": {"name": "fedbuff", "lr": 0.1, "batch_size": 4}}
    with pytest.raises(ScenarioError, match=r"^model: a model with buffers \(BatchNorm statistics\) is not supported "
                                            r"with round.policy async yet \(buffers: 1.num_batches_tracked, "):
        fedsim.run(sc, data=data(), model=bn_net, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


PLUGIN = '''
from torch import nn
import fedsim


def bn_plugin(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 4), nn.BatchNorm1d(4), nn.Linear(4, num_classes))


fedsim.register_model("bn_plugin", bn_plugin)
'''


def test_buffers_with_async_on_the_command_line_write_nothing(tmp_path):
    (tmp_path / "bn_pieces.py").write_text(textwrap.dedent(PLUGIN))
    sc = {**SYNC, "data": {"name": "synthetic", "clients": 4}, "model": {"name": "bn_plugin"},
          "round": {"policy": "async", "local_steps": 2, "concurrency": 2, "buffer": 1},
          "algorithm": {"name": "fedbuff", "lr": 0.1, "batch_size": 4}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    proc = subprocess.run([sys.executable, "-m", "fedsim", "run", "s.yaml", "--out", "out", "--plugin", "bn_pieces"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("model: a model with buffers"), proc.stderr
    assert "async" in proc.stderr and not (tmp_path / "out").exists()
