"""Progress bars (fedsim/progress.py): nothing at all off a terminal; on a terminal a tqdm bar with
count, rate, ETA and the run's simulated time and accuracy."""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass

import pytest
import yaml

from fedsim.compare import execute
from fedsim.progress import progress_bar

from _fake_runs import write_run


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@dataclass(frozen=True)
class Row:  # a typed round record, as the runner may hand over instead of a dict
    round: int
    sim_time: float
    test_acc: float | None = None
    diverged: int = 0


def test_silent_off_a_terminal(monkeypatch):
    plain = io.StringIO()
    assert progress_bar("run", 5, stream=plain) is None
    assert progress_bar("run", 5, stream=object()) is None  # a stream without isatty
    monkeypatch.setattr("sys.stderr", plain)
    assert progress_bar("run", 5) is None  # the default stream is read at call time
    assert plain.getvalue() == ""


def test_rounds_bar_renders_count_rate_eta_and_postfix():
    term = FakeTerminal()
    bar = progress_bar("quick", 3, stream=term)
    bar({"round": 0, "sim_time": 10.0, "test_acc": 0.25})
    bar({"round": 1, "sim_time": 20.0, "test_acc": None})  # no evaluation this round
    bar(Row(2, 30.0, 0.5))
    text = term.getvalue()
    last = text.rstrip("\n").split("\r")[-1]
    assert last.startswith("quick: 100%") and " 3/3 " in last
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d, ", last)  # elapsed < remaining (ETA)
    assert re.search(r"(round/s|s/round)", last)  # the rate
    assert last.endswith("t_sim=30.0s, acc=0.5000]")
    assert text.endswith("\n")  # the final round closed the bar
    bar(Row(2, 30.0, 0.5))  # after closing, nothing more is written
    assert term.getvalue() == text


def test_rounds_bar_keeps_the_last_accuracy_and_closes_on_divergence():
    term = FakeTerminal()
    bar = progress_bar("div", 5, stream=term, initial=1)  # resumed after round 0
    bar(Row(1, 2.0, 0.75))
    bar(Row(2, 3.0, float("nan"), diverged=1))
    last = term.getvalue().rstrip("\n").split("\r")[-1]
    assert " 3/5 " in last and last.endswith("t_sim=3.0s, acc=0.7500]")
    assert term.getvalue().endswith("\n")


def test_compare_bar_counts_runs_and_keeps_the_log_lines(tmp_path, monkeypatch):
    def fake(scenario_text, folder, table_format="csv"):
        sc = yaml.safe_load(scenario_text)
        write_run(folder, seed=sc["seed"], algorithm=sc["algorithm"]["name"], rounds=sc["rounds"], partition=False)
        with open(os.path.join(folder, "scenario.yaml"), "w") as f:
            f.write(scenario_text)
        return {"rounds": sc["rounds"], "sim_time": 1.0, "test_acc": 0.5, "wall": 0.0}

    monkeypatch.setattr(execute, "run_one", fake)
    base = {"name": "tiny", "rounds": 2, "data": {"name": "quadratic", "centers": [[1.0], [0.0]]},
            "round": {"policy": "window", "window": 2.0}}
    lines = []
    quiet = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet)
    # the fake replaces run_one, the one-program-per-run path (stack=False)
    execute.run_compare(base, out=tmp_path / "a", seeds=[0, 1], progress=True, log=lines.append, stack=False)
    assert quiet.getvalue() == "" and len(lines) == 2  # off a terminal: only the log

    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    execute.run_compare(base, out=tmp_path / "b", seeds=[0, 1, 2], progress=True,
                        log=lambda line: term.write(line + "\n"), stack=False)
    text = term.getvalue()
    assert "[3/3] fedavg-window seed 2: 2 rounds" in text
    last = text.rstrip("\n").split("\r")[-1]
    assert last.startswith("tiny: 100%") and " 3/3 " in last and re.search(r"(run/s|s/run)", last)
