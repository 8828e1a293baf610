"""Issue 28 item 17: fedsim.run / fedsim.schedule check their arguments (one line naming the
argument, an ArgumentError: both a ScenarioError and a TypeError), walk a mapping scenario within
the YAML loader's bounds, and remove their temporary run folder when SIGTERM or SIGHUP ends the
process."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import fedsim
from fedsim.api import ArgumentError

S = {"name": "api", "data": {"name": "quadratic", "centers": [[1.0], [2.0]]}, "rounds": 2,
     "round": {"policy": "wait", "local_steps": 1}}


def _deep(n, leaf):
    top = cur = {}
    for _ in range(n):
        cur["a"] = {}
        cur = cur["a"]
    cur["a"] = leaf
    return top


def _recursive():
    d = dict(S)
    d["x"] = d
    return d


def _recursive_list():
    lst = [1.0]
    lst.append(lst)
    return {**S, "system": {"speed": lst}}


@pytest.mark.parametrize("kwargs, message", [
    ({"force": "no"}, "force: must be True or False, got 'no'"),
    ({"force": 1}, "force: must be True or False, got 1"),
    ({"progress": "yes"}, "progress: must be True or False, got 'yes'"),
    ({"table_format": "xml"}, "table_format: must be 'csv' or 'parquet', got 'xml'"),
    ({"out": ""}, "out: must name a folder; '' would be the current folder"),
    ({"out": b"x"}, "out: must be a folder path (str or pathlib.Path) or None, got bytes"),
    ({"out": 3}, "out: must be a folder path (str or pathlib.Path) or None, got int"),
    ({"overrides": "rounds=3"}, "overrides: must be a list of strings (or None), got str"),
    ({"overrides": b"rounds=3"}, "overrides: must be a list of strings (or None), got bytes"),
    ({"overrides": [b"rounds=3"]}, "overrides: must be a list of strings, got an item of type bytes"),
    ({"plugins": 5}, "plugins: must be a list of strings (or None), got int"),
    ({"plugins": [b"os"]}, "plugins: must be a list of strings, got an item of type bytes"),
    ({"scenario": b"s.yaml"}, "scenario: expected a path, a mapping or a Scenario, got bytes"),
    ({"scenario": _recursive()}, "scenario.x: contains itself (a recursive structure)"),
    ({"scenario": _recursive_list()}, "scenario.system.speed.1: contains itself (a recursive structure)"),
    ({"scenario": {**S, "x": _deep(5000, 1)}}, "scenario.x.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a: "
                                              "nested deeper than 32 levels (MAX_YAML_DEPTH)"),
])
@pytest.mark.parametrize("call", ["run", "schedule"])
def test_bad_arguments_are_one_typed_line(tmp_path, monkeypatch, kwargs, message, call):
    monkeypatch.chdir(tmp_path)
    if call == "schedule" and "progress" in kwargs:
        pytest.skip("schedule has no progress bar")
    kwargs = dict(kwargs)
    scenario = kwargs.pop("scenario", S)
    with pytest.raises(ArgumentError) as err:
        getattr(fedsim, call)(scenario, **kwargs)
    assert isinstance(err.value, TypeError) and isinstance(err.value, fedsim.ScenarioError)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300
    assert list(tmp_path.iterdir()) == []  # nothing written, not even into the current folder


def test_force_true_still_replaces_and_none_means_no_overrides(tmp_path):
    out = tmp_path / "r"
    fedsim.run(S, out=out)
    with pytest.raises(fedsim.ScenarioError, match="already holds this scenario's run"):
        fedsim.run(S, out=out)
    assert fedsim.run(S, out=out, force=True, overrides=None, plugins=None).folder == out
    assert fedsim.schedule(S, overrides=None, plugins=None, table_format="parquet").rounds["round"].tolist() == [0, 1]


def test_a_long_flat_mapping_is_not_walked_value_by_value():
    t = time.perf_counter()
    plan = fedsim.schedule({**S, "data": {"name": "quadratic", "clients": 200_000, "dim": 1},
                            "system": {"speed": [1.0] * 200_000}, "rounds": 1})
    assert len(plan.clients) == 200_000 and time.perf_counter() - t < 60


def _default_dispositions() -> None:
    """In the child before exec: SIGTERM and SIGHUP back to their default action. A test runner
    started under ``nohup`` passes SIGHUP on ignored, and fedsim rightly leaves an ignored signal
    alone, so without this the child would sit out the SIGHUP the test sends."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def test_a_signal_whose_first_exit_is_swallowed_still_ends_the_run(tmp_path):
    """A handler can run inside code that swallows its SystemExit (it happened in a lazy numpy
    import mid-run, under an abc.__subclasscheck__): the signal is sent again until one exit gets
    out, then the temporary folder goes and the process ends by the signal."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from fedsim.api import _folder
        with _folder(None) as run:
            run.mkdir()
            (run / "ready").write_text("")
            swallowed = 0
            while True:
                try:
                    time.sleep(0.01)
                except SystemExit:
                    if swallowed:
                        raise
                    swallowed += 1
                    Path({str(tmp_path / "swallowed")!r}).write_text("")
    """)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_dispositions)
    try:
        deadline = time.monotonic() + 60
        while not any((p / "run" / "ready").exists() for p in tmp.iterdir()):
            assert time.monotonic() < deadline and child.poll() is None, child.stderr.read() if child.poll() else ""
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGTERM, child.stderr.read()[-2000:]
    assert (tmp_path / "swallowed").exists()  # the first exit was swallowed; a later one ended it
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_removes_the_temporary_run_folder(tmp_path, signum):
    """run(out=None) in a child process, killed mid-run: the child ends by the signal and its
    temporary fedsim-* folder is gone (only the shared core-slot folder may remain)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = textwrap.dedent(f"""
        import fedsim
        fedsim.run({{"data": {{"name": "quadratic", "centers": [[1.0], [2.0]]}}, "rounds": 10**6,
                    "round": {{"policy": "wait", "local_steps": 1}}, "checkpoint": {{"every": 0}}}})
    """)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "PYTHONFAULTHANDLER": "1"}  # a child that does not end: its threads' stacks on SIGABRT, below
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_dispositions)
    stuck = ""
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith("fedsim-") and not p.name.startswith("fedsim-cores") for p in tmp.iterdir()):
            assert time.monotonic() < deadline and child.poll() is None, child.stderr.read() if child.poll() else ""
            time.sleep(0.05)
        run = next(p for p in tmp.iterdir() if p.name.startswith("fedsim-") and not p.name.startswith("fedsim-cores"))
        while not (run / "run" / "rounds.csv").exists():  # the run is under way
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child.send_signal(signum)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:  # say why: its signal dispositions, then its stacks
            status = Path(f"/proc/{child.pid}/status")
            stuck = "".join(ln for ln in status.read_text().splitlines(True) if ln.startswith("Sig")) if status.exists() else ""
            child.send_signal(signal.SIGABRT)
            child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signum, stuck + child.stderr.read()[-6000:]
    left = [p.name for p in tmp.iterdir() if not p.name.startswith("fedsim-cores")]
    assert left == []
