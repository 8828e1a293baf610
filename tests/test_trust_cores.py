"""Issue 28, waiting for cores: runs take their turns at the core slots first come, first served
across processes, and a run that waits more than a second says who holds the cores (pids and
commands) on stderr and in the progress bar."""

from __future__ import annotations

import io
from contextlib import redirect_stderr
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from fedsim.engine import threads as T

ROOT = Path(__file__).resolve().parents[1]

# One run as a process: one core (one slot), `rounds` rounds of `hold` seconds each, re-taking the
# slot at once after each; it logs "NAME start" / "NAME end" around each round.
RUN = textwrap.dedent("""
    import sys, time, torch
    from fedsim.engine import threads as T
    folder, log, name, hold, rounds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
    T.SLOTS = __import__("pathlib").Path(folder)
    T._affinity = lambda: {0}
    T.usable_cores = lambda: 1
    torch.set_num_threads(1)
    print("ready", flush=True)
    sys.stdin.readline()  # go
    for _ in range(rounds):
        with T.hold_cores(torch.device("cpu")):
            with open(log, "a") as f:
                f.write(name + " start\\n")
            time.sleep(hold)
    print("done", flush=True)
""")


def _start(folder, log, name, hold, rounds=1):
    """The process, imported and waiting for its go (a line on its stdin: :func:`_go`)."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("FEDSIM_HOLD_CORES", "WORLD_SIZE")}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.Popen([sys.executable, "-c", RUN, str(folder), str(log), name, str(hold), str(rounds)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def _go(p):
    p.stdin.write("go\n")
    p.stdin.flush()


def _wait_for(cond, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_first_come_first_served_across_processes(tmp_path):
    """H holds the one slot and takes it again at once; W1 then W2 queue up meanwhile. Turns go
    H, W1, W2, H: the holder does not jump the queue, nor W2 ahead of W1."""
    folder, log = tmp_path / "slots", tmp_path / "log"
    folder.mkdir(mode=0o700)
    procs = []
    try:
        h, w1, w2 = (_start(folder, log, name, hold, rounds) for name, hold, rounds in
                     (("H", 1.5, 2), ("W1", 0.1, 1), ("W2", 0.1, 1)))
        procs = [h, w1, w2]
        _go(h)
        _wait_for(lambda: log.exists() and "H start" in log.read_text(), "H took its first turn")
        _go(w1)
        _wait_for(lambda: (folder / "q-1").exists(), "W1 queued (ticket 1)")
        _go(w2)
        _wait_for(lambda: (folder / "q-2").exists(), "W2 queued (ticket 2)")
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and out.strip() == "done", err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert log.read_text().split("\n")[:-1] == ["H start", "W1 start", "W2 start", "H start"]
    assert sorted(p.name for p in folder.iterdir()) == ["cpu-0", "queue"]  # every ticket file removed


@pytest.fixture
def one_core(monkeypatch, tmp_path):
    folder = tmp_path / "slots"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(T, "SLOTS", folder)
    monkeypatch.setattr(T, "_affinity", lambda: {0})
    monkeypatch.setattr(T, "usable_cores", lambda: 1)
    monkeypatch.setattr(T, "_state", dict(T._state, cpus=None, files={}, held=False, waited=0.0, rounds=0, dir=None,
                                          bypass=None, queue=None, noticed=-float("inf")))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("FEDSIM_HOLD_CORES", raising=False)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield folder
    torch.set_num_threads(n)


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def tty():
    """Standard error as a terminal (the notice is printed on a terminal only); set in the test's
    body with ``with redirect_stderr(tty)`` (pytest sets its own capture when the call starts)."""
    return _Tty()


def test_a_long_wait_names_the_holders_on_stderr_and_in_the_bar(one_core, tmp_path, tty):
    log = tmp_path / "log"
    holder = _start(one_core, log, "H", 2.0)
    _go(holder)
    try:
        _wait_for(lambda: log.exists(), "the holder took the slot")
        notes = []
        t = time.perf_counter()
        with redirect_stderr(tty), T.hold_cores(torch.device("cpu"), notice=notes.append):
            waited = time.perf_counter() - t
        assert waited > T.NOTICE_AFTER_S
    finally:
        holder.communicate(timeout=60)
    err = tty.getvalue()
    assert err.count("\n") == 1 and err.startswith("fedsim: waiting for CPU cores other fedsim runs hold "
                                                   "(first come, first served): pid ")
    assert f"pid {holder.pid} (" in err and "-c" in err and "FEDSIM_HOLD_CORES=0" in err
    assert len(notes) == 2 and notes[0].startswith(f"waiting for cores (pid {holder.pid}") and notes[1] is None


def test_a_short_wait_says_nothing(one_core, capsys):
    notes = []
    with T.hold_cores(torch.device("cpu"), notice=notes.append):
        pass
    assert notes == [] and capsys.readouterr().err == ""
    assert (one_core / "cpu-0").read_text().strip() == str(__import__("os").getpid())  # who held it last


def test_a_run_that_keeps_waiting_says_it_once_a_minute(one_core, monkeypatch, tty):
    monkeypatch.setattr(T, "NOTICE_AFTER_S", 0.0)
    with redirect_stderr(tty):
        for _ in range(3):
            T._Notice().say([])
    assert tty.getvalue().count("\n") == 1
    assert T.NOTICE_EVERY_S == 60.0


def test_a_captured_stderr_gets_no_notice_but_the_bar_does(one_core, capsys):
    """Off a terminal (a test, a pipe) stderr keeps its contract: an exit 2 is one line."""
    notes = []
    T._Notice(notes.append).say([])
    assert capsys.readouterr().err == "" and notes == ["waiting for cores (another process)"]


def test_the_progress_bar_shows_the_note():
    from fedsim.progress import progress_bar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    bar = progress_bar("run", 3, stream=stream)
    bar({"round": 0, "sim_time": 1.0})
    bar.note("waiting for cores (pid 7 (python x))")
    assert "waiting for cores (pid 7 (python x))" in stream.getvalue().splitlines()[-1].split("\r")[-1]
    bar.note(None)
    bar({"round": 1, "sim_time": 2.0})
    bar.close()
    assert "waiting" not in stream.getvalue().split("\r")[-1]


def test_performance_doc_states_the_notice(monkeypatch, tty):
    text = (ROOT / "docs" / "performance.md").read_text()
    assert f"`NOTICE_AFTER_S` ({T.NOTICE_AFTER_S:g} s)" in text and f"`NOTICE_EVERY_S` ({T.NOTICE_EVERY_S:g} s)" in text
    example = text.split("```\nfedsim: waiting", 1)[1].split("\n```", 1)[0]
    monkeypatch.setattr(T, "_holders", lambda fds: [(4711, "python -m pytest tests")])
    monkeypatch.setattr(T, "_state", dict(T._state, noticed=-float("inf")))
    with redirect_stderr(tty):
        T._Notice().say([])
    assert tty.getvalue() == "fedsim: waiting" + example + "\n"
    assert "`FEDSIM_HOLD_CORES=0`" in text
