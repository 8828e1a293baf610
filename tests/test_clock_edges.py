"""Issue 38, the clock's edges: a run that never ends (an async time budget no client fits, a job
that walks outages shorter than a step, an async run whose jobs all fail), the steps bound of
``round.local_time`` and the server's aggregation FLOPs. Each scenario that cannot run is refused
up front in one line (exit 2, nothing written); what only the run can find stops it in one line
naming the cause. Expected values are worked out by hand in each docstring."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from _tiny_runs import exit_2
from fedsim.availability.markov import MarkovAvailability
from fedsim.cli import main
from fedsim.clock import Clock, ClockError, Population, WorkCost
from fedsim.clock.availability import ToggleStates
from fedsim.clock.sim import MAX_STALLS
from fedsim.scenario import RoundConfig, SystemConfig

#: synthetic data (FedProx's Synthetic: 60 features, 10 classes) under logreg: 60 x 10 + 10 parameters
PARAMS = 60 * 10 + 10
#: float32 parameters: 4 bytes each, 8 bits a byte, per transfer
BITS = PARAMS * 4 * 8
COST = WorkCost(step_flops=None, model_bytes=PARAMS * 4, upload_bytes=PARAMS * 4, params=PARAMS)

NETWORK = {"speed": 1.0, "latency": 0.25, "network": {"down": 1.0e6, "up": 1.0e6}}
ASYNC = {"policy": "async", "local_time": 0.5, "concurrency": 2, "buffer": 1}


def scenario(system: dict, rnd: dict, rounds: int = 2) -> dict:
    algorithm = "fedbuff" if rnd["policy"] == "async" else "fedavg"
    return {"name": "edges", "seed": 0, "rounds": rounds, "data": {"name": "synthetic", "clients": 2},
            "model": {"name": "logreg"}, "system": system, "round": rnd, "algorithm": {"name": algorithm}}


def both_refuse(write_yaml, tmp_path, capsys, raw, *needles, schedule_only=False) -> str:
    """validate and run exit 2 with the same one line; the run leaves no folder."""
    sc = write_yaml(raw)
    line = exit_2(capsys, ["validate", str(sc)], *needles)
    out = tmp_path / "out"
    argv = ["run", str(sc), "--out", str(out), "--quiet"] + (["--schedule-only"] if schedule_only else [])
    assert exit_2(capsys, argv, *needles) == line
    assert not out.exists()
    return line


def clock(system: dict, rnd: dict, *, fast: bool, m: int = 2) -> Clock:
    return Clock(SystemConfig(**system).value(), RoundConfig(**rnd).value(32), Population.of([1] * m), seed=0,
                 fast=fast, cost=COST)


def plans(ck: Clock, n: int) -> list:
    return list(itertools.islice(ck.plans(), n))


# ----------------------------------------------------------------------------- items 1 and 5: no step fits
@pytest.mark.parametrize("server", [None, {"down": 1.0e6}, {"up": 1.0e6}], ids=["alone", "server_down", "server_up"])
def test_a_local_time_that_fits_no_step_is_refused_up_front(write_yaml, tmp_path, capsys, server):
    """Speed 1 step/s, local_time 0.5 s: 0.5 whole steps at the fastest speed, so every job is
    dropped (with ``server.down`` only after its download) and no update is ever made."""
    system = {**NETWORK, **({} if server is None else {"server": server})}
    line = both_refuse(write_yaml, tmp_path, capsys, scenario(system, ASYNC),
                       "round.local_time: 0.5 s fits no local step at the fastest speed (1 steps/s)")
    assert "no client is online" not in line


def test_the_no_step_rule_counts_the_smallest_slowdown_and_the_fastest_speed(write_yaml, tmp_path, capsys):
    """Speeds 0.5 and 1, slowdown uniform in [2, 3], local_time 1.5: at best 1.5 x 1 / 2 = 0.75
    steps: refused. local_time 2: 2 x 1 / 2 = 1 step for the fast client: accepted."""
    system = {"speed": [0.5, 1.0], "slowdown": {"dist": "uniform", "low": 2.0, "high": 3.0}}
    both_refuse(write_yaml, tmp_path, capsys, scenario(system, {**ASYNC, "local_time": 1.5}),
                "round.local_time: 1.5 s fits no local step at the fastest speed (1 steps/s, smallest slowdown 2)")
    assert main(["validate", str(write_yaml(scenario(system, {**ASYNC, "local_time": 2.0})))]) == 0


def test_a_local_time_that_fits_no_step_on_the_fastest_device_is_refused(write_yaml, tmp_path, capsys):
    """``system.compute``: 1,000 FLOP/s and logreg's step of at least 2 x 610 x 32 FLOPs (a
    multiply-add per parameter and sample, forward alone) take over 39 s a step; local_time 1."""
    system = {"compute": {"flops": 1.0e3}}
    both_refuse(write_yaml, tmp_path, capsys, scenario(system, {**ASYNC, "local_time": 1.0}),
                "system.compute.flops: round.local_time: 1 s fits no local step at the fastest device (1000 FLOP/s")


def test_with_a_trace_the_rule_reads_the_traces_speeds(write_yaml, tmp_path, capsys):
    """A trace gives the speeds (``system.speed``, 1 by default, is not read): online speeds 4 and
    2 steps/s fit 4 x 0.5 = 2 steps in local_time 0.5 (accepted); 1.5 and 0.5 fit 0.75 (refused,
    naming the trace). A window of 2e7 s at the trace's 0.1 steps/s fits 2e6 steps (accepted; the
    default speed would say 2e7)."""
    fast, slow = tmp_path / "fast.csv", tmp_path / "slow.csv"
    fast.write_text("client,start,end,online,speed\n0,0,100,1,4\n1,0,50,1,2\n1,50,100,0,0\n")
    slow.write_text("client,start,end,online,speed\n0,0,100,1,1.5\n1,0,100,1,0.5\n")
    assert main(["validate", str(write_yaml(scenario({"trace": str(fast)}, ASYNC)))]) == 0
    both_refuse(write_yaml, tmp_path, capsys, scenario({"trace": str(slow)}, ASYNC),
                f"round.local_time: 0.5 s fits no local step at the fastest speed in {slow} (1.5 steps/s)")
    tenth = tmp_path / "tenth.csv"
    tenth.write_text("client,start,end,online,speed\n0,0,100,1,0.1\n1,0,100,1,0.05\n")
    assert main(["validate", str(write_yaml(scenario({"trace": str(tenth)}, {"policy": "window", "window": 2e7})))]) == 0
    capsys.readouterr()


def test_a_budget_no_job_fits_stops_the_clock_after_a_bounded_number_of_jobs():
    """The issue's world on the clock itself (no validation): a shared 1 Mbit/s downlink, two
    clients' downloads of ``BITS`` bits at 0.5 Mbit/s each after the 0.25 s latency; each job then
    finds no step and is dropped, and both start again. Jobs 2k and 2k + 1 end at
    (k + 1) x (0.25 + 2 BITS / 1e6). The guard allows max(1000 x 2, 10,000) jobs in a row without
    an upload: job 10,001 (k = 5,000) stops it."""
    t = 5001 * (0.25 + 2 * BITS / 1e6)
    for fast in (True, False):
        with pytest.raises(ClockError) as err:
            plans(clock({**NETWORK, "server": {"down": 1.0e6}}, ASYNC, fast=fast), 1)
        assert str(err.value) == (f"the clock stops at t={t:g}: policy async: the last 10,001 jobs ended without "
                                  "an upload (10,001 dropped: no local step fit; 0 failed: an outage), so the server "
                                  "never updates")


def test_every_online_client_declined_names_the_cause_not_an_outage():
    """``server.up`` (the download alone): each job is known to fit no step at its start and is
    dropped there; both clients are asked at t = 0 and nothing else ever happens. Every client is
    online, so the error must not say none is."""
    for fast in (True, False):
        with pytest.raises(ClockError, match=r"^the clock stops at t=0: every online client's job fits no local "
                                             r"step now and nothing else ever happens"):
            plans(clock({**NETWORK, "server": {"up": 1.0e6}}, ASYNC, fast=fast), 1)


def test_an_async_run_whose_jobs_all_fail_stops_after_a_bounded_number_of_jobs():
    """Both clients are online in [k, k + 0.5) and offline in [k + 0.5, k + 1) for k < 6,000;
    a job (3 steps at 5 steps/s: 0.6 s) started at k fails at k + 0.5. Two failures per second:
    failure number 10,001 is client 0's at k = 5,000, t = 5000.5."""
    offline = tuple((k + 0.5, k + 1.0) for k in range(6000))
    system = {"speed": 5.0, "availability": (offline, offline)}
    rnd = {"policy": "async", "local_steps": 3, "concurrency": 2, "buffer": 1}
    for fast in (True, False):
        with pytest.raises(ClockError) as err:
            plans(clock(system, rnd, fast=fast), 1)
        assert str(err.value) == ("the clock stops at t=5000.5: policy async: the last 10,001 jobs ended without an "
                                  "upload (0 dropped: no local step fit; 10,001 failed: an outage), so the server "
                                  "never updates")


# ----------------------------------------------------------------------------- item 2: one steps rule
def test_local_time_and_window_share_the_steps_bound(write_yaml, tmp_path, capsys):
    """local_time 10,000 s at 10,000 steps/s: floor(S s) = 1e8 steps, more than the 1e7 a job may
    take: refused as a window of 10,000 s + 2 latencies is (it was capped to 1e7 in silence)."""
    system = {"speed": 10000.0, "latency": 0.25}
    both_refuse(write_yaml, tmp_path, capsys, scenario(system, {**ASYNC, "local_time": 10000.0}),
                "round.local_time: fits 1e+08 local steps per job at the fastest speed, more than 10,000,000 "
                "(shorten local_time, or cap with round.max_local_steps)", schedule_only=True)
    both_refuse(write_yaml, tmp_path, capsys, scenario(system, {"policy": "window", "window": 10000.5}),
                "round.window: fits 1e+08 local steps per job at the fastest speed, more than 10,000,000 "
                "(shorten the window, or cap with round.max_local_steps)", schedule_only=True)


def test_a_capped_local_time_runs_its_cap(write_yaml, tmp_path):
    """round.max_local_steps 1,000 caps the 1e8 steps: the job does 1,000 and spends its budget."""
    raw = scenario({"speed": 10000.0}, {**ASYNC, "local_time": 10000.0, "concurrency": 1, "max_local_steps": 1000},
                   rounds=1)
    sc = write_yaml(raw)
    assert main(["validate", str(sc)]) == 0
    assert main(["run", str(sc), "--out", str(tmp_path / "out"), "--schedule-only"]) == 0
    import pandas as pd

    rows = pd.read_csv(tmp_path / "out" / "clients.csv")
    assert rows[["status", "steps", "end"]].values.tolist() == [["completed", 1000, 10000.0]]


# ----------------------------------------------------------------------------- item 3: short sojourns
def _short_periods(n: int) -> tuple:
    """Online in [k, k + 0.5) and offline in [k + 0.5, k + 1) for k < n, online from n on."""
    return tuple((k + 0.5, k + 1.0) for k in range(n))


def test_resume_over_many_periods_shorter_than_a_step_walks_each_toggle_once(monkeypatch):
    """Speed 1 (a step takes 1 s), 2 steps, no latency, resume. The client's online periods
    [k, k + 0.5) are too short for a step: each outage at k + 0.5 loses the step in progress, and
    the job resumes at k + 1. From n on it stays online: its 2 steps end at n + 2, the upload
    (no latency, no network) too; it sat out n outages. The fast path reads the client's 2n
    toggles through one cursor: each walked once, not once per outage from the round's open."""
    n = 1000
    walked = [0]
    toggled = ToggleStates.toggled

    def counting(self, idx):
        walked[0] += len(idx)
        return toggled(self, idx)

    monkeypatch.setattr(ToggleStates, "toggled", counting)
    system = {"speed": 1.0, "on_outage": "resume", "availability": (_short_periods(n),)}
    rnd = {"policy": "wait", "local_steps": 2}
    (fast,) = plans(clock(system, rnd, fast=True, m=1), 1)
    assert walked[0] <= 2 * n + 2  # every toggle once (quadratic: about n^2)
    (slow,) = plans(clock(system, rnd, fast=False, m=1), 1)
    assert fast == slow
    (job,) = fast.jobs
    assert (job.status, job.steps, job.end, job.resumed) == ("completed", 2, n + 2.0, n)
    assert fast.close == n + 2.0


def test_a_job_that_never_finishes_a_step_stops_the_clock():
    """The same online periods without end: the job makes no progress at any outage; its
    MAX_STALLS-th (10,000th) outage, at 9,999.5, stops the clock naming it."""
    assert MAX_STALLS == 10_000
    system = {"speed": 1.0, "on_outage": "resume", "availability": (_short_periods(MAX_STALLS + 5),)}
    for fast in (True, False):
        with pytest.raises(ClockError) as err:
            plans(clock(system, {"policy": "wait", "local_steps": 2}, fast=fast, m=1), 1)
        assert str(err.value) == ("the clock stops at t=9999.5: client 0's job 0 sat out 10,000 outages in a row "
                                  "without finishing a local step or a transfer (system.on_outage: resume): its "
                                  "online periods are shorter than one step or transfer")


def test_the_issues_markov_world_stops_in_one_line(write_yaml, tmp_path, capsys):
    """Issue 38: speed 5 (0.2 s a step), Markov sojourns of mean 0.01 s, 3 steps, resume: an online
    period of 0.2 s has probability e^-20; the run stops at a job's 10,000th fruitless outage with
    exit 1 and one line (it spun for minutes before)."""
    av = {"model": "markov", "mean_online": 0.01, "mean_offline": 0.01}
    raw = scenario({"speed": 5.0, "on_outage": "resume", "availability": av}, {"policy": "wait", "local_steps": 3},
                   rounds=1)
    assert main(["run", str(write_yaml(raw)), "--schedule-only", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("fedsim: error: ClockError: the clock stops at t=")
    assert "sat out 10,000 outages in a row without finishing a local step or a transfer" in err


@pytest.mark.parametrize("kind", ["arrays", "timelines"])
def test_a_cursor_reads_what_the_toggle_times_say(kind):
    """A cursor (copied arrays for Markov's ``MarkovStates``, drawn-ahead times for the default
    ``TimelineStates``) asked at increasing times gives online = initial XOR (an odd number of
    toggles <= t) and the first toggle after t, from each client's own toggle list."""
    import bisect

    import numpy as np

    from fedsim.clock.availability import TimelineStates, checked_timelines

    model = MarkovAvailability(model="markov", mean_online=2.0, mean_offline=1.0).clock_value()
    timelines = model.timelines(3, 7)
    toggles = [list(itertools.islice(tl.toggles(), 400)) for tl in timelines]
    states = model.states(3, 7) if kind == "arrays" else TimelineStates(checked_timelines(model, 3, 7))
    times = np.sort(np.random.default_rng(0).uniform(0, 200, 300))
    for c in range(3):
        cursor = states.cursor(np.array([c]))
        for t in sorted(times.tolist() + [toggles[c][50]]):  # a time exactly at a toggle too
            online, nxt = cursor.at(t)
            n = bisect.bisect_right(toggles[c], t)
            assert (bool(online[0]), float(nxt[0])) == (timelines[c].initial ^ bool(n % 2), toggles[c][n])


# ----------------------------------------------------------------------------- item 4: aggregation FLOPs
def test_aggregation_flops_take_the_models_parameter_count(write_yaml, tmp_path, capsys):
    """wait, 2 clients at 5 steps/s, 3 steps, no latency: uploads at 0.6 s. The server at 1e6
    FLOP/s aggregates 2 x 610 FLOPs per update, 2 updates: 2.44e-3 s. Rounds close at
    r x (0.6 + 0.00244); validate said 'needs the model's parameter count' before."""
    raw = scenario({"speed": 5.0, "server": {"aggregate": {"flops": 1.0e6}}}, {"policy": "wait", "local_steps": 3})
    sc = write_yaml(raw)
    assert main(["validate", str(sc)]) == 0
    assert main(["run", str(sc), "--out", str(tmp_path / "s"), "--schedule-only"]) == 0
    assert main(["run", str(sc), "--out", str(tmp_path / "t"), "--quiet"]) == 0
    import pandas as pd

    aggregate = 2 * PARAMS * 2 / 1.0e6
    round_ = 3 / 5.0 + aggregate
    for out in ("s", "t"):
        times = pd.read_csv(tmp_path / out / "rounds.csv")["sim_time"].tolist()
        assert times == pytest.approx([round_, 2 * round_], rel=1e-12, abs=0)


# ----------------------------------------------------------------------------- what the docs state
def test_the_docs_state_the_guards_bounds():
    from fedsim.clock.sim import idle_bound

    docs = Path(__file__).resolve().parent.parent / "docs"
    clock_md = " ".join((docs / "clock.md").read_text().split())
    assert MAX_STALLS == 10_000 and "sits out 10,000 outages in a row (`MAX_STALLS`" in clock_md
    assert (idle_bound(2), idle_bound(10), idle_bound(20)) == (10_000, 10_000, 20_000)
    assert "more than max(1000 x clients, 10,000) jobs in a row that ended without an upload" in clock_md
    assert "max(1000 x clients, 10,000) jobs all ended without an upload" in " ".join((docs / "async.md").read_text().split())
    reliability = " ".join((docs / "reliability.md").read_text().split())
    assert "round.local_time: 0.5 s fits no local step at the fastest speed (1 steps/s)" in reliability
