"""``fedsim compare --executor ray`` (issue 29) on a local Ray cluster of two nodes on 127.0.0.1.

One cluster for the module (a head and a worker node of one CPU each, started in this process by
``ray.cluster_utils.Cluster``); every run is a three-round quadratic problem. Every Ray process is
kept on the loopback interface: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's single-machine
address rule), no dashboard, usage statistics off, and an HTTP proxy on a closed loopback port for
the cloud-metadata probe Ray's head process makes (no request leaves this machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from _run_trees import tree  # noqa: E402
import fedsim  # noqa: E402
from fedsim import registries  # noqa: E402
from fedsim.compare import ray_executor as rx  # noqa: E402
from fedsim.compare import runfiles  # noqa: E402
from fedsim.compare import run_compare  # noqa: E402
from fedsim.scenario import ScenarioError  # noqa: E402

from _tiny_runs import exit_2  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

LOOPBACK = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    **{k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")},
    **{k: "127.0.0.1,localhost,::1" for k in ("no_proxy", "NO_PROXY")},
}

QUAD = {
    "name": "tiny", "seed": 0, "rounds": 3,
    "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]},
    "system": {"speed": {"dist": "uniform", "low": 1.0, "high": 4.0}, "latency": 0.25},
    "round": {"policy": "window", "window": 2.0, "local_steps": 3},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1},
    "engine": {"dtype": "float64"},
    "checkpoint": {"every": 2},
}
GRID = dict(algorithms=["fedavg", "fednova"], seeds=[0, 1])

# A dataset registered from Python in the driver, defined in a module that exists only here: it
# travels to the workers by value (cloudpickle). It notes each attempt (node, process) in a folder
# and sleeps, so a test can kill a run's process or node while the run is under way (on the node
# ``hold_node`` it sleeps ``hold`` seconds more: the run is certainly under way when the node goes).
PIECES = '''
import os, time

def slow_quadratic(config, seed):
    from fedsim.data.builtin import quadratic
    from fedsim.scenario import ScenarioError
    opts = config.options
    try:
        import ray
        node = ray.get_runtime_context().get_node_id()
    except Exception:
        node = "local"
    with open(os.path.join(opts["notes"], f"{node}-{os.getpid()}-{time.monotonic_ns()}"), "w") as f:
        f.write(repr(os.environ.get("CUDA_VISIBLE_DEVICES")))
    time.sleep(opts.get("sleep", 0))
    if node == opts.get("hold_node"):  # on the node a test removes: wait to be lost, however slow the removal
        time.sleep(opts.get("hold", 0))
    if opts.get("fail"):
        raise ScenarioError("data.options.fail: this cell is refused on purpose")
    return quadratic(config, seed)
'''


def _attempts(notes: Path) -> list[tuple[str, int]]:
    """(node id, pid) of every attempt noted by ``slow_quadratic``."""
    return [(p.name.split("-")[0], int(p.name.split("-")[1])) for p in sorted(notes.iterdir())]


@pytest.fixture(scope="module")
def cluster():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in LOOPBACK.items():
            mp.setenv(k, v)
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
        from ray.cluster_utils import Cluster

        c = Cluster(initialize_head=True, connect=False, head_node_args=dict(
            num_cpus=1, node_ip_address="127.0.0.1", include_dashboard=False,
            # a lost node is noticed within ~2 s; workers at the test's own priority (Ray's default
            # niceness 15 lets any other load on a shared machine starve them for minutes)
            _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                            "health_check_initial_delay_ms": 0, "worker_niceness": 0}))
        c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        try:
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


@pytest.fixture
def driver(cluster):
    """This process connected to the cluster (kept between tests, so workers stay warm)."""
    if not ray.is_initialized():
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    return cluster


@pytest.fixture(scope="module")
def slow_quad():
    ns = {"__name__": "fedsim_ray_test_pieces"}
    exec(PIECES, ns)
    fedsim.register_dataset("slow_quad", ns["slow_quadratic"])
    yield "slow_quad"
    registries.DATASETS.unregister("slow_quad")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The comparison run in this process (--jobs 1): what every Ray run must reproduce byte for byte."""
    out = tmp_path_factory.mktemp("ref") / "cmp"
    res = run_compare(QUAD, out=out, **GRID)
    assert len(res.ran) == 4 and not res.failed
    return out


def assert_same(a: Path, b: Path, cells: int = 4) -> None:
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb)
    runs = [k for k in ta if k.endswith("/rounds.csv")]
    assert len(runs) == cells and {"compare.yaml", "runs.csv", "summary.csv"} <= set(ta)
    for k in runs:
        for f in ("model.pt", "scenario.yaml", "clients.csv", "info.yaml"):
            assert k.replace("rounds.csv", f) in ta
    for k in ta:
        assert ta[k] == tb[k], k
    assert not list(b.rglob(f"*{runfiles.STAGE_TAG}*"))  # no staging folder left


# --------------------------------------------------------------------------- no cluster needed
def test_importing_fedsim_does_not_import_ray():
    code = ("import sys, fedsim, fedsim.cli, fedsim.compare.execute, fedsim.compare.ray_executor, fedsim.api; "
            "fedsim.compare.run_compare; print('ray' in sys.modules, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_options_that_do_not_fit_the_executor_exit_2(tmp_path, write_yaml, capsys):
    path = write_yaml(QUAD)
    out = tmp_path / "x"
    base = ["compare", str(path), "--out", str(out)]
    exit_2(capsys, base + ["--address", "auto"], "--address: only with --executor ray")
    exit_2(capsys, base + ["--retries", "2"], "--retries: only with --executor ray")
    exit_2(capsys, base + ["--executor", "ray", "--jobs", "2"], "--jobs: local processes only")
    exit_2(capsys, base + ["--executor", "ray", "--address", "nohost"], "--address 'nohost': expected auto or HOST:PORT")
    exit_2(capsys, base + ["--executor", "ray", "--address", "h:99999"], "expected auto or HOST:PORT")
    exit_2(capsys, base + ["--executor", "ray", "--retries", "-1"], "--retries: must be an integer from 0 to 100")
    exit_2(capsys, base + ["--executor", "ray", "--address", "127.0.0.1:1"],
           "--address 127.0.0.1:1: no Ray cluster answers there (Connection refused)", seconds=30)
    for bad in ("0", "1.5", "nan", "inf"):
        exit_2(capsys, base + ["--executor", "ray", "--gpus-per-cell", bad], "--gpus-per-cell: must be in (0, 1]")
    exit_2(capsys, base + ["--executor", "ray", "--set", "engine.device=cuda:1"],
           "cell fedavg-window: engine.device: cuda:1 names a GPU of one machine")
    assert not out.exists()


def test_cell_resources_follow_the_scenario():
    from fedsim.compare.plan import plan_compare

    runs, _, _ = plan_compare({**QUAD, "engine": {"threads": 3, "device": "cuda"}}, out="o")
    assert rx.cell_resources(runs[0].scenario, 0.25) == {"num_cpus": 3, "num_gpus": 0.25}
    runs, _, _ = plan_compare(QUAD, out="o")  # threads unset: one CPU; device auto: no GPU
    assert rx.cell_resources(runs[0].scenario, 0.25) == {"num_cpus": 1, "num_gpus": 0.0}


def test_store_folder_swaps_whole_folders_and_refuses_links(tmp_path):
    files = {"a.csv": b"1\n", "sub/part-0.parquet": b"\x00\x01"}
    dst = tmp_path / "cell" / "seed0"
    runfiles.store_folder(dst, files)
    assert runfiles.read_folder(dst) == files
    snap = runfiles.snapshot(dst)
    runfiles.store_folder(dst, {"b.csv": b"2"}, snap)  # replaces the folder whole
    assert runfiles.read_folder(dst) == {"b.csv": b"2"}
    # a folder changed since its files were sent is left alone
    with pytest.raises(ScenarioError, match="changed while its run was on a Ray worker"):
        runfiles.store_folder(dst, files, snap)
    assert runfiles.read_folder(dst) == {"b.csv": b"2"}
    assert sorted(p.name for p in dst.parent.iterdir()) == ["seed0"]
    # a link cannot travel: refused, naming it
    (dst / "link").symlink_to(tmp_path)
    with pytest.raises(ScenarioError, match="link is a symbolic link"):
        runfiles.read_folder(dst)
    for bad in ("../x", "/abs", "a//b", "./a"):
        with pytest.raises(ScenarioError, match="not a plain relative path"):
            runfiles.store_folder(tmp_path / "other", {bad: b""})
        assert not (tmp_path / "other").exists() and not (tmp_path / "x").exists()


class _FakeRay:
    """What RaySession._check_fit reads of Ray: the alive nodes' resources."""

    def __init__(self, *resources):
        self._nodes = [{"Alive": True, "Resources": r} for r in resources] + [{"Alive": False, "Resources": {"CPU": 64}}]

    def nodes(self):
        return self._nodes


def test_cells_that_fit_no_node_are_refused_on_a_private_instance_and_noted_on_a_cluster():
    from fedsim.compare.plan import plan_compare

    runs, _, _ = plan_compare({**QUAD, "engine": {"threads": 4}}, out="o", seeds=[0, 1])
    session = rx.RaySession(rx.RayOptions())
    session.ray, session.owned = _FakeRay({"CPU": 2.0}, {"CPU": 3.0}), True
    with pytest.raises(ScenarioError, match=r"^cell fedavg-window: asks for 4 CPUs \(engine.threads; the largest "
                                            r"node has 3\) on this machine's Ray instance$"):
        session._check_fit(runs)
    session._check_fit(plan_compare({**QUAD, "engine": {"threads": 3}}, out="o")[0])  # fits
    lines = []
    session = rx.RaySession(rx.RayOptions(address="auto"), log=lines.append)
    session.ray = _FakeRay({"CPU": 2.0})
    session._check_fit(runs)
    assert lines == ["cell fedavg-window asks for 4 CPUs (engine.threads; the largest node has 2): its runs wait "
                     "until such a node joins"]
    gpu, _, _ = plan_compare({**QUAD, "engine": {"device": "cuda"}}, out="o")
    session = rx.RaySession(rx.RayOptions(gpus_per_cell=0.5))
    session.ray, session.owned = _FakeRay({"CPU": 8.0}), True
    with pytest.raises(ScenarioError, match=r"asks for a GPU \(engine.device cuda; the largest node has 0\)"):
        session._check_fit(gpu)
    session.ray = _FakeRay({"CPU": 8.0, "GPU": 1.0})
    session._check_fit(gpu)


def test_docs_state_the_code():
    import re
    import tomllib

    text = (ROOT / "docs" / "comparisons.md").read_text()
    assert f"at most\n  `--retries` times (default {rx.RETRIES}, at most {rx.MAX_RETRIES})" in text
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["ray"] == ["ray>=2.60,<3"] and "ray>=2.60,<3" in extras["test"]
    assert "(Ray 2.60 or a later 2.x)" in text
    flat = " ".join(text.split())
    assert "each stack is one Ray task, which runs it as one program" in flat  # test_a_task_runs_a_stack_...
    assert "`retried` counts runs" in flat and "retrying the stack of fedavg-wait seed 0 (2 runs) (attempt 2 of 4)" in flat
    assert "With `--no-stack` each (cell, seed) is one task." in flat
    assert "A task lost more often fails each of its runs with `... (lost 4 times; --retries 3)`" in flat
    import argparse

    from fedsim.compare import add_compare_parser

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    add_compare_parser(sub)
    flags = {o for a in sub.choices["compare"]._actions for o in a.option_strings}
    synopsis = text.split("```\nfedsim compare ", 1)[1].split("```", 1)[0]
    assert set(re.findall(r"--[a-z][a-z-]*", synopsis)) == flags - {"-h", "--help"}


def test_progress_note_shows_after_the_counts():
    import io

    from fedsim.progress import progress_bar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    bar = progress_bar("cmp", 4, unit="run", stream=s)
    bar.note("1 done, 2 running, 0 retried, 0 failed of 4; ETA 0:00:10")
    bar()
    bar.close()
    assert "2 running, 0 retried, 0 failed of 4; ETA 0:00:10" in s.getvalue()


# --------------------------------------------------------------------------- on the cluster
def test_plugin_modules_and_python_pieces_reach_the_workers(cluster, slow_quad, tmp_path, monkeypatch):
    # a --plugin module in a folder the workers do not have: fedsim sends it (Ray's py_modules);
    # a dataset registered from Python in a module the workers cannot import: only its runs fail
    if ray.is_initialized():
        ray.shutdown()  # this test's comparison connects (and disconnects) by itself
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fedsim_ray_plugin.py").write_text(
        "import fedsim\nfrom fedsim.data.builtin import quadratic\nfedsim.register_dataset('plug_quad', quadratic)\n")
    (mods / "fedsim_ray_elsewhere.py").write_text(
        "from fedsim.data.builtin import quadratic\n\ndef ref_quad(config, seed):\n    return quadratic(config, seed)\n")
    monkeypatch.syspath_prepend(str(mods))
    import fedsim_ray_elsewhere

    fedsim.register_dataset("ref_quad", fedsim_ray_elsewhere.ref_quad)
    try:
        lines = []
        notes = tmp_path / "notes"
        notes.mkdir()
        res = run_compare({**QUAD, "data": {**QUAD["data"], "options": {"notes": str(notes)}}},
                          out=tmp_path / "c", grid={"data.name": ["plug_quad", "ref_quad", slow_quad]},
                          plugins=["fedsim_ray_plugin"], executor="ray", address=cluster.address, log=lines.append)
    finally:
        registries.DATASETS.unregister("ref_quad")
        registries.DATASETS.unregister("plug_quad")
    assert sorted(res.ran) == ["fedavg-window-data.name=plug_quad seed 0", "fedavg-window-data.name=slow_quad seed 0"]
    assert res.failed == ["fedavg-window-data.name=ref_quad seed 0: RegistryError: dataset 'ref_quad': cannot load "
                          "fedsim_ray_elsewhere:ref_quad (No module named 'fedsim_ray_elsewhere')"]
    assert len(_attempts(notes)) == 1 and _attempts(notes)[0][0] != "local"
    assert [p.read_text() for p in notes.iterdir()] == ["''"]  # a run that holds no GPU sees none
    assert not ray.is_initialized()  # the connection it opened is closed


def test_ray_comparison_is_byte_identical_to_one_process(driver, reference, tmp_path):
    lines = []
    out = tmp_path / "cmp"
    res = run_compare(QUAD, out=out, executor="ray", log=lines.append, **GRID)
    assert len(res.ran) == 4 and not res.failed and not res.skipped
    assert_same(reference, out)
    # the plan first (data.seed unset: a stack per seed), then one line per run with the
    # cluster's counts and an ETA
    # (rows: rows_of counts 1 per run when neither data.clients nor round.clients_per_round is set)
    assert lines[:3] == ["plan: 4 runs in 2 programs: 2 stacks of runs, 0 runs alone",
                         "  program 1: stack of 2 runs (2 rows): fedavg-window seed 0, fednova-window seed 0",
                         "  program 2: stack of 2 runs (2 rows): fedavg-window seed 1, fednova-window seed 1"]
    lines = lines[3:]
    assert len(lines) == 4
    for k, line in enumerate(lines, 1):
        assert line.startswith(f"[{k}/4] ") and " on " in line
        assert f"| {k} done, " in line and " retried, 0 failed of 4; ETA " in line
    assert lines[-1].endswith("4 done, 0 running, 0 retried, 0 failed of 4; ETA 0:00:00")
    # the summary is the same as a local comparison's, and nothing runs again
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")}
    res2 = run_compare(QUAD, out=out, executor="ray", **GRID)
    assert not res2.ran and len(res2.skipped) == 4
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")} == mtimes
    assert res2.summary.equals(res.summary)


def test_interrupted_driver_resumes_and_unfinished_runs_continue(driver, reference, tmp_path):
    out = tmp_path / "cmp"
    seen = []

    def stop_after_two(line):
        seen.extend(line for _ in [0] if line.startswith("["))  # finished runs (the plan comes first)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_compare(QUAD, out=out, executor="ray", log=stop_after_two, **GRID)
    done = [p.parent for p in out.rglob("model.pt")]
    assert len(done) == 2  # what finished is there, whole; the rest is not
    leftover = done[1].parent / f".seed9{runfiles.STAGE_TAG}0123456789ab"  # as a driver killed while staging leaves
    leftover.mkdir()
    (leftover / "rounds.csv").write_text("half")
    # an unfinished run (no model.pt: killed before its end) continues from its checkpoint on a
    # worker, with the folder's other files (a note of the user's stays)
    (done[0] / "model.pt").unlink()
    (done[0] / "notes.txt").write_text("mine")
    res = run_compare(QUAD, out=out, executor="ray", **GRID)
    assert len(res.ran) == 3 and len(res.skipped) == 1 and not res.failed
    assert (done[0] / "notes.txt").read_text() == "mine"
    (done[0] / "notes.txt").unlink()
    assert_same(reference, out)


def test_own_failures_are_recorded_once_and_divergence_is_a_result(driver, slow_quad, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    scenario = {**QUAD, "data": {**QUAD["data"], "name": slow_quad, "options": {"notes": str(notes)}}}
    res = run_compare(scenario, out=tmp_path / "c", executor="ray", retries=3,
                      grid={"data.options.fail": [False, True], "algorithm.lr": [0.1, 1e100]})
    # every run once, nothing retried: two stacks (data.options differ), each building its data
    # once; the failing stack's shared build fails, then each of its two runs builds (and fails) its own
    assert len(_attempts(notes)) == 1 + 1 + 2
    assert sorted(res.failed) == [
        f"fedavg-window-data.options.fail=True-algorithm.lr={lr} seed 0: ScenarioError: data.options.fail: this "
        "cell is refused on purpose" for lr in ("0.1", "1e+100")]
    runs = res.runs.set_index("cell")
    assert runs.loc["fedavg-window-data.options.fail=False-algorithm.lr=1e+100", "diverged"] == 1
    assert runs.loc["fedavg-window-data.options.fail=False-algorithm.lr=0.1", "diverged"] == 0


def _kill_when_running(notes: Path, kill, count: int = 1, timeout: float = 60.0) -> threading.Thread:
    """A thread that calls ``kill(node, pid)`` for the first ``count`` attempts noted in ``notes``."""
    def watch():
        t, killed = time.time(), set()
        while time.time() - t < timeout and len(killed) < count:
            for node, pid in _attempts(notes) if notes.exists() else []:
                if len(killed) < count and (node, pid) not in killed and kill(node, pid):
                    killed.add((node, pid))
            time.sleep(0.05)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    return th


def _slow_reference(slow_quad, notes, out, seeds, **options):
    options = {"notes": str(notes), "sleep": 1.0, **options}
    scenario = {**QUAD, "data": {**QUAD["data"], "name": slow_quad, "options": options}}
    res = run_compare(scenario, out=out, seeds=seeds)  # in this process
    assert len(res.ran) == len(seeds)
    for p in notes.iterdir():
        p.unlink()
    return scenario


def test_a_killed_worker_process_is_retried_and_changes_nothing(driver, slow_quad, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    scenario = _slow_reference(slow_quad, notes, tmp_path / "ref", [0, 1])

    def kill(node, pid):
        os.kill(pid, signal.SIGKILL)
        return True

    lines = []
    th = _kill_when_running(notes, kill)
    # --no-stack: one task per run, as before stacks (no plan is logged)
    res = run_compare(scenario, out=tmp_path / "cmp", executor="ray", seeds=[0, 1], log=lines.append, stack=False)
    th.join()
    assert len(res.ran) == 2 and not res.failed
    assert not any(ln.startswith("plan: ") for ln in lines)
    assert len(_attempts(notes)) == 3  # one run twice
    retry = [ln for ln in lines if ln.startswith("retrying ")]
    assert len(retry) == 1 and "(attempt 2 of 4)" in retry[0] and "WorkerCrashedError" in retry[0]
    assert lines[-1].endswith(" 1 retried, 0 failed of 2; ETA 0:00:00")
    assert_same(tmp_path / "ref", tmp_path / "cmp", cells=2)


def test_a_node_killed_mid_run_is_retried_elsewhere_and_changes_nothing(driver, slow_quad, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    victim = driver.add_node(num_cpus=1, node_ip_address="127.0.0.1")  # a third node, to lose
    # the run there waits to be lost: under a loaded machine's slow node removal it once finished
    # first, and nothing was retried
    scenario = _slow_reference(slow_quad, notes, tmp_path / "ref", [0, 1, 2], hold_node=victim.node_id, hold=120.0)

    def kill(node, pid):
        if node != victim.node_id:
            return False
        driver.remove_node(victim, allow_graceful=False)
        return True

    lines = []
    th = _kill_when_running(notes, kill)
    res = run_compare(scenario, out=tmp_path / "cmp", executor="ray", seeds=[0, 1, 2], log=lines.append)
    th.join()
    assert len(res.ran) == 3 and not res.failed
    attempts = _attempts(notes)
    assert sum(node == victim.node_id for node, _ in attempts) == 1  # it ran there once, then elsewhere
    assert len(attempts) == 4
    retry = [ln for ln in lines if ln.startswith("retrying ")]
    assert len(retry) == 1 and "NodeDiedError" in retry[0]
    assert_same(tmp_path / "ref", tmp_path / "cmp", cells=3)


def test_a_run_lost_more_often_than_its_retries_is_failed(driver, slow_quad, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    scenario = {**QUAD, "data": {**QUAD["data"], "name": slow_quad, "options": {"notes": str(notes), "sleep": 1.0}}}

    def kill(node, pid):
        os.kill(pid, signal.SIGKILL)
        return True

    # one stack of two runs (one task, one data build per attempt): each of its runs is failed
    # with the reason when its task is lost more often than the retries allow
    th = _kill_when_running(notes, kill, count=2)
    res = run_compare(scenario, out=tmp_path / "c", executor="ray", retries=1, algorithms=["fedavg", "fednova"],
                      log=(lines := []).append)
    th.join()
    retry = [ln for ln in lines if ln.startswith("retrying ")]
    assert len(retry) == 1 and retry[0].startswith("retrying the stack of fedavg-window seed 0 (2 runs) (attempt 2 "
                                                   "of 2): WorkerCrashedError: ")
    assert not res.ran and len(res.failed) == 2 and len(_attempts(notes)) == 2
    for f, cell in zip(sorted(res.failed), ("fedavg-window", "fednova-window")):
        assert f.startswith(f"{cell} seed 0: WorkerCrashedError: ") and f.endswith("(lost 2 times; --retries 1)")
        assert not (tmp_path / "c" / cell).exists()


@pytest.mark.slow
def test_cli_on_a_private_instance_of_this_machine(tmp_path, write_yaml):
    # no --address: fedsim starts a Ray instance on 127.0.0.1 for the comparison and stops it
    path = write_yaml(QUAD)
    env = {**os.environ, **LOOPBACK, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    env.pop("RAY_AUTH_MODE")  # fedsim's own token for its instance, not ~/.ray/auth_token
    r = subprocess.run([sys.executable, "-m", "fedsim", "compare", str(path), "--seeds", "0,1", "--executor", "ray",
                        "--out", str(tmp_path / "c")], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "2 run, 0 already done, 0 failed" in r.stdout
    assert "[2/2] fedavg-window seed " in r.stderr and "0 retried, 0 failed of 2; ETA 0:00:00" in r.stderr
    assert not (tmp_path / ".ray").exists()


def test_a_built_in_replaced_in_the_driver_is_replaced_on_the_workers(driver, reference, tmp_path):
    # the driver makes "fedprox" FedNova's preset: the workers run that, and after the driver puts
    # the built-in back, the same workers run the built-in again
    from fedsim.algorithms.presets import PRESETS

    fedsim.register_algorithm("fedprox", dict(PRESETS["fednova"]), replace=True)
    try:
        run_compare(QUAD, out=tmp_path / "a", algorithms=["fedprox"], seeds=[0], executor="ray")
    finally:
        registries.ALGORITHMS.register("fedprox", "fedsim.algorithms.presets:PRESETS[fedprox]", replace=True)
    nova = (reference / "fednova-window" / "seed0" / "rounds.csv").read_bytes()
    assert (tmp_path / "a" / "fedprox-window" / "seed0" / "rounds.csv").read_bytes() == nova
    run_compare(QUAD, out=tmp_path / "b", algorithms=["fedprox"], seeds=[0], executor="ray")
    run_compare(QUAD, out=tmp_path / "c", algorithms=["fedprox"], seeds=[0])  # in this process
    assert tree(tmp_path / "b") == tree(tmp_path / "c")
    assert (tmp_path / "c" / "fedprox-window" / "seed0" / "rounds.csv").read_bytes() != nova


# --------------------------------------------------------------------------- stacks on the cluster
def test_a_task_runs_a_stack_and_writes_the_local_folders(driver, slow_quad, tmp_path):
    """Issue 35 item 7: one Ray task per planned stack (two stacks of three runs: one per seed,
    data.seed unset). The data are built once per stack -- ``slow_quad`` notes each build -- where
    a task per run builds them once per run; every folder equals the local stacked comparison's
    and each run alone."""
    notes = tmp_path / "notes"
    notes.mkdir()
    scenario = {**QUAD, "data": {**QUAD["data"], "name": slow_quad, "options": {"notes": str(notes)}}}
    grid = dict(algorithms=["fedavg", "fednova", "fedprox"], seeds=[0, 1])
    local_lines = []
    local = run_compare(scenario, out=tmp_path / "local", log=local_lines.append, **grid)
    alone = run_compare(scenario, out=tmp_path / "alone", stack=False, **grid)
    assert len(local.ran) == len(alone.ran) == 6
    assert len(_attempts(notes)) == 2 + 6  # local: once per stack; alone: once per run
    for p in notes.iterdir():
        p.unlink()
    lines = []
    res = run_compare(scenario, out=tmp_path / "ray", executor="ray", log=lines.append, **grid)
    assert len(res.ran) == 6 and not res.failed
    attempts = _attempts(notes)
    assert len(attempts) == 2 and all(node != "local" for node, _ in attempts)  # one task (one build) per stack
    assert lines[:3] == local_lines[:3] == [
        "plan: 6 runs in 2 programs: 2 stacks of runs, 0 runs alone",
        "  program 1: stack of 3 runs (3 rows): fedavg-window seed 0, fednova-window seed 0, fedprox-window seed 0",
        "  program 2: stack of 3 runs (3 rows): fedavg-window seed 1, fednova-window seed 1, fedprox-window seed 1"]
    for k, ln in enumerate(lines[3:], 1):  # then one line per run, as it ends
        assert ln.startswith(f"[{k}/6] ") and " on " in ln
    assert lines[-1].endswith("6 done, 0 running, 0 retried, 0 failed of 6; ETA 0:00:00")
    assert_same(tmp_path / "local", tmp_path / "ray", cells=6)
    assert_same(tmp_path / "alone", tmp_path / "ray", cells=6)


BOOM = '''
import numpy as np
from dataclasses import dataclass
import fedsim
from fedsim.clock.selection import Picked, SelectionRule
from fedsim.selection.section import SelectionSection


@dataclass(frozen=True)
class Boom(SelectionRule):
    at: int = -1

    def select(self, state, request):
        if request.key == self.at:
            raise RuntimeError(f"boom at {request.key}")
        online = request.online()
        pick = np.sort(online[np.random.default_rng(request.key).permutation(len(online))[: request.k]])
        return state, Picked.of(pick, request.p)


class BoomSection(SelectionSection):
    at: int = -1

    def clock_value(self):
        return Boom(self.at)


fedsim.register_selector("ray_boom", BoomSection)
'''


def test_a_failing_plug_in_run_fails_alone_in_its_stack(cluster, tmp_path, monkeypatch):
    """A stack of four runs on one task, two of them with a selector (a --plugin module sent with
    the job) that raises at round 1: those two fail with their error, the other two complete and
    equal the local stacked comparison's runs."""
    if ray.is_initialized():
        ray.shutdown()  # this comparison connects by itself, so that the --plugin module is sent
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fedsim_ray_boom.py").write_text(BOOM)
    monkeypatch.syspath_prepend(str(mods))
    scenario = {**QUAD, "round": {**QUAD["round"], "clients_per_round": 2, "selection": {"name": "ray_boom"}}}
    kw = dict(algorithms=["fedavg", "fednova"], grid={"round.selection.at": [-1, 1]}, plugins=["fedsim_ray_boom"])
    try:
        local = run_compare(scenario, out=tmp_path / "local", **kw)
        res = run_compare(scenario, out=tmp_path / "ray", executor="ray", address=cluster.address,
                          log=(lines := []).append, **kw)
    finally:
        registries.SELECTORS.unregister("ray_boom")
    assert lines[0] == "plan: 4 runs in 1 programs: 1 stacks of runs, 0 runs alone"
    ok = ["fedavg-window-round.selection.at=-1 seed 0", "fednova-window-round.selection.at=-1 seed 0"]
    assert sorted(res.ran) == sorted(local.ran) == ok
    assert sorted(res.failed) == sorted(local.failed) == [
        f"{a}-window-round.selection.at=1 seed 0: SelectionFailed: round.selection: ray_boom.select() failed: "
        "RuntimeError: boom at 1" for a in ("fedavg", "fednova")]
    ta, tb = tree(tmp_path / "local"), tree(tmp_path / "ray")
    for cell in ("fedavg-window-round.selection.at=-1", "fednova-window-round.selection.at=-1"):
        files = [k for k in ta if k.startswith(cell + "/")]
        assert len(files) >= 5 and all(ta[k] == tb[k] for k in files), cell
    assert not (tmp_path / "ray" / "fedavg-window-round.selection.at=1").exists()  # a failed run comes back absent
    assert not ray.is_initialized()


CRASH = '''
import os, signal, time
from dataclasses import dataclass
import numpy as np
import fedsim
from fedsim.clock.selection import Picked, SelectionRule
from fedsim.selection.section import SelectionSection


@dataclass(frozen=True)
class CrashOnce(SelectionRule):
    at: int = -1
    notes: str = ""

    def select(self, state, request):
        with open(os.path.join(self.notes, f"{os.getpid()}-{request.key}-{time.monotonic_ns()}"), "w"):
            pass
        marker = os.path.join(self.notes, "..", "crashed")
        if request.key == self.at and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(3)  # the runs that ended have reached the driver
            os.kill(os.getpid(), signal.SIGKILL)
        online = request.online()
        pick = np.sort(online[np.random.default_rng(request.key).permutation(len(online))[: request.k]])
        return state, Picked.of(pick, request.p)


class CrashOnceSection(SelectionSection):
    at: int = -1
    notes: str = ""

    def clock_value(self):
        return CrashOnce(self.at, self.notes)


fedsim.register_selector("ray_crash_once", CrashOnceSection)
'''


def test_a_lost_stack_is_retried_with_only_its_runs_not_ended(cluster, tmp_path, monkeypatch):
    """A stack of a 1-round and a 3-round run; the worker process is killed (once) at the second
    run's round 1, after the first run ended and its folder came back. The stack is submitted again
    with the second run only: the first run's round is selected once over both attempts, and every
    folder equals the local stacked comparison's."""
    if ray.is_initialized():
        ray.shutdown()  # this comparison connects by itself, so that the --plugin module is sent
    mods, notes = tmp_path / "mods", tmp_path / "notes"
    mods.mkdir()
    notes.mkdir()
    (mods / "fedsim_ray_crash.py").write_text(CRASH)
    monkeypatch.syspath_prepend(str(mods))
    scenario = {**QUAD, "round": {**QUAD["round"], "clients_per_round": 2,
                                  "selection": {"name": "ray_crash_once", "at": 1, "notes": str(notes)}}}
    kw = dict(grid={"rounds": [1, 3]}, plugins=["fedsim_ray_crash"])
    marker = tmp_path / "crashed"
    try:
        marker.touch()  # no crash in this process
        local = run_compare(scenario, out=tmp_path / "local", **kw)
        marker.unlink()
        for p in notes.iterdir():
            p.unlink()
        res = run_compare(scenario, out=tmp_path / "ray", executor="ray", address=cluster.address,
                          log=(lines := []).append, **kw)
    finally:
        registries.SELECTORS.unregister("ray_crash_once")
    assert len(local.ran) == 2 and sorted(res.ran) == sorted(local.ran) and not res.failed
    assert lines[0] == "plan: 2 runs in 1 programs: 1 stacks of runs, 0 runs alone"
    retry = [ln for ln in lines if ln.startswith("retrying ")]
    assert len(retry) == 1 and retry[0].startswith("retrying fedavg-window-rounds=3 seed 0 (attempt 2 of 4): "
                                                   "WorkerCrashedError: ")
    by_pid: dict[int, list[int]] = {}
    for p in sorted(notes.iterdir(), key=lambda p: int(p.name.split("-")[2])):
        pid, key, _ = (int(x) for x in p.name.split("-"))
        by_pid.setdefault(pid, []).append(key)
    # first attempt: both runs' round 0, then round 1 of the 3-round run (killed there);
    # second attempt: the 3-round run alone, from its start
    assert sorted(by_pid.values(), key=len) == [[0, 0, 1], [0, 1, 2]]
    assert_same(tmp_path / "local", tmp_path / "ray", cells=2)
    assert not ray.is_initialized()


def test_a_run_whose_folder_cannot_travel_fails_alone_in_its_stack(driver, reference, tmp_path):
    """One stack (fedavg and fednova, seed 0); fednova's folder holds a symbolic link, which cannot
    be sent to a worker: that run fails with the reason, fedavg runs and equals the local run."""
    out = tmp_path / "cmp"
    bad = out / "fednova-window" / "seed0"
    bad.mkdir(parents=True)
    (bad / "link").symlink_to(tmp_path)
    res = run_compare(QUAD, out=out, executor="ray", algorithms=["fedavg", "fednova"], seeds=[0])
    assert res.ran == ["fedavg-window seed 0"]
    assert len(res.failed) == 1 and res.failed[0].startswith("fednova-window seed 0: ScenarioError: ")
    assert res.failed[0].endswith("link is a symbolic link; a run folder sent to or from a Ray worker holds only "
                                  "regular files and folders (move it away)")
    ta, tb = tree(reference / "fedavg-window" / "seed0"), tree(out / "fedavg-window" / "seed0")
    assert ta == tb and len(ta) >= 5
