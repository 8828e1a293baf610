"""The straggler levers on the clock (issues 25 and 26): resume after outages, partial uploads at a
deadline, async on a time budget, a shared server link and the server's aggregation time.

Hand-made worlds with event times written out by hand, and the SimPy path against the fast paths
(every field of every plan) on worlds that combine the levers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.availability.markov import MarkovAvailability
from fedsim.clock import Clock, Population, WorkCost
from fedsim.scenario import RandInt, RoundConfig, SystemConfig, Uniform

INF = float("inf")
#: 1e6 bytes a transfer: 8e6 bits, so a client with 4e6 bits/s needs 2 s alone
COST = WorkCost(step_flops=None, model_bytes=1e6, upload_bytes=1e6, params=1000)


def make(speed, *, fast=None, latency=0.0, sizes=None, seed=0, **kw) -> Clock:
    system_keys = {"availability", "on_outage", "network", "server", "slowdown"}
    system = SystemConfig(speed=speed, latency=latency, **{k: v for k, v in kw.items() if k in system_keys})
    rnd = RoundConfig(**{k: v for k, v in kw.items() if k not in system_keys})
    m = len(speed) if isinstance(speed, tuple) else len(sizes)
    return Clock(system.value(), rnd.value(4), Population.of(sizes or [1] * m), seed=seed, fast=fast, cost=COST)


def take(clock, n):
    return list(itertools.islice(clock.plans(), n))


def both(n, speed, **kw):
    """The same world's plans on the fast path and on the SimPy path (asserted equal)."""
    fast, slow = take(make(speed, fast=True, **kw), n), take(make(speed, fast=False, **kw), n)
    assert fast == slow
    return fast


def rows(plan, *fields):
    return [tuple(getattr(j, f) for f in fields) for j in plan.jobs]


# ----------------------------------------------------------------------------- resume
def test_resume_keeps_the_completed_steps_and_goes_on_when_back():
    """Speed 1, latency 0.5, 4 steps; offline in [2.2, 5). The download ends at 0.5, one step is
    done at 1.5, the outage at 2.2 loses the step in progress; back at 5 the last 3 steps end at
    8, the upload at 8.5. With fail the job fails at 2.2 and the round closes there."""
    (p,) = both(1, (1.0,), latency=0.5, availability=(((2.2, 5.0),),), on_outage="resume", policy="wait",
                local_steps=4)
    assert rows(p, "status", "steps", "end", "download", "upload", "resumed") == [("completed", 4, 8.5, 0.5, 0.5, 1)]
    assert p.close == 8.5
    (p,) = both(1, (1.0,), latency=0.5, availability=(((2.2, 5.0),),), policy="wait", local_steps=4)
    assert rows(p, "status", "steps", "end", "resumed") == [("failed", 0, 2.2, 0)] and p.close == 2.2


def test_an_interrupted_transfer_starts_again():
    """Speed 1, latency 1, 2 steps: download [0, 1], steps end at 3, upload from 3; offline in
    [3.5, 6): the upload starts again at 6 and ends at 7. Offline in [0.5, 2): the download starts
    again at 2 (ends 3), the steps end at 5, the upload at 6."""
    (p,) = both(1, (1.0,), latency=1.0, availability=(((3.5, 6.0),),), on_outage="resume", policy="wait",
                local_steps=2)
    assert rows(p, "status", "steps", "end", "resumed") == [("completed", 2, 7.0, 1)]
    (p,) = both(1, (1.0,), latency=1.0, availability=(((0.5, 2.0),),), on_outage="resume", policy="wait",
                local_steps=2)
    assert rows(p, "status", "steps", "end", "download", "resumed") == [("completed", 2, 6.0, 1.0, 1)]


def test_a_round_that_closes_while_the_job_sits_out_an_outage_fails_it():
    """Deadline 6: the job pauses at 2.2 and its client returns at 7, after the deadline: failed at
    its outage; the round closes at the deadline (the server waited for it)."""
    (p,) = both(1, (1.0,), latency=0.5, availability=(((2.2, 7.0),),), on_outage="resume", policy="deadline",
                deadline=6.0, local_steps=4)
    assert rows(p, "status", "end", "resumed") == [("failed", 2.2, 0)] and p.close == 6.0


def test_window_resume_refits_the_steps_after_the_outage():
    """Window 10, latency 0.5, speed 1: the upload must start by 9.5. Offline in [3.2, 6): steps
    end at 1.5, 2.5 (2 done by the outage), back at 6 another floor(9.5 - 6) = 3 fit: 5 steps,
    the last ending at 9, the upload at 9.5."""
    (p,) = both(1, (1.0,), latency=0.5, availability=(((3.2, 6.0),),), on_outage="resume", policy="window",
                window=10.0)
    assert rows(p, "status", "steps", "end", "resumed") == [("completed", 5, 9.5, 1)]


# ----------------------------------------------------------------------------- partial work at a deadline
def test_partial_uploads_the_steps_done_when_the_time_left_is_the_upload():
    """Deadline 6, latency 0.5, 10 steps. Client 0 (speed 1) computes from 0.5 and must start its
    upload by 5.5: 5 steps, uploaded at 6 (cut). Client 1 (speed 4) does all 10 by 3, uploads at
    3.5. With drop, client 0 is dropped at the deadline."""
    (p,) = both(1, (1.0, 4.0), latency=0.5, policy="deadline", deadline=6.0, local_steps=10, on_deadline="partial")
    assert rows(p, "client", "status", "steps", "end", "cut") == [(0, "completed", 5, 6.0, 1), (1, "completed", 10, 3.5, 0)]
    assert p.close == 6.0
    (p,) = both(1, (1.0, 4.0), latency=0.5, policy="deadline", deadline=6.0, local_steps=10)
    assert rows(p, "client", "status", "steps", "end") == [(0, "dropped", 0, 6.0), (1, "completed", 10, 3.5)]


def test_partial_with_no_whole_step_by_then_is_dropped():
    """Speed 0.1 (10 s a step), deadline 6: no step fits before 5.5: dropped at once, no download."""
    (p,) = both(1, (0.1,), latency=0.5, policy="deadline", deadline=6.0, local_steps=3, on_deadline="partial")
    assert rows(p, "status", "steps", "download", "cut") == [("dropped", 0, 0.0, 0)]


# ----------------------------------------------------------------------------- async on a time budget
def test_async_time_budget_does_the_steps_that_fit_and_spends_the_budget():
    """local_time 2.5, latency 0.25, speeds 2, 1, 0.5: each job computes 2.5 s (5, 2 and 1 steps)
    and reports 0.25 + 2.5 + 0.25 = 3 s after its start; concurrency = buffer = 3: one update a
    round of 3 s."""
    plans = both(3, (2.0, 1.0, 0.5), latency=0.25, policy="async", concurrency=3, buffer=3, local_time=2.5)
    assert [p.close for p in plans] == [3.0, 6.0, 9.0]
    assert [rows(p, "client", "steps") for p in plans] == [[(0, 5), (1, 2), (2, 1)]] * 3


def test_async_time_budget_steps_equal_a_window_of_budget_plus_transfers():
    """Issue 25 item 3: concurrency = buffer = every client, no outages: the same steps per client
    and round as windows of W = S + the two transfers."""
    speeds = (2.0, 1.3, 0.7, 3.1, 0.45)
    a = both(6, speeds, latency=0.25, policy="async", concurrency=5, buffer=5, local_time=2.5)
    w = both(6, speeds, latency=0.25, policy="window", window=3.0)
    assert [sorted(rows(p, "client", "steps")) for p in a] == [rows(p, "client", "steps") for p in w]
    np.testing.assert_allclose([p.close for p in a], [p.close for p in w], rtol=1e-12)


# ----------------------------------------------------------------------------- the server's link
NET = {"network": {"down": (4e6, 4e6, 1e6), "up": (1e9, 1e9, 1e9)}}


def test_three_downloads_share_the_server_link_by_hand():
    """Server down 6 Mbit/s, clients' links 4, 4, 1 Mbit/s, 8 Mbit each, no latency. Max-min fair
    rates: 2.5, 2.5 and 1 (what client 2 cannot use is the others'): clients 0 and 1 finish at
    8 / 2.5 = 3.2; client 2 has 8 - 3.2 = 4.8 Mbit left and moves on alone at 1: 8.0. Alone the
    downloads would take 2, 2 and 8 s."""
    (p,) = both(1, (1000.0,) * 3, policy="wait", local_steps=1, server={"down": 6e6}, **NET)
    assert rows(p, "client", "download") == [(0, 3.2), (1, 3.2), (2, 8.0)]
    (p,) = both(1, (1000.0,) * 3, policy="wait", local_steps=1, **NET)
    assert rows(p, "client", "download") == [(0, 2.0), (1, 2.0), (2, 8.0)]


def test_a_shared_upload_that_misses_the_window_is_dropped():
    """Window 10, speed 1, uploads 8 Mbit on 8 Mbit/s client links (1 s alone): both plan to start
    uploading at 9 (9 steps each). Sharing a 8 Mbit/s server uplink they need 2 s: at the close
    (10) each has half left: both dropped."""
    net = {"network": {"down": (1e12, 1e12), "up": (8e6, 8e6)}}
    (p,) = both(1, (1.0, 1.0), policy="window", window=10.0, server={"up": 8e6}, **net)
    assert rows(p, "client", "status", "steps", "end") == [(0, "dropped", 0, 10.0), (1, "dropped", 0, 10.0)]


# ----------------------------------------------------------------------------- the server's compute
def test_aggregation_time_delays_the_next_open():
    """wait, 2 clients (speeds 1, 2), 2 steps, latency 0.5: uploads at 3 and 2; aggregating takes
    0.25 s per update: the round closes at 3.5 and the next opens then."""
    plans = both(2, (1.0, 2.0), latency=0.5, policy="wait", local_steps=2, server={"aggregate": 0.25})
    assert [(p.open, p.close) for p in plans] == [(0.0, 3.5), (3.5, 7.0)]
    assert rows(plans[1], "client", "start", "end") == [(0, 3.5, 6.5), (1, 3.5, 5.5)]


def test_async_aggregation_publishes_the_version_later():
    """async, concurrency 2, buffer 1, speeds 1 and 2, 2 steps, latency 0.5, aggregation 1 s per
    update. Client 1 arrives at 2: update 0 is made then and published at 3; client 1 starts again
    at 2 from version 0. Client 0 arrives at 3: update 1 waits for the server (busy until 3) and is
    published at 4; client 0 starts again at 3 from version 1 (published at 3). Client 1 arrives
    at 4 (update 2, published at 5), client 0 at 6 (update 3, published at 7)."""
    plans = both(4, (1.0, 2.0), latency=0.5, policy="async", concurrency=2, buffer=1, local_steps=2,
                 server={"aggregate": 1.0})
    assert [(p.open, p.close) for p in plans] == [(0.0, 3.0), (3.0, 4.0), (4.0, 5.0), (5.0, 7.0)]
    assert [rows(p, "client", "start", "end", "version", "staleness") for p in plans] == [
        [(1, 0.0, 2.0, 0, 0)], [(0, 0.0, 3.0, 0, 1)], [(1, 2.0, 4.0, 0, 2)], [(0, 3.0, 6.0, 1, 2)]]


def test_a_client_that_never_returns_fails_at_its_outage(tmp_path):
    """A trace replayed with ``last``: client 0 is online in [0, 2.2) and offline after for good,
    so its job fails at 2.2 under wait (resume has nothing to wait for); client 1 completes."""
    trace = tmp_path / "t.csv"
    trace.write_text("client,start,end,online,speed\n0,0,2.2,1,1\n0,2.2,10,0,0\n1,0,10,1,1\n")
    kw = dict(trace=str(trace), trace_repeat="last", latency=0.5, on_outage="resume")
    clocks = []
    for fast in (True, False):
        system = SystemConfig(**kw)
        rnd = RoundConfig(policy="wait", local_steps=4)
        clocks.append(take(Clock(system.value(), rnd.value(4), Population.of([1, 1]), seed=0, fast=fast), 1))
    assert clocks[0] == clocks[1]
    assert rows(clocks[0][0], "client", "status", "end", "resumed") == [(0, "failed", 2.2, 0), (1, "completed", 5.0, 0)]


# ----------------------------------------------------------------------------- both paths, all levers
SPEEDS = (0.3, 1.0, 2.5, 7.0, 0.11, 1.9, 4.0, 0.7)
INTERVALS = (((0.0, 7.3),), ((3.0, 4.0), (20.0, 30.0)), (), ((7.3, 8.0),), ((1.0, 50.0),),
             ((14.6, 14.7), (100.0, 101.0)), ((2.0, 2.5), (9.0, 9.1), (40.0, 41.0)), ((0.5, 60.0),))
MARKOV = MarkovAvailability(model="markov", mean_online=9.0, mean_offline=4.0)
BANDS = {"network": {"down": Uniform(dist="uniform", low=2e7, high=2e8),
                     "up": Uniform(dist="uniform", low=1e7, high=1e8)}}
SYSTEMS = {
    "resume_markov": {"availability": MARKOV, "on_outage": "resume"},
    "resume_intervals": {"availability": INTERVALS, "on_outage": "resume"},
    "link": {**BANDS, "server": {"down": 1.5e8, "up": 8e7}},
    "link_markov": {**BANDS, "server": {"down": 1.5e8, "up": 8e7}, "availability": MARKOV},
    "link_resume": {**BANDS, "server": {"up": 8e7}, "availability": MARKOV, "on_outage": "resume"},
    "aggregate": {"server": {"aggregate": 0.37}, "availability": MARKOV},
    "everything": {**BANDS, "server": {"up": 8e7, "aggregate": 0.2}, "availability": INTERVALS, "on_outage": "resume"},
}
POLICIES = {
    "window": dict(policy="window", window=6.0),
    "wait": dict(policy="wait", local_steps=RandInt(dist="randint", low=1, high=8)),
    "deadline": dict(policy="deadline", deadline=6.5, local_steps=5),
    "partial": dict(policy="deadline", deadline=6.5, local_steps=5, on_deadline="partial"),
    "overcommit": dict(policy="overcommit", overcommit=1.5, clients_per_round=4, local_steps=4),
    "async": dict(policy="async", concurrency=5, buffer=2, local_steps=4),
    "async_time": dict(policy="async", concurrency=5, buffer=2, local_time=3.0),
}


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("system", list(SYSTEMS))
def test_simpy_and_fast_paths_agree_on_every_lever(system, policy):
    plans = both(25, SPEEDS, latency=0.45, seed=3, **SYSTEMS[system], **POLICIES[policy])
    statuses = {j.status for p in plans for j in p.jobs}
    assert "completed" in statuses
    if "resume" in system:
        assert any(j.resumed for p in plans for j in p.jobs)
    if policy == "partial" and system != "link":
        assert any(j.cut for p in plans for j in p.jobs)


def test_fedscale_over_commitment_rounds_down_as_fedscale(tmp_path):
    """FedScale selects int(K F) clients: 9 for K = 7, F = 1.3 (fedsim's own rule, the decimal's
    ceiling, selects 10); with trace_semantics fedscale the clock uses FedScale's."""
    from fedsim.clock.policy import overcommit_size

    assert (overcommit_size(1.3, 7), overcommit_size(1.3, 7, fedscale=True), overcommit_size(1.3, 10, fedscale=True)) \
        == (10, 9, 13)
    trace = tmp_path / "t.csv"
    trace.write_text("client,start,end,online,speed\n" + "".join(f"{c},0,1000,1,1\n" for c in range(12)))
    for semantics, picked in (("fedsim", 10), ("fedscale", 9)):
        system = SystemConfig(trace=str(trace), trace_semantics=semantics)
        rnd = RoundConfig(policy="overcommit", overcommit=1.3, clients_per_round=7, local_steps=2)
        (p,) = take(Clock(system.value(), rnd.value(4), Population.of([1] * 12), seed=0), 1)
        assert len(p.jobs) == picked


def test_async_time_budget_with_fednova_normalisation_trains_as_fednova_windows(tmp_path):
    """Issue 25 item 3, trained: concurrency = buffer = every client, no outages, unequal speeds
    (tau_i = 5, 2, 10, 1 per job): FedBuff with FedNova's normalisation (normalize_async, constant
    staleness) on a time budget S = 2.5 gives FedNova's windows of W = S + 2 latencies, round for
    round (times, steps, distance to the optimum) and in the final model, to rounding."""
    import torch

    import fedsim

    base = {"name": "eq", "seed": 3, "rounds": 6,
            "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0], [3.0, 1.0]],
                     "weights": [1.0, 2.0, 3.0, 4.0]},
            "system": {"speed": [2.0, 1.0, 4.0, 0.5], "latency": 0.25},
            "algorithm": {"name": "fednova", "lr": 0.1, "batch_size": 1}, "engine": {"dtype": "float64"}}
    w = fedsim.run({**base, "round": {"policy": "window", "window": 3.0}}, out=tmp_path / "w")
    a = fedsim.run({**base, "round": {"policy": "async", "concurrency": 4, "buffer": 4, "local_time": 2.5},
                    "algorithm": {"name": "fedbuff", "lr": 0.1, "batch_size": 1, "normalize_async": True,
                                  "staleness": "constant"}}, out=tmp_path / "a")
    assert a.rounds["sim_time"].tolist() == w.rounds["sim_time"].tolist() == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0]
    assert a.rounds["tau_mean"].tolist() == w.rounds["tau_mean"].tolist()
    np.testing.assert_allclose(a.rounds["dist_to_opt"], w.rounds["dist_to_opt"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(torch.load(tmp_path / "a" / "model.pt").numpy(),
                               torch.load(tmp_path / "w" / "model.pt").numpy(), rtol=0, atol=1e-12)
