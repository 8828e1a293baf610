"""Checkpoint and resume: a killed run, resumed, ends byte-identical to an uninterrupted one."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from fedsim.cli import main

BASE = {
    "name": "resume",
    "seed": 1,
    "rounds": 8,
    "data": {"name": "synthetic", "clients": 6},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "uniform", "low": 2.0, "high": 6.0}, "latency": 0.1,
               "availability": {"model": "markov", "mean_online": 8.0, "mean_offline": 2.0}},
    "round": {"policy": "window", "window": 2.0, "clients_per_round": 4},
    "algorithm": {"name": "scaffold", "lr": 0.05, "batch_size": 8},
    "checkpoint": {"every": 2},
}
FILES = ("rounds.csv", "clients.csv", "model.pt")


def _cli(path, out, *extra, env=None):
    cmd = [sys.executable, "-m", "fedsim", "run", str(path), "--quiet", *extra]
    cmd += ["--out", str(out)] if "--resume" not in extra else []
    return subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True)


def _same(a, b):
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    refs = {}
    for algo in ("scaffold", "fedadam", "fedlada"):
        raw = {**BASE, "algorithm": {**BASE["algorithm"], "name": algo}}
        path = tmp / f"{algo}.yaml"
        path.write_text(yaml.safe_dump(raw))
        out = tmp / algo
        assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
        refs[algo] = (path, out)
    return refs


@pytest.mark.parametrize("algo", ["scaffold", "fedadam", "fedlada"])
@pytest.mark.parametrize("fault", ["round:4", "round:5", "checkpoint:6", "checkpoint:2"])
def test_fault_then_resume_identical(reference, tmp_path, algo, fault):
    path, ref = reference[algo]
    out = tmp_path / "run"
    killed = _cli(path, out, env={"FEDSIM_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "model.pt").exists()
    if fault.startswith("checkpoint"):
        assert (out / "checkpoint.pt.tmp").exists()  # died mid-write; the old checkpoint is intact
    # a plain rerun into the same folder is refused: it must be resumed
    again = _cli(path, out)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = _cli(path, out, "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    _same(ref, out)


def test_sigkill_at_random_moments(reference, tmp_path):
    path, ref = reference["scaffold"]
    for i, delay in enumerate((1.5, 2.5, 3.5)):
        out = tmp_path / f"k{i}"
        proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(path), "--quiet", "--out", str(out)])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if (out / "scenario.yaml").exists():
            for name in ("rounds.csv", "clients.csv"):
                if (out / name).exists():
                    text = (out / name).read_text()
                    assert text == "" or text.endswith("\n")  # never half a line
            assert _cli(path, out, "--resume", str(out)).returncode == 0
            _same(ref, out)


def test_resume_refuses_other_scenario(reference, tmp_path, capsys):
    path, ref = reference["scaffold"]
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**BASE, "seed": 2}))
    assert main(["run", str(other), "--resume", str(ref), "--quiet"]) == 2
    assert "different scenario" in capsys.readouterr().err
