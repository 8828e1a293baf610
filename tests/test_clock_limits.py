"""Hostile numbers and files for the clock (issue 12 items 10, 11, 13, 14): every case ends with a
one-line input error (exit 2), never a hang, an overflow or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedsim.clock import MIN_SOJOURN, TraceError, load_trace, whole_steps
from fedsim.clock.model import MAX_STEPS
from fedsim.runner.clock import build_clock
from fedsim.scenario import ScenarioError, parse_scenario

HEADER = "client,start,end,online,speed\n"


def scenario(system: dict, **round_kw) -> dict:
    return {"name": "limits", "rounds": 3, "data": {"name": "quadratic", "clients": 2, "dim": 2},
            "system": system, "round": round_kw or {"policy": "window", "window": 10.0}}


def cli(tmp_path: Path, raw: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-m", "fedsim", "run", str(path), "--schedule-only", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=timeout, env=env)


# ---------------------------------------------------------------------------- item 10: event rate
@pytest.mark.parametrize("key", ["mean_online", "mean_offline"])
def test_tiny_markov_sojourn_is_refused_relative_to_the_window(key):
    means = {"mean_online": 600.0, "mean_offline": 60.0, key: 1e-300}
    sc = parse_scenario(scenario({"availability": {"model": "markov", **means}}))
    with pytest.raises(ScenarioError, match=rf"^system.availability.{key}: must be at least 0.001 s"):
        build_clock(sc, [1, 1])  # MIN_SOJOURN (1e-4) of the 10 s window


def test_sojourn_bound_for_wait_is_the_quickest_job():
    # wait, 3 steps at speeds 1 and 4, latency 0.5: quickest job 0.5 + 3 / 4 + 0.5 = 1.75 s
    av = {"model": "markov", "mean_online": 1.75e-4 * 0.99, "mean_offline": 1.0}
    raw = scenario({"speed": [1.0, 4.0], "latency": 0.5, "availability": av}, policy="wait", local_steps=3)
    with pytest.raises(ScenarioError, match="at least 0.000175 s"):
        build_clock(parse_scenario(raw), [1, 1])
    raw["system"]["availability"]["mean_online"] = 1.75e-4 * 1.01
    assert build_clock(parse_scenario(raw), [1, 1]).time_scale() == 1.75
    assert MIN_SOJOURN == 1e-4


def test_tiny_markov_sojourn_exits_2_without_hanging(tmp_path):
    av = {"model": "markov", "mean_online": 1e-300, "mean_offline": 1e-300}
    done = cli(tmp_path, scenario({"availability": av}))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("system.availability.mean_online: must be at least")


def test_tiny_cycled_trace_period_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "0,0,1e-300,1,1\n0,1e-300,2e-300,0,0\n1,0,100,1,1\n")
    sc = parse_scenario(scenario({"trace": str(path)}))
    with pytest.raises(TraceError, match=r"client 0's trace period 2e-300 s is shorter than 0.001 s"):
        build_clock(sc, [1, 1])
    sc = parse_scenario(scenario({"trace": str(path), "trace_repeat": "last"}))  # not cycled: fine
    assert build_clock(sc, [1, 1]).num_clients == 2


# ---------------------------------------------------------------------------- item 11: huge numbers
# The bounds are fedsim.limits' (docs/reliability.md): times <= 1e9 s, speeds in [1e-6, 1e6],
# at most 10**7 steps per job, 10**4 epochs; the clock caps every job's tau_i at 10**7.
def test_whole_steps_never_overflow():
    assert MAX_STEPS == 10**7
    assert whole_steps(1e300) == 10**7 and whole_steps(float("inf")) == 10**7
    assert whole_steps(float("nan")) == 0 and whole_steps(-float("inf")) == 0
    got = whole_steps(np.array([1e300, np.inf, np.nan, -np.inf, 2.5]))
    assert got.tolist() == [10**7, 10**7, 0, 0, 2] and got.dtype == np.int64


@pytest.mark.parametrize("system, message", [
    ({"speed": 1e300}, "system.speed: must be in [1e-06, 1e+06]"),
    ({"speed": [1.0, 1e13]}, "system.speed: must be in [1e-06, 1e+06]"),
    ({"speed": {"dist": "uniform", "low": 1, "high": 1e300}}, "system.speed: must be in [1e-06, 1e+06]"),
    ({"latency": 1e300}, "system.latency: must be <= 1e+09"),
    ({"availability": {"model": "markov", "mean_online": 1e300, "mean_offline": 1}},
     "system.availability.mean_online: must be <= 1e+09"),
    ({"availability": [[[0, 1e300]], []]}, "system.availability: interval ends must be <= 1e+09 s"),
])
def test_huge_system_numbers_are_refused(system, message):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(scenario(system, policy="wait", local_steps=1))
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("key, value, message", [
    ("max_local_steps", 10**30, "round.max_local_steps: must be <= 10,000,000"),
    ("local_steps", 10**30, "round.local_steps: must be <= 10,000,000"),
    ("local_steps", {"dist": "randint", "low": 1, "high": 10**26}, "round.local_steps: must be <= 10,000,000"),
    ("local_epochs", 10**7, "round.local_epochs: must be <= 10,000"),
])
def test_huge_work_is_refused(key, value, message):
    with pytest.raises(ScenarioError) as err:
        work = {} if key in ("local_steps", "local_epochs") else {"local_steps": 1}
        parse_scenario({"data": {"name": "synthetic", "clients": 2}, "round": {"policy": "wait", **work, key: value}})
    assert str(err.value).startswith(message), str(err.value)


def test_huge_window_is_refused():
    with pytest.raises(ScenarioError, match=r"^round.window: must be <= 1e\+09"):
        parse_scenario(scenario({}, policy="window", window=1e300))


def test_fast_client_in_a_long_window_gets_capped_steps():
    # 1e6 steps/s in a 1e9 s window: ~1e15 steps fit; with max_local_steps the scenario is valid,
    # and the clock's own cap (MAX_STEPS) holds even for a lognormal tail the validation cannot bound.
    sc = parse_scenario(scenario({"speed": {"dist": "lognormal", "median": 1e6, "sigma": 10}},
                                 policy="window", window=1e9))
    (table,) = [t for _, t in zip(range(1), build_clock(sc, [1, 1]).tables())]
    assert max(table.columns["steps"].tolist()) == 10**7  # capped, not overflowed


@pytest.mark.parametrize("row, message", [
    ("0,0,1e308,1,1", "end must be at most 1e+09 in size, got '1e308'"),
    ("0,0,10,1,1e308", "speed must be at most 1e+06 in size, got '1e308'"),
    ("0,-1e300,10,1,1", "start must be at most 1e+09 in size"),
])
def test_huge_trace_numbers_are_refused(tmp_path, row, message):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(TraceError) as err:
        load_trace(path, 1)
    assert str(err.value) == f"{path} line 2: {message}" or str(err.value).startswith(f"{path} line 2: {message}")


# ---------------------------------------------------------------------------- item 13: special files
def test_device_file_is_not_a_trace():
    with pytest.raises(TraceError, match="^/dev/zero: not a regular file"):
        load_trace("/dev/zero", 1)


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    result = {}

    def load():
        try:
            load_trace(fifo, 1)
        except TraceError as err:
            result["err"] = str(err)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the reader so the test process can end, then fail
        with open(fifo, "w"):
            pass
        pytest.fail("load_trace blocked on a FIFO")
    assert result["err"] == f"{fifo}: not a regular file (a device, FIFO or socket)"


def test_special_file_trace_exits_2(tmp_path):
    done = cli(tmp_path, scenario({"trace": "/dev/zero"}))
    assert done.returncode == 2 and done.stderr == "/dev/zero: not a regular file (a device, FIFO or socket)\n"


# ---------------------------------------------------------------------------- item 14: odd digits
@pytest.mark.parametrize("client", ["\u00b2", "\u0663", "\uff11"])
def test_non_ascii_digit_client_is_refused(tmp_path, client):
    assert client.isdigit()
    path = tmp_path / "t.csv"
    path.write_text(HEADER + f"{client},0,10,1,1\n", encoding="utf-8")
    with pytest.raises(TraceError, match=f"line 2: client must be a non-negative integer, got '{client}'"):
        load_trace(path, 1)
