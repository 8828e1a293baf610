"""Thread policy (fedsim/engine/threads.py, issue 13): cores from affinity and cgroup quotas, the
rule, core slots shared by runs, and results that do not depend on what else runs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
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


# --------------------------------------------------------------------------- the rule
def work_for(data: dict, model: str | None):
    sc = parse_scenario({"data": data, **({"model": {"name": model, "hidden": 12}} if model else {}),
                         "round": {"policy": "wait", "local_steps": 1}})  # fmt: skip
    return build_workload(sc, torch.device("cpu"), torch.float32)


def test_rule_and_pinning(monkeypatch):
    monkeypatch.setattr(T, "thread_budget", lambda: 8)
    monkeypatch.setattr(T, "_state", dict(T._state))
    mlp = work_for({"name": "digits", "clients": 2}, "mlp")
    cnn = work_for({"name": "cifar10", "clients": 2, "standin": True, "n_train": 16, "n_test": 4}, "cnn")
    quad = work_for({"name": "quadratic", "centers": [[0.0], [1.0]]}, None)
    assert T.default_threads(mlp, 1) == 1  # one small client at a time: threading only costs
    assert T.default_threads(quad, 128) == 1
    assert T.default_threads(mlp, 9) == 8  # a batched chunk: the budget
    assert T.default_threads(cnn, 1) == 8
    n0 = torch.get_num_threads()
    try:
        assert T.set_threads(3, mlp, 9) == 3 and torch.get_num_threads() == 3
        assert (T.threads_info()["threads"], T.threads_info()["rule"]) == (3, "pinned")
        assert T.set_threads(None, cnn, 1) == 8 and T.threads_info()["rule"] == "budget"
    finally:
        torch.set_num_threads(n0)


def test_a_run_gives_numpys_blas_one_thread_and_leaves_torchs_alone():
    from threadpoolctl import ThreadpoolController

    ctl = ThreadpoolController()
    blas = [c for c in ctl.select(user_api="blas").lib_controllers if "numpy" in c.filepath]
    if not blas:
        pytest.skip("numpy has no BLAS that threadpoolctl sees")
    before = [c.num_threads for c in blas]
    n0 = torch.get_num_threads()
    try:
        for c in blas:
            c.set_num_threads(2)
        assert T.set_threads(2, work_for({"name": "digits", "clients": 2}, "mlp"), 9) == 2
        assert [c.num_threads for c in blas] == [1] * len(blas)
        assert torch.get_num_threads() == 2  # torch's pool keeps the run's count
        assert T.threads_info()["numpy_blas_threads"] == 1
    finally:
        torch.set_num_threads(n0)
        for c, n in zip(blas, before):
            c.set_num_threads(n)


# --------------------------------------------------------------------------- core slots
HOLDER = """
import fcntl, sys
files = [open(p, "a") for p in sys.argv[1:]]
for f in files:
    fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def two_cores(monkeypatch, tmp_path):
    monkeypatch.setattr(T, "SLOTS", tmp_path)
    monkeypatch.setattr(T, "_affinity", lambda: {4, 7})
    monkeypatch.setattr(T, "usable_cores", lambda: 2)
    monkeypatch.setattr(T, "_state", dict(T._state, cpus=None, files={}, held=False, waited=0.0, rounds=0))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    n0 = torch.get_num_threads()
    yield tmp_path
    torch.set_num_threads(n0)


def other_run(*paths):
    """Another process holding the lock files ``paths`` until its stdin closes."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, *map(str, paths)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert p.stdout.readline().strip() == "locked"
    return p


def locked(path) -> bool:
    """Whether some process holds ``path`` locked (tried from a fresh process)."""
    code = "import fcntl, sys\nf = open(sys.argv[1], 'a')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)"
    return subprocess.run([sys.executable, "-c", code, str(path)]).returncode == 3


def test_one_thread_takes_a_free_core(two_cores):
    torch.set_num_threads(1)
    other = other_run(two_cores / "cpu-7")  # the last core is taken: the first one is free
    try:
        with T.hold_cores(torch.device("cpu")):
            assert locked(two_cores / "cpu-4")
        assert not locked(two_cores / "cpu-4")
    finally:
        other.stdin.close()
        other.wait()


def test_two_threads_wait_for_the_other_run(two_cores):
    torch.set_num_threads(2)
    other = other_run(two_cores / "cpu-4", two_cores / "cpu-7")
    entered = threading.Event()

    def round_():
        with T.hold_cores(torch.device("cpu")):
            entered.set()

    worker = threading.Thread(target=round_)
    try:
        worker.start()
        assert not entered.wait(0.5)  # both cores are held by the other run: wait
    finally:
        other.stdin.close()
        other.wait()
    worker.join(30)
    assert entered.is_set()
    info = T.threads_info()
    assert info["held_rounds"] == 1 and info["waited_for_cores_s"] >= 0.5


def test_hold_cores_is_a_no_op_on_gpu_under_torchrun_when_off_and_nested(two_cores, monkeypatch):
    torch.set_num_threads(2)
    with T.hold_cores(torch.device("cuda")):
        assert not list(two_cores.iterdir())
    monkeypatch.setenv("WORLD_SIZE", "2")
    with T.hold_cores(torch.device("cpu")):
        assert not list(two_cores.iterdir())
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("FEDSIM_HOLD_CORES", "0")
    with T.hold_cores(torch.device("cpu")):
        assert not list(two_cores.iterdir())
    monkeypatch.delenv("FEDSIM_HOLD_CORES")
    with T.hold_cores(torch.device("cpu")):
        with T.hold_cores(torch.device("cpu")):  # nested: the outer one holds them already
            assert locked(two_cores / "cpu-4") and locked(two_cores / "cpu-7")


# --------------------------------------------------------------------------- same bytes
def start_run(tmp_path: Path, name: str, sets: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "fedsim", "run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out",
           str(tmp_path / name), "--quiet", "--set", "variants=null"]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    env = {**{k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def digest(out: Path) -> str:
    """sha256 of rounds.csv, clients.csv and model.pt's tensors."""
    h = hashlib.sha256((out / "rounds.csv").read_bytes() + (out / "clients.csv").read_bytes())
    for k, v in sorted(torch.load(out / "model.pt", weights_only=True).items()):
        h.update(k.encode() + v.numpy().tobytes())
    return h.hexdigest()


def test_same_bytes_alone_and_two_at_once(tmp_path):
    """The 200-200 MLP, batched (the policy's thread count): a run alone and two started together
    write the same bytes (the count never depends on other runs)."""
    case = ["rounds=2", "data.name=digits", "model.name=mlp", "data.clients=16"]
    alone = start_run(tmp_path, "alone", case)
    assert alone.wait() == 0, alone.stderr.read()
    pair = [start_run(tmp_path, n, case) for n in ("a", "b")]
    for p in pair:
        assert p.wait() == 0, p.stderr.read()
    assert digest(tmp_path / "alone") == digest(tmp_path / "a") == digest(tmp_path / "b")
