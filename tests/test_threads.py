"""Thread policy (fedsim/engine/threads.py, issue 13): cores from affinity and cgroup quotas, the
registry of live runs, the rule, and results that do not depend on the thread count."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedsim.engine import threads as T
from fedsim.engine.workload import build_workload
from fedsim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- cores
def test_cgroup_v2_quota_smallest_along_the_path(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "a" / "cpu.max").write_text("250000 100000\n")  # 2.5 CPUs
    (tmp_path / "a" / "b" / "cpu.max").write_text("300000 100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/a/b\n")
    assert T.cgroup_cpus(tmp_path, proc) == 2.5


def test_cgroup_v1_quota_and_unlimited(tmp_path):
    cpu = tmp_path / "cpu,cpuacct" / "job"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("150000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/x\n3:cpu,cpuacct:/job\n")
    assert T.cgroup_cpus(tmp_path, proc) == 1.5
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no limit"
    assert T.cgroup_cpus(tmp_path, proc) is None
    assert T.cgroup_cpus(tmp_path / "missing", tmp_path / "missing") is None


CPUINFO = "".join(
    f"processor\t: {p}\nphysical id\t: 0\ncore id\t\t: {c}\n\n" for p, c in [(0, 0), (1, 1), (2, 0), (3, 1)]
)  # two cores, each with two hyperthreads (logical 0 and 2 share core 0)


def test_physical_cores_count_hyperthreads_once():
    assert T.physical_cores({0, 1, 2, 3}, CPUINFO) == 2
    assert T.physical_cores({0, 2}, CPUINFO) == 1
    assert T.physical_cores({1, 2}, CPUINFO) == 2
    assert T.physical_cores({0, 1, 2}, "no such fields\n") == 3


def test_usable_cores_and_budget(monkeypatch):
    monkeypatch.setattr(T, "_affinity", lambda: {0, 1, 2, 3, 4, 5, 6, 7})
    monkeypatch.setattr(T, "physical_cores", lambda cpus: len(cpus))
    monkeypatch.setattr(T, "cgroup_cpus", lambda: 6.5)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert T.usable_cores() == 6  # the quota, rounded down
    assert T.thread_budget() == 6
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun: 4 local ranks share the cores
    assert T.thread_budget() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert T.thread_budget() == 3
    monkeypatch.setattr(T, "cgroup_cpus", lambda: 0.5)
    assert T.usable_cores() == 1


# --------------------------------------------------------------------------- registry
HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def test_live_runs_counts_locked_files_and_removes_stale_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "REGISTRY", tmp_path)
    assert T.live_runs() == 1  # this process only
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "999999")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert other.stdout.readline().strip() == "locked"
        assert T.live_runs() == 2
    finally:
        other.stdin.close()
        other.wait()
    assert T.live_runs() == 1  # its file is left, unlocked: not a run
    assert (tmp_path / "999999").exists()  # young: it may be a run that has not locked it yet
    old = time.time() - T.STALE_AFTER - 1
    os.utime(tmp_path / "999999", (old, old))
    assert T.live_runs() == 1
    assert not (tmp_path / "999999").exists()


# --------------------------------------------------------------------------- the rule
def work_for(data: dict, model: str | None):
    sc = parse_scenario({"data": data, **({"model": {"name": model, "hidden": 12}} if model else {}),
                         "round": {"policy": "wait", "local_steps": 1}})  # fmt: skip
    return build_workload(sc, torch.device("cpu"), torch.float32)


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """8 usable cores, a budget of 8, an empty registry, MKL strict CNR in force."""
    monkeypatch.setattr(T, "REGISTRY", tmp_path)
    monkeypatch.setattr(T, "usable_cores", lambda: 8)
    monkeypatch.setattr(T, "thread_budget", lambda: 8)
    monkeypatch.setattr(T, "strict_cnr", lambda: True)
    monkeypatch.setattr(T, "_state", dict(T._state, lock=None, pid=None))


def test_rule(machine, monkeypatch):
    mlp = work_for({"name": "digits", "clients": 2}, "mlp")
    cnn = work_for({"name": "cifar10", "clients": 2, "standin": True, "n_train": 16, "n_test": 4}, "cnn")
    quad = work_for({"name": "quadratic", "centers": [[0.0], [1.0]]}, None)
    assert T.default_threads(mlp, 1) == 1  # one small client at a time: threading only costs
    assert T.default_threads(quad, 128) == 1
    assert T.default_threads(mlp, 9) == 8  # a batched chunk, alone: the whole budget
    assert T.default_threads(cnn, 1) == 8
    monkeypatch.setattr(T, "live_runs", lambda: 3)  # two other runs: 8 // 3
    assert T.default_threads(mlp, 9) == 2
    assert T.default_threads(cnn, 1) == 8  # conv results depend on the count: never on other runs
    monkeypatch.setattr(T, "strict_cnr", lambda: False)  # without strict CNR neither do batched chunks
    assert T.default_threads(mlp, 9) == 8
    assert T.threads_info()["rule"] == "budget"


def test_set_threads_pins_and_rebalance_follows_the_share(machine, monkeypatch):
    mlp = work_for({"name": "digits", "clients": 2}, "mlp")
    n0 = torch.get_num_threads()
    try:
        assert T.set_threads(3, mlp, 9) == 3 and torch.get_num_threads() == 3
        assert T.rebalance() == 3  # pinned: left alone
        assert T.threads_info()["rule"] == "pinned"
        monkeypatch.setattr(T, "usable_cores", lambda: 4)
        monkeypatch.setattr(T, "thread_budget", lambda: 4)
        assert T.set_threads(None, mlp, 9) == 4 and torch.get_num_threads() == 4
        monkeypatch.setattr(T, "live_runs", lambda: 2)
        monkeypatch.setattr(T, "REBALANCE_EVERY", 0.0)
        assert T.rebalance() == 2 and torch.get_num_threads() == 2
        info = T.threads_info()
        assert (info["threads"], info["rule"], info["runs"]) == (2, "share", 2)
    finally:
        torch.set_num_threads(n0)


# --------------------------------------------------------------------------- same bytes
def run_hash(tmp_path: Path, name: str, sets: list[str]) -> str:
    """sha256 of rounds.csv, clients.csv and model.pt's tensors of a fresh `python -m fedsim run`."""
    out = tmp_path / name
    cmd = [sys.executable, "-m", "fedsim", "run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out),
           "--quiet", "--set", "variants=null"]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    h = hashlib.sha256((out / "rounds.csv").read_bytes() + (out / "clients.csv").read_bytes())
    for k, v in sorted(torch.load(out / "model.pt", weights_only=True).items()):
        h.update(k.encode() + v.numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("case", [
    ["rounds=3"],  # Synthetic(1,1) logistic regression, chunks of 128
    ["rounds=2", "data.name=digits", "model.name=mlp", "data.clients=16"],  # 200-200 MLP
])  # fmt: skip
def test_same_bytes_on_one_and_two_threads(tmp_path, case):
    """Batched Linear stacks give the same bytes for 1 and 2 threads and any chunk size (without
    MKL_CBWR=AUTO,STRICT the MLP's bytes differ between 1 and 2 threads: measured on torch 2.14.1)."""
    one = run_hash(tmp_path, "t1", case + ["engine.threads=1", "engine.clients_per_batch=1"])
    assert run_hash(tmp_path, "t2", case + ["engine.threads=2", "engine.clients_per_batch=16"]) == one
    assert run_hash(tmp_path, "auto", case) == one  # the policy's own choice
