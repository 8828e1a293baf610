"""Counting FLOPs (``system.compute``) leaves the temporary directory as it found it (issue 38
item 7): the first ``FlopCounterMode`` pass imports ``torch._dynamo``, whose import makes an empty
``torchinductor_<user>`` folder in TMPDIR and sets ``TORCHINDUCTOR_CACHE_DIR``. A fresh process is
needed (``tempfile.gettempdir`` is read once per process, ``torch._dynamo`` imported once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = {
    "name": "flops", "seed": 0, "rounds": 1,
    "data": {"name": "synthetic", "clients": 2, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "system": {"compute": {"flops": 1.0e6}, "latency": 0.1},
    "round": {"policy": "wait", "local_steps": 1},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 4},
}


def _env(tmpdir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    # FEDSIM_HOLD_CORES=0: the run takes no core slots, whose folder would live in TMPDIR too
    return {**env, "TMPDIR": str(tmpdir), "FEDSIM_HOLD_CORES": "0", "PYTHONPATH": str(ROOT)}


def test_a_run_that_counts_flops_leaves_tmpdir_empty(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    r = subprocess.run([sys.executable, "-m", "fedsim", "run", str(path), "--out", str(tmp_path / "out"), "--quiet"],
                       capture_output=True, text=True, env=_env(tmpdir), cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "step_flops" in (tmp_path / "out" / "info.yaml").read_text()  # the FLOPs were counted
    assert sorted(os.listdir(tmpdir)) == []


def test_step_flops_undoes_the_import_and_keeps_what_was_there(tmp_path):
    """A ``torchinductor_*`` folder that was there before stays (and what it holds); the variable
    the import sets is unset again; the count is the closed form 2 m k n (forward) + 2 m k n
    (weight gradient) for a bias-free 3 -> 2 linear layer on a batch of 4: 2 x 2 x 4 x 3 x 2 = 96."""
    tmpdir = tmp_path / "tmp"
    (tmpdir / "torchinductor_someone").mkdir(parents=True)
    (tmpdir / "torchinductor_someone" / "keep").write_text("x")
    code = ("import os, torch; from fedsim.devices.cost import step_flops; "
            "n = step_flops(torch.nn.Linear(3, 2, bias=False), (3,), 4); "
            "print(n, os.environ.get('TORCHINDUCTOR_CACHE_DIR'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(tmpdir), timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["96", "None"]
    assert sorted(os.listdir(tmpdir)) == ["torchinductor_someone"]
    assert (tmpdir / "torchinductor_someone" / "keep").read_text() == "x"
