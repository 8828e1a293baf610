"""Checkpoint and resume: a killed run, resumed, ends byte-identical to an uninterrupted one."""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

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
FAULTS = Path(__file__).with_name("_faults.py")


def _killed(path, out, fault):
    """``fedsim run`` into ``out``, SIGKILLed at ``fault`` (tests/_faults.py)."""
    cmd = [sys.executable, str(FAULTS), fault, "run", str(path), "--quiet", "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True)


def _same(a, b):
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    refs = {}
    for algo in ("scaffold", "fedadam", "fedlada", "fedavgm", "fednova_vr", "fedcm"):
        raw = {**BASE, "algorithm": {**BASE["algorithm"], "name": algo}}
        path = tmp / f"{algo}.yaml"
        path.write_text(yaml.safe_dump(raw))
        out = tmp / algo
        assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
        refs[algo] = (path, out)
    return refs


@pytest.mark.parametrize("algo", ["scaffold", "fedadam", "fedlada", "fedavgm", "fednova_vr", "fedcm"])
def test_checkpoint_holds_every_state(reference, tmp_path, algo):
    """Resuming a finished run from its last checkpoint (round 6 of 8) redoes rounds 6-7 exactly:
    control variates, server moments, v_hat and global direction all come back from the file."""
    path, ref = reference[algo]
    out = tmp_path / "copy"
    shutil.copytree(ref, out)
    (out / "model.pt").unlink()
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    _same(ref, out)


@pytest.mark.parametrize("fault", ["round:5", "checkpoint:6"])
def test_killed_then_resumed_identical(reference, tmp_path, fault):
    """SIGKILL after round 5's rows (before its checkpoint) or in the middle of a checkpoint write."""
    path, ref = reference["scaffold"]
    out = tmp_path / "run"
    killed = _killed(path, out, fault)
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "model.pt").exists()
    if fault.startswith("checkpoint"):
        assert (out / "checkpoint.pt.tmp").exists()  # died mid-write; the old checkpoint is intact
    assert (out / "run.lock").exists()  # the killed run's lock file stays; the kernel released its lock
    # a plain rerun into the same folder is refused: it must be resumed
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    _same(ref, out)


def test_sigkill_at_arbitrary_moments(reference, tmp_path):
    """Kill a real run from outside once it has written k rounds (plus a small random delay)."""
    path, ref = reference["scaffold"]
    for k, delay in ((1, 0.0), (3, 0.013), (6, 0.002)):
        out = tmp_path / f"k{k}"
        proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(path), "--quiet", "--out", str(out)])
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            rows = out / "rounds.csv"
            if rows.exists() and rows.read_text().count("\n") > k:
                break
            time.sleep(0.001)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for name in ("rounds.csv", "clients.csv"):
            text = (out / name).read_text()
            assert text.endswith("\n")  # never half a line
        assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
        _same(ref, out)


def test_resume_refuses_other_scenario(reference, tmp_path, capsys):
    path, ref = reference["scaffold"]
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**BASE, "seed": 2}))
    assert main(["run", str(other), "--resume", str(ref), "--quiet"]) == 2
    assert "different scenario" in capsys.readouterr().err


ASYNC = {
    **BASE,
    "name": "resume-async",
    "rounds": 10,
    "round": {"policy": "async", "concurrency": 4, "buffer": 2, "local_steps": 3},
    "algorithm": {"name": "fedbuff", "lr": 0.05, "batch_size": 8, "server_opt": "adam"},
    "checkpoint": {"every": 3},
}


@pytest.mark.parametrize("fault", ["round:7", "checkpoint:6"])
def test_async_killed_then_resumed_identical(tmp_path, fault):
    """The asynchronous policy too: in-flight model versions come back from the checkpoint."""
    path = tmp_path / "async.yaml"
    path.write_text(yaml.safe_dump(ASYNC))
    ref = tmp_path / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    out = tmp_path / "run"
    killed = _killed(path, out, fault)
    assert killed.returncode == -signal.SIGKILL
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    _same(ref, out)
