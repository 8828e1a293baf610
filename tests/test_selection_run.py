"""Selection rules through the runner: the closed loop (observations after each round, the
reported losses), resume with the logged observations, the information boundary, and the
selection rule's errors."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import yaml

import fedsim
from fedsim import registries
from fedsim.cli import main
from fedsim.clock.selection import Picked, SelectionRule
from fedsim.selection.section import SelectionSection

BASE = {
    "name": "sel",
    "seed": 3,
    "rounds": 8,
    "data": {"name": "synthetic", "clients": 10},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "uniform", "low": 2.0, "high": 6.0}, "latency": 0.1,
               "availability": {"model": "markov", "mean_online": 8.0, "mean_offline": 2.0}},
    "round": {"policy": "window", "window": 2.0, "clients_per_round": 4, "selection": {"name": "oort"}},
    "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 8},
    "checkpoint": {"every": 2},
}
FILES = ("rounds.csv", "clients.csv", "model.pt")
FAULTS = Path(__file__).with_name("_faults.py")


def _write(tmp_path, raw, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


# ----------------------------------------------------------------------------- a recording rule
SEEN: list = []


@dataclass(frozen=True)
class Recorder(SelectionRule):
    """Uniform by key, recording every Request and Observations it is given (plain values)."""

    uses_feedback: ClassVar[bool] = True

    def select(self, state, request):
        online = request.online()
        SEEN.append(("pick", request.key, request.time, request.k, online.tolist()))
        pick = np.sort(online[np.random.default_rng(request.key).permutation(len(online))[: request.k]])
        return state, Picked.of(pick, request.p)

    def observe(self, state, obs):
        SEEN.append(("obs", obs.round, obs.time, obs.client.tolist(), obs.status.tolist(), obs.steps.tolist(),
                     obs.download.tolist(), obs.compute.tolist(), obs.upload.tolist(), obs.loss.tolist()))
        return state


class RecorderSection(SelectionSection):
    def clock_value(self):
        return Recorder()


@pytest.fixture
def recorder():
    registries.SELECTORS.register("recorder", RecorderSection)
    SEEN.clear()
    yield SEEN
    registries.SELECTORS.unregister("recorder")


def _trace(tmp_path, off0):
    """A quadratic scenario whose client 0 is offline in ``off0``, everybody else always online."""
    return {
        "name": "boundary", "seed": 1, "rounds": 14,
        "data": {"name": "quadratic", "clients": 4},
        "system": {"speed": [1.0, 2.0, 3.0, 4.0], "latency": 0.5,
                   "availability": [[off0], [], [], []]},
        "round": {"policy": "window", "window": 10.0, "clients_per_round": 2, "selection": {"name": "recorder"}},
        "algorithm": {"name": "fedavg", "lr": 0.1},
    }


def test_a_rule_never_sees_the_future_of_the_trace(tmp_path, recorder):
    """Two worlds that differ only after t = 105 (client 0's outage): every pick up to round 10's
    open (t = 100) and every observation before it are the same; the difference shows only in
    what the server observes after it happened."""
    fedsim.run(_trace(tmp_path, [105.0, 125.0]), out=tmp_path / "a")
    a = list(recorder)
    recorder.clear()
    fedsim.run(_trace(tmp_path, [107.0, 200.0]), out=tmp_path / "b")
    b = list(recorder)
    upto = next(i for i, e in enumerate(a) if e[0] == "pick" and e[1] == 10) + 1
    assert a[:upto] == b[:upto]
    assert a != b  # the worlds differ, and the server learns it once it happens
    # the log alternates pick, observation: round r + 1 is picked after plan r was observed
    assert [e[0] for e in a[:6]] == ["pick", "obs", "pick", "obs", "pick", "obs"]
    assert all(e[1] == k for k, e in enumerate(x for x in a if x[0] == "obs"))


def test_observations_carry_durations_and_the_losses_clients_report(tmp_path, recorder):
    out = tmp_path / "run"
    fedsim.run(_trace(tmp_path, [105.0, 125.0]), out=out)
    clients = fedsim.load_run(out).clients
    obs = [e for e in recorder if e[0] == "obs"]
    for (_, r, time, cl, status, steps, down, comp, up, loss), (_, rows) in zip(obs, clients.groupby("round")):
        assert cl == rows.client.tolist() and status == rows.status.tolist() and steps == rows.steps.tolist()
        done = rows.status == "completed"
        np.testing.assert_array_equal(np.array(down)[done.values], rows.download[done].values)
        np.testing.assert_array_equal(np.array(up)[done.values], rows.upload[done].values)
        # compute: from the end of the download to the start of the upload
        want = (rows.end - rows.start - rows.download - rows.upload)[done].values
        np.testing.assert_allclose(np.array(comp)[done.values], want, rtol=0, atol=1e-12)
        assert np.isfinite(np.array(loss)[done.values & (rows.steps > 0).values]).all()
        assert np.isnan(np.array(loss)[~done.values]).all()


def test_quadratic_losses_reported_are_the_clients_objective(tmp_path, recorder):
    """One local step of plain SGD from x = 0 on F_i(x) = 0.5 ||x - c_i||^2: the reported loss is
    F_i(0) = 0.5 ||c_i||^2 (the loss at the point the gradient was taken)."""
    raw = {"name": "q", "seed": 0, "rounds": 1, "data": {"name": "quadratic", "centers": [[1.0, 2.0], [3.0, -1.0]]},
           "system": {"speed": 1.0}, "round": {"policy": "wait", "local_steps": 1,
                                               "selection": {"name": "recorder"}, "clients_per_round": 2},
           "algorithm": {"name": "fedavg", "lr": 0.1}}
    fedsim.run(raw, out=tmp_path / "q")
    (obs,) = [e for e in recorder if e[0] == "obs"]
    assert obs[3] == [0, 1]
    assert obs[9] == [0.5 * 5.0, 0.5 * 10.0]


@pytest.mark.parametrize("rule", ["oort", "tiers", "fastest"])
def test_resumed_run_with_a_feedback_rule_is_byte_identical(tmp_path, rule):
    """The checkpoint keeps the observations the rule was given; a run killed after round 3's rows
    (checkpoint at 2) and resumed replays them into a fresh state and ends byte for byte as the
    uninterrupted run."""
    raw = {**BASE, "round": {**BASE["round"], "selection": {"name": rule}}}
    path = _write(tmp_path, raw)
    ref = tmp_path / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    out = tmp_path / "killed"
    killed = subprocess.run([sys.executable, str(FAULTS), "round:3", "run", str(path), "--quiet", "--out", str(out)],
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL and not (out / "model.pt").exists()
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    for name in FILES:
        assert (ref / name).read_bytes() == (out / name).read_bytes(), name


def test_a_feedback_rule_changes_who_is_picked_but_not_the_work_of_a_client(tmp_path):
    """Common random numbers: a client picked in round r by two rules does the same work in the
    same seconds (steps, download, upload, end) under both."""
    a = fedsim.run({**BASE, "checkpoint": {"every": 0}}, out=tmp_path / "oort").clients
    b = fedsim.run({**BASE, "round": {**BASE["round"], "selection": {"name": "uniform"}},
                    "checkpoint": {"every": 0}}, out=tmp_path / "uniform").clients
    both = a.merge(b, on=["round", "client"], suffixes=("_a", "_b"))
    assert len(both) > 0 and len(both) < len(a)  # some common picks, not all
    for col in ("status", "steps", "start", "end", "download", "upload"):
        assert (both[f"{col}_a"] == both[f"{col}_b"]).all(), col


def test_schedule_only_refuses_a_rule_that_needs_losses_and_runs_one_that_does_not(tmp_path, capsys):
    path = _write(tmp_path, BASE)
    assert main(["run", str(path), "--schedule-only", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "round.selection: 'oort' needs the training losses" in err
    assert not (tmp_path / "s").exists()
    fast = _write(tmp_path, {**BASE, "round": {**BASE["round"], "selection": {"name": "fastest"}}}, "f.yaml")
    assert main(["run", str(fast), "--schedule-only", "--out", str(tmp_path / "f")]) == 0


@dataclass(frozen=True)
class Broken(SelectionRule):
    answer: str = "duplicate"

    def select(self, state, request):
        online = request.online()
        if self.answer == "raise":
            raise KeyError("boom")
        clients = {"duplicate": [online[0], online[0]], "offline": [request.num_clients + 5],
                   "too_many": online, "too_few": online[:1], "float": np.array([0.5])}[self.answer]
        return state, Picked(np.asarray(clients), np.ones(len(clients), dtype=np.int64), np.ones(len(clients)))


class BrokenSection(SelectionSection):
    answer: str = "duplicate"

    def clock_value(self):
        return Broken(self.answer)


@pytest.mark.parametrize("answer, text", [
    ("duplicate", "picked twice"), ("offline", "out of range"), ("too_many", "more than the 2 asked for"),
    ("too_few", "picked 1 clients; 2 were asked for"), ("float", "integer ids"), ("raise", "select() failed: KeyError"),
])
def test_a_broken_rule_stops_the_run_in_one_line_keeping_the_rows(tmp_path, capsys, answer, text):
    registries.SELECTORS.register("broken", BrokenSection)
    try:
        raw = {**_trace(tmp_path, [105.0, 125.0]), "round": {"policy": "window", "window": 10.0,
                                                              "clients_per_round": 2,
                                                              "selection": {"name": "broken", "answer": answer}}}
        path = _write(tmp_path, raw)
        # a rule that raises is a part failing mid-run (exit 1); an answer out of contract is exit 2
        assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == (1 if answer == "raise" else 2)
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and text in err and "round.selection" in err, err
    finally:
        registries.SELECTORS.unregister("broken")


@pytest.mark.parametrize("selection, text", [
    ({"name": "nope"}, "round.selection.name: unknown selection rule 'nope'"),
    ({"name": "oort", "exploration_factor": "x"}, "round.selection.exploration_factor"),
    ({"weights": "normalized"}, "round.selection.name: missing"),
    ("oort", "round.selection: give {name: NAME, ...}"),
])
def test_bad_selection_keys_are_one_line_before_the_folder(tmp_path, capsys, selection, text):
    path = _write(tmp_path, {**BASE, "round": {**BASE["round"], "selection": selection}})
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and text in err, err


def test_a_sync_only_rule_is_refused_under_async(tmp_path, capsys):
    raw = {**BASE, "round": {"policy": "async", "concurrency": 3, "selection": {"name": "oort"}}}
    assert main(["validate", str(_write(tmp_path, raw))]) == 2
    assert "'oort' picks synchronous rounds only" in capsys.readouterr().err


def test_an_async_pick_sees_exactly_the_updates_made_by_its_time(tmp_path, recorder):
    """Every async pick at time t has been given the observations of every server update whose
    time is <= t, and of no other (updates at t itself are observed before t's slots are filled)."""
    raw = {"name": "async", "seed": 2, "rounds": 30, "data": {"name": "quadratic", "clients": 12},
           "system": {"speed": {"dist": "uniform", "low": 1.0, "high": 5.0}, "latency": 0.25,
                      "availability": {"model": "markov", "mean_online": 20.0, "mean_offline": 5.0}},
           "round": {"policy": "async", "concurrency": 4, "buffer": 2, "local_steps": 3,
                     "selection": {"name": "recorder"}},
           "algorithm": {"name": "fedbuff", "lr": 0.1}}
    rounds = fedsim.run(raw, out=tmp_path / "a").rounds
    times = rounds.sim_time.tolist()
    seen = 0
    picks = 0
    for e in recorder:
        if e[0] == "obs":
            seen += 1
            continue
        picks += 1
        assert seen == sum(1 for t in times if t <= e[2]), (e, seen)
    assert picks > len(times) // 2 and seen == len(times)


def test_run_fairness_reads_the_clients_table_over_every_client_of_the_scenario(tmp_path):
    """5 clients, client 4 offline for the whole run, full participation for 3 rounds: counts of
    heard jobs [3, 3, 3, 3, 0]; never heard 1/5; Gini sum|x_i - x_j| / (2 n^2 mean) = 24 / 120."""
    from fedsim.report.results import run_fairness

    raw = {"name": "fair", "seed": 0, "rounds": 3, "data": {"name": "quadratic", "clients": 5},
           "system": {"speed": 1.0, "availability": [[], [], [], [], [[0.0, 1e9]]]},
           "round": {"policy": "wait", "local_steps": 1}, "algorithm": {"name": "fedavg", "lr": 0.1}}
    fedsim.run(raw, out=tmp_path / "r")
    assert run_fairness(tmp_path / "r") == {"never_heard": 0.2, "gini_jobs": 0.2}
