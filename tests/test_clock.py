"""The clock on tiny hand-made worlds: event logs compared to exact, hand-computed lists."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from fedsim.clock.keyed import keyed_uniform
from fedsim.clock import STEP_GUARD, Clock, Job, Population, RoundPlan, whole_steps
from fedsim.runner.clock import build_clock
from fedsim.rng import stream
from fedsim.availability.markov import MarkovAvailability
from fedsim.scenario import (
    Constant,
    LogNormal,
    RandInt,
    RoundConfig,
    ScenarioError,
    SystemConfig,
    Uniform,
    parse_scenario,
)


# ---------------------------------------------------------------------------- helpers
def make(speed=1.0, latency=0.0, availability="always", slowdown=None, sizes=None, weights=None, seed=0,
         batch_size=32, fast=None, weights_rule=None, **round_kw) -> Clock:
    m = len(speed) if isinstance(speed, tuple) else len(sizes or weights or [1, 1])
    system = SystemConfig(speed=speed, latency=latency, availability=availability, slowdown=slowdown)
    if weights_rule is not None:  # round.weights (``weights`` here is data p_i)
        round_kw["weights"] = weights_rule
    return Clock(system.value(), RoundConfig(**round_kw).value(batch_size), Population.of(sizes or [1] * m, weights),
                 seed=seed, fast=fast)


def take(clock: Clock, n: int, log=None) -> list[RoundPlan]:
    return list(itertools.islice(clock.plans(log), n))


def rows(plans) -> list[tuple]:
    """(round, client, status, steps, start, end) of every job."""
    return [(j.round, j.client, j.status, j.steps, j.start, j.end) for p in plans for j in p.jobs]


def assert_rows(got, expected):
    """Ints and strings exactly, floats to 1e-12 (the hand values are written as float expressions)."""
    assert len(got) == len(expected), f"{len(got)} rows, expected {len(expected)}:\n{got}"
    for g, e in zip(got, expected):
        assert len(g) == len(e)
        for a, b in zip(g, e):
            if isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-12, abs=1e-12), (g, e)
            else:
                assert a == b and type(a) is type(b), (g, e)


def spans(plans) -> list[tuple[float, float]]:
    return [(p.open, p.close) for p in plans]


BOTH_PATHS = pytest.mark.parametrize("fast", [True, False], ids=["vectorised", "simpy"])


# ---------------------------------------------------------------------------- window
@BOTH_PATHS
def test_window_with_latency_constant_speeds(fast):
    clock = make(speed=(1.0, 2.5, 0.3), latency=0.5, policy="window", window=10.0, fast=fast)
    assert clock.fast is fast
    plans = take(clock, 2)
    # tau = floor((10 - 2 * 0.5) * s): 9, 22, 2; each client uploads as soon as its steps are done
    assert_rows(rows(plans), [
        (0, 0, "completed", 9, 0.0, 0.5 + 9 / 1.0 + 0.5),
        (0, 1, "completed", 22, 0.0, 0.5 + 22 / 2.5 + 0.5),
        (0, 2, "completed", 2, 0.0, 0.5 + 2 / 0.3 + 0.5),
        (1, 0, "completed", 9, 10.0, 20.0),
        (1, 1, "completed", 22, 10.0, 10.5 + 22 / 2.5 + 0.5),
        (1, 2, "completed", 2, 10.0, 10.5 + 2 / 0.3 + 0.5),
    ])
    assert spans(plans) == [(0.0, 10.0), (10.0, 20.0)]  # a window round lasts exactly W
    assert [p.min_live_version for p in plans] == [1, 2]
    assert all(j.key == j.version == j.round and j.staleness == 0 for p in plans for j in p.jobs)


@BOTH_PATHS
def test_window_drop_and_caps(fast):
    # client 1: (10 - 1) * 0.05 = 0.45 steps fit -> dropped, end = the round's close
    clock = make(speed=(1.0, 0.05), latency=0.5, policy="window", window=10.0, max_local_steps=5, fast=fast)
    assert_rows(rows(take(clock, 1)), [
        (0, 0, "completed", 5, 0.0, 0.5 + 5.0 + 0.5),  # capped by max_local_steps
        (0, 1, "dropped", 0, 0.0, 10.0),
    ])
    clock = make(speed=(1.0, 2.0), latency=0.5, policy="window", window=10.0, local_steps=4, fast=fast)
    assert_rows(rows(take(clock, 1)), [
        (0, 0, "completed", 4, 0.0, 5.0),  # prescribed work caps the window's 9
        (0, 1, "completed", 4, 0.0, 3.0),
    ])


@BOTH_PATHS
def test_window_step_guard(fast):
    # (1.2 - 0.1 - 0.1) * 3 is 2.9999999999999996 in floating point; the guard counts 3 steps and the
    # upload end is clamped to the window
    assert (1.2 - 0.1 - 0.1) * 3 < 3 and whole_steps((1.2 - 0.1 - 0.1) * 3) == 3
    assert whole_steps((10 - 1) * 3.0) == 27 and whole_steps(2.9999) == 2 and whole_steps(-0.5) == 0
    assert STEP_GUARD == 1 + 1e-12
    clock = make(speed=(3.0,), latency=0.1, policy="window", window=1.2, fast=fast)
    (plan,) = take(clock, 1)
    assert rows([plan]) == [(0, 0, "completed", 3, 0.0, 1.2)]


# ---------------------------------------------------------------------------- wait / deadline
def test_wait_slowest_client_sets_the_pace():
    clock = make(speed=(1.0, 2.0, 4.0), latency=0.5, policy="wait", local_steps=4)
    plans = take(clock, 2)
    assert_rows(rows(plans), [
        (0, 0, "completed", 4, 0.0, 5.0),
        (0, 1, "completed", 4, 0.0, 3.0),
        (0, 2, "completed", 4, 0.0, 2.0),
        (1, 0, "completed", 4, 5.0, 10.0),
        (1, 1, "completed", 4, 5.0, 8.0),
        (1, 2, "completed", 4, 5.0, 7.0),
    ])
    assert spans(plans) == [(0.0, 5.0), (5.0, 10.0)]


def test_deadline_drops_the_late_client():
    clock = make(speed=(1.0, 2.0, 4.0), latency=0.5, policy="deadline", deadline=4.0, local_steps=4)
    plans = take(clock, 2)
    assert_rows(rows(plans), [
        (0, 0, "dropped", 0, 0.0, 4.0),
        (0, 1, "completed", 4, 0.0, 3.0),
        (0, 2, "completed", 4, 0.0, 2.0),
        (1, 0, "dropped", 0, 4.0, 8.0),
        (1, 1, "completed", 4, 4.0, 7.0),
        (1, 2, "completed", 4, 4.0, 6.0),
    ])
    assert spans(plans) == [(0.0, 4.0), (4.0, 8.0)]


def test_deadline_round_ends_when_everyone_reported():
    clock = make(speed=(1.0, 2.0), latency=0.5, policy="deadline", deadline=10.0, local_steps=4)
    plans = take(clock, 2)
    assert spans(plans) == [(0.0, 5.0), (5.0, 10.0)]
    # a job whose upload ends exactly at the deadline completes
    clock = make(speed=(1.0,), latency=0.5, policy="deadline", deadline=5.0, local_steps=4)
    assert rows(take(clock, 1)) == [(0, 0, "completed", 4, 0.0, 5.0)]


def test_local_epochs_tau_is_floor_E_n_over_B():
    clock = make(speed=(1.0, 1.0, 1.0), sizes=[100, 50, 33], batch_size=32, policy="wait", local_epochs=2)
    (plan,) = take(clock, 1)
    # floor(2 * 100 / 32) = 6, floor(2 * 50 / 32) = 3, floor(2 * 33 / 32) = 2
    assert [j.steps for j in plan.jobs] == [6, 3, 2]
    assert plan.close == 6.0
    # tau 0 (2 * 10 < 32): dropped at once, end = the round's close
    clock = make(speed=(1.0, 1.0), sizes=[64, 10], batch_size=32, policy="wait", local_epochs=2)
    assert rows(take(clock, 1)) == [(0, 0, "completed", 4, 0.0, 4.0), (0, 1, "dropped", 0, 0.0, 4.0)]


def test_randint_work_is_in_bounds_and_keyed_by_client_and_round():
    work = RandInt(dist="randint", low=2, high=5)
    full = make(speed=(1.0, 2.0, 3.0, 4.0), policy="wait", local_steps=work, seed=7)
    half = make(speed=(1.0, 2.0, 3.0, 4.0), policy="wait", local_steps=work, seed=7, clients_per_round=2)
    epochs = make(speed=(1.0,) * 4, sizes=[64, 32, 48, 100], batch_size=16, policy="wait", local_epochs=work, seed=7)
    seen = set()
    for p_full, p_half, p_ep in zip(take(full, 30), take(half, 30), take(epochs, 30)):
        for j in p_full.jobs:
            expected = int(stream(7, "work", j.client, j.round).integers(2, 6))
            assert j.steps == expected and 2 <= j.steps <= 5
            seen.add(j.steps)
        # what holds when clients_per_round changes: round times differ, but a client selected in
        # round r does the same work, because the draw is keyed by (seed, client, round) only
        by_client = {j.client: j.steps for j in p_full.jobs}
        assert len(p_half.jobs) == 2 and all(j.steps == by_client[j.client] for j in p_half.jobs)
        for j in p_ep.jobs:  # E_i(t) drawn the same way, tau = floor(E n_i / B)
            assert j.steps == by_client[j.client] * [64, 32, 48, 100][j.client] // 16
    assert seen == {2, 3, 4, 5}


# ---------------------------------------------------------------------------- availability
@pytest.mark.parametrize("policy", ["window", "wait"])
def test_offline_before_and_during_a_round(policy):
    # client 1 offline in [3, 12): fails at 3 in round 0 (loses its work) and is offline at round 1's open
    kw = dict(window=10.0) if policy == "window" else dict(local_steps=9)
    clock = make(speed=(1.0, 1.0), latency=0.5, availability=((), ((3.0, 12.0),)), policy=policy, **kw)
    plans = take(clock, 3)
    assert_rows(rows(plans), [
        (0, 0, "completed", 9, 0.0, 10.0),
        (0, 1, "failed", 0, 0.0, 3.0),
        (1, 0, "completed", 9, 10.0, 20.0),
        (1, 1, "offline", 0, 10.0, 10.0),
        (2, 0, "completed", 9, 20.0, 30.0),
        (2, 1, "completed", 9, 20.0, 30.0),
    ])
    offline = plans[1].jobs[1]
    assert offline.weight == 0.0 and offline.count == 0


def test_outage_ties():
    # offline [10, 20): the upload that ends exactly at 10 completes; at round open 10 the client is
    # offline; at 20 (outage end) it is online again
    clock = make(speed=(1.0, 1.0), latency=0.5, availability=(((10.0, 20.0),), ()), policy="window", window=10.0)
    assert [j.status for p in take(clock, 3) for j in p.jobs if j.client == 0] == ["completed", "offline", "completed"]
    # an outage exactly at the deadline does not turn the drop into a failure
    clock = make(speed=(1.0,), latency=0.5, availability=(((4.0, 5.0),),), policy="deadline", deadline=4.0,
                 local_steps=9)
    assert rows(take(clock, 1)) == [(0, 0, "dropped", 0, 0.0, 4.0)]
    # an outage strictly inside the download fails the job
    clock = make(speed=(1.0,), latency=0.5, availability=(((0.25, 1.0),),), policy="wait", local_steps=2)
    assert rows(take(clock, 2)) == [(0, 0, "failed", 0, 0.0, 0.25), (1, 0, "offline", 0, 0.25, 0.25)]


def test_wait_round_when_nobody_is_online_or_everyone_fails():
    av = (((0.0, 7.0),), ((0.0, 3.5),))
    clock = make(speed=(1.0, 1.0), availability=av, policy="wait", local_steps=2)
    plans = take(clock, 3)
    assert spans(plans) == [(0.0, 3.5), (3.5, 5.5), (5.5, 7.5)]
    assert_rows(rows(plans[:2]), [
        (0, 0, "offline", 0, 0.0, 0.0),
        (0, 1, "offline", 0, 0.0, 0.0),
        (1, 0, "offline", 0, 3.5, 3.5),
        (1, 1, "completed", 2, 3.5, 5.5),
    ])
    # deadline: the server gives up waiting after D
    clock = make(speed=(1.0, 1.0), availability=av, policy="deadline", deadline=2.0, local_steps=2)
    assert spans(take(clock, 3)) == [(0.0, 2.0), (2.0, 3.5), (3.5, 5.5)]
    # every selected client fails: the round ends at the last failure
    clock = make(speed=(1.0, 1.0), availability=(((1.0, 2.0),), ((1.5, 2.0),)), policy="wait", local_steps=5)
    plans = take(clock, 2)
    assert rows(plans[:1]) == [(0, 0, "failed", 0, 0.0, 1.0), (0, 1, "failed", 0, 0.0, 1.5)]
    assert spans(plans) == [(0.0, 1.5), (1.5, 2.0)]


def test_markov_long_run_online_fraction():
    av = MarkovAvailability(model="markov", mean_online=60.0, mean_offline=20.0)
    clock = make(speed=(1.0,) * 100, availability=av, policy="window", window=10.0, seed=3)
    assert clock.fast  # Markov windows take the vectorised path
    plans = take(clock, 300)
    offline = sum(j.status == "offline" for p in plans for j in p.jobs)
    assert offline / (100 * 300) == pytest.approx(20.0 / 80.0, abs=0.04)
    assert [p.available for p in plans] == [sum(j.status != "offline" for j in p.jobs) for p in plans]
    assert any(j.status == "failed" for p in plans for j in p.jobs)
    # the initial state is the keyed draw u(seed, "availability", client, 0) < 60 / 80 alone
    first = keyed_uniform(3, "availability", np.arange(100), 0) >= 0.75
    assert [j.client for j in plans[0].jobs if j.status == "offline"] == np.flatnonzero(first).tolist()
    clock2 = make(speed=(2.0,) * 100, availability=av, policy="wait", local_steps=3, seed=3)
    assert [j.client for j in take(clock2, 1)[0].jobs if j.status == "offline"] == np.flatnonzero(first).tolist()


@pytest.mark.parametrize("cpr", [None, 7])
def test_markov_window_paths_agree(cpr):
    """The vectorised Markov path (numpy state per client) replays the SimPy processes exactly:
    same selections, failures at the same outage times, same transfers and available counts."""
    av = MarkovAvailability(model="markov", mean_online=12.0, mean_offline=5.0)
    kw = dict(speed=tuple(np.linspace(0.5, 3.0, 30)), latency=0.3, availability=av, policy="window", window=4.0,
              clients_per_round=cpr, seed=9, slowdown=Uniform(dist="uniform", low=1.0, high=1.5))
    fast, slow = take(make(fast=True, **kw), 60), take(make(fast=False, **kw), 60)
    assert fast == slow
    statuses = {j.status for p in fast for j in p.jobs}
    assert statuses == ({"completed", "failed", "offline"} if cpr is None else {"completed", "failed"})
    assert any(j.download > 0 for p in fast for j in p.jobs if j.status == "failed")


def test_markov_sojourns_are_keyed_exponentials():
    # client 0's toggles: cumulative -mean * log(u_k), the mean of the state it leaves
    av = MarkovAvailability(model="markov", mean_online=3.0, mean_offline=2.0)
    clock = make(speed=(1.0,), availability=av, policy="wait", local_steps=1, seed=4)
    tl = clock.timelines[0]
    online = bool(keyed_uniform(4, "availability", 0, 0)[0] < 0.6)
    assert tl.initial == online
    t, expected = 0.0, []
    for k in range(1, 6):
        t += -(3.0 if online else 2.0) * math.log(keyed_uniform(4, "availability", 0, k)[0])
        online = not online
        expected.append(t)
    assert list(itertools.islice(tl.toggles(), 5)) == pytest.approx(expected, rel=1e-15)


# ---------------------------------------------------------------------------- selection and weights
P4 = [0.1, 0.2, 0.3, 0.4]


def test_uniform_selection_weights_and_determinism():
    clock = make(weights=P4, policy="window", window=1.0, clients_per_round=2, seed=11)
    plans = take(clock, 20)
    for p in plans:
        perm = stream(11, "select", p.round).permutation(4)
        assert [j.client for j in p.jobs] == sorted(perm[:2].tolist())
        pair = [P4[j.client] for j in p.jobs]
        assert [j.weight for j in p.jobs] == [x / sum(pair) for x in pair]  # normalized: p_i / sum_S p_j
        assert all(j.count == 1 for j in p.jobs)
    unbiased = take(make(weights=P4, policy="window", window=1.0, clients_per_round=2, seed=11,
                         weights_rule="unbiased"), 20)
    for p, u in zip(plans, unbiased):
        assert [j.client for j in u.jobs] == [j.client for j in p.jobs]
        assert [j.weight for j in u.jobs] == [P4[j.client] * 4 / 2 for j in u.jobs]  # p_i * m / q
    assert take(make(weights=P4, policy="window", window=1.0, clients_per_round=2, seed=11), 20) == plans
    other = take(make(weights=P4, policy="window", window=1.0, clients_per_round=2, seed=12), 20)
    assert rows(other) != rows(plans)
    # picks are nested in clients_per_round (the first q of one permutation)
    three = take(make(weights=P4, policy="window", window=1.0, clients_per_round=3, seed=11), 20)
    for p2, p3 in zip(plans, three):
        assert {j.client for j in p2.jobs} <= {j.client for j in p3.jobs}


def test_uniform_weight_counts_only_available_clients():
    # client 3 offline in round 0: m = 3 available, q = 2 -> weight p_i * 3 / (2 P_avail), with
    # P_avail = p_0 + p_1 + p_2 (the weights target the available clients' objective)
    clock = make(weights=P4, availability=((), (), (), ((0.0, 0.5),)), policy="window", window=1.0,
                 clients_per_round=2, seed=5)
    (plan,) = take(clock, 1)
    picked = [j for j in plan.jobs if j.status != "offline"]
    perm = stream(5, "select", 0).permutation(3)
    assert [j.client for j in picked] == sorted(perm[:2].tolist())
    p_avail = P4[0] + P4[1] + P4[2]
    assert [j.weight for j in picked] == pytest.approx([P4[j.client] * 3 / 2 / p_avail for j in picked], rel=1e-15)
    # sampled rounds have rows for the selected clients only; the open saw 3 of 4 online
    assert [j.status for j in plan.jobs] == ["completed", "completed"] and plan.available == 3


def test_weighted_selection_with_replacement():
    clock = make(weights=P4, policy="window", window=1.0, clients_per_round=3, sampling="weighted", seed=2)
    for p in take(clock, 30):
        draws = stream(2, "select", p.round).choice(4, size=3, replace=True, p=np.array(P4))
        counts = np.bincount(draws, minlength=4)
        assert [(j.client, j.count) for j in p.jobs] == [(c, int(counts[c])) for c in np.flatnonzero(counts)]
        assert sum(j.count for j in p.jobs) == 3
        assert [j.weight for j in p.jobs] == [j.count / 3 for j in p.jobs]


def test_full_participation_weight_is_p():
    clock = make(weights=P4, policy="wait", local_steps=1)
    assert [j.weight for j in take(clock, 1)[0].jobs] == P4
    clock = make(sizes=[10, 30], policy="wait", local_steps=1)  # default p_i = n_i / n
    assert [j.weight for j in take(clock, 1)[0].jobs] == [0.25, 0.75]


# ---------------------------------------------------------------------------- random system draws
def test_speed_and_slowdown_draws_come_from_their_streams():
    ln = LogNormal(dist="lognormal", median=2.0, sigma=0.5)
    clock = make(speed=ln, sizes=[1] * 3, policy="window", window=10.0, seed=4)
    assert clock.speeds.tolist() == [2.0 * math.exp(0.5 * stream(4, "speed", c).standard_normal()) for c in range(3)]
    uni = make(speed=Uniform(dist="uniform", low=1, high=4), sizes=[1] * 3, policy="window", window=1.0, seed=4)
    assert uni.speeds.tolist() == [stream(4, "speed", c).uniform(1, 4) for c in range(3)]
    # step duration = slowdown / speed
    clock = make(speed=(2.0,), latency=0.5, slowdown=Constant(dist="constant", value=2.0), policy="window",
                 window=10.0)
    assert rows(take(clock, 1)) == [(0, 0, "completed", 9, 0.0, 0.5 + 9 * 2.0 / 2.0 + 0.5)]
    slow = Uniform(dist="uniform", low=1.0, high=3.0)
    clock = make(speed=(2.0, 5.0), latency=0.5, slowdown=slow, policy="window", window=10.0, seed=9)
    for p in take(clock, 5):
        for j in p.jobs:
            f = stream(9, "slowdown", j.client, j.round).uniform(1.0, 3.0)
            assert j.steps == math.floor(9.0 * (2.0, 5.0)[j.client] / f)


# ---------------------------------------------------------------------------- the two code paths
FAST_CASES = {
    "uniform": dict(speed=LogNormal(dist="lognormal", median=2.0, sigma=0.7), clients_per_round=3),
    "weighted": dict(speed=Uniform(dist="uniform", low=0.05, high=3.0), clients_per_round=4, sampling="weighted"),
    "slowdown+randint": dict(speed=(0.3, 1.0, 2.5, 7.0, 0.11, 1.9), latency=0.3,
                             slowdown=LogNormal(dist="lognormal", median=1.0, sigma=0.5),
                             local_steps=RandInt(dist="randint", low=1, high=12)),
    "epochs+cap": dict(speed=LogNormal(dist="lognormal", median=3.0, sigma=1.0), local_epochs=1, max_local_steps=14,
                       sizes=[5, 60, 100, 7, 33, 250]),
    # outages at, inside and across round boundaries (7.3 s windows): offline rows and failures
    "intervals": dict(speed=(0.3, 1.0, 2.5, 7.0, 0.11, 1.9),
                      availability=(((0.0, 7.3),), ((3.0, 4.0), (20.0, 30.0)), (), ((7.3, 8.0),), ((1.0, 50.0),),
                                    ((14.6, 14.7), (100.0, 101.0)))),
    "intervals+sampling": dict(speed=(0.3, 1.0, 2.5, 7.0, 0.11, 1.9), clients_per_round=3,
                               availability=(((0.0, 7.3),), ((3.0, 4.0), (20.0, 30.0)), (), ((7.3, 8.0),),
                                             ((1.0, 50.0),), ((14.6, 14.7), (100.0, 101.0)))),
}


@pytest.mark.parametrize("case", list(FAST_CASES))
def test_vectorised_window_equals_simpy(case):
    kw = dict(latency=0.45, policy="window", window=7.3, seed=21, weights=[0.3, 0.1, 0.2, 0.1, 0.25, 0.05],
              sizes=[1] * 6)
    kw.update(FAST_CASES[case])
    fast, slow = make(fast=True, **kw), make(fast=False, **kw)
    a, b = take(fast, 40), take(slow, 40)
    assert a == b  # every field of every Job, floats bit for bit
    assert {j.status for p in a for j in p.jobs} >= ({"completed", "failed", "offline"} if case == "intervals" else {"completed"})
    tables = list(itertools.islice(slow.tables(), 40))
    assert [t.plan() for t in tables] == b
    assert [t.plan() for t in itertools.islice(fast.tables(), 40)] == b


def test_vectorised_path_only_where_it_applies():
    assert make(policy="window", window=1.0).fast
    assert make(policy="wait", local_steps=1).fast  # issue 18: prescribed work too
    assert make(policy="deadline", deadline=1.0, local_steps=1).fast
    assert make(policy="async", local_steps=1, concurrency=1).fast  # the heap path
    assert make(policy="window", window=1.0, availability=(((1.0, 2.0),), ())).fast  # outages too
    assert make(policy="window", window=1.0, availability=((), ())).fast
    assert not make(policy="wait", local_steps=1, fast=False).fast


# ---------------------------------------------------------------------------- async
def test_async_every_client_in_flight():
    # C = 3 = all clients, K = 1: each client restarts as soon as it arrives
    clock = make(speed=(1.0, 2.0, 4.0), latency=0.5, policy="async", local_steps=4, concurrency=3, buffer=1)
    plans = take(clock, 7)
    got = [(p.round, p.open, p.close, p.min_live_version,
            [(j.client, j.status, j.steps, j.start, j.end, j.key, j.version, j.staleness) for j in p.jobs])
           for p in plans]
    assert got == [
        (0, 0.0, 2.0, 0, [(2, "completed", 4, 0.0, 2.0, 2, 0, 0)]),
        (1, 2.0, 3.0, 0, [(1, "completed", 4, 0.0, 3.0, 1, 0, 1)]),
        (2, 3.0, 4.0, 0, [(2, "completed", 4, 2.0, 4.0, 3, 1, 1)]),
        (3, 4.0, 5.0, 2, [(0, "completed", 4, 0.0, 5.0, 0, 0, 3)]),
        (4, 5.0, 6.0, 3, [(1, "completed", 4, 3.0, 6.0, 4, 2, 2)]),
        # two arrivals at t = 6 are processed in key order
        (5, 6.0, 6.0, 4, [(2, "completed", 4, 4.0, 6.0, 5, 3, 2)]),
        (6, 6.0, 8.0, 4, [(2, "completed", 4, 6.0, 8.0, 8, 6, 0)]),
    ]
    assert all(j.round == p.round and j.weight == pytest.approx(1 / 3) for p in plans for j in p.jobs)


def test_async_buffer_outages_and_failures():
    # K = 2; client 1 offline [2, 2.5) (its upload ends exactly at 2: it arrives) and [5, 5.5) (fails)
    clock = make(speed=(1.0, 2.0), latency=0.5, availability=((), ((2.0, 2.5), (5.0, 5.5))), policy="async",
                 local_steps=2, concurrency=2, buffer=2)
    plans = take(clock, 3)
    got = [(p.round, p.open, p.close, p.min_live_version,
            [(j.client, j.status, j.steps, j.start, j.end, j.key, j.version, j.staleness) for j in p.jobs])
           for p in plans]
    assert got == [
        (0, 0.0, 3.0, 0, [(1, "completed", 2, 0.0, 2.0, 1, 0, 0), (0, "completed", 2, 0.0, 3.0, 0, 0, 0)]),
        (1, 3.0, 6.0, 1, [(1, "completed", 2, 2.5, 4.5, 2, 0, 1), (1, "failed", 0, 4.5, 5.0, 4, 1, 0),
                          (0, "completed", 2, 3.0, 6.0, 3, 1, 0)]),
        (2, 6.0, 9.0, 2, [(1, "completed", 2, 5.5, 7.5, 5, 1, 1), (0, "completed", 2, 6.0, 9.0, 6, 2, 0)]),
    ]
    assert [sum(j.status == "completed" for j in p.jobs) for p in plans] == [2, 2, 2]


def test_async_selection_stream():
    clock = make(speed=(1.0, 1.5, 2.0, 2.5, 3.0), policy="async", local_steps=3, concurrency=2, buffer=1, seed=8)
    first = take(clock, 1)[0].jobs[0]
    picked = sorted(stream(8, "select", 0).permutation(5)[:2].tolist())
    assert first.client in picked and first.key == picked.index(first.client)
    plans = take(clock, 50)
    keys = [j.key for p in plans for j in p.jobs]
    assert len(set(keys)) == len(keys)  # every job reported at most once
    assert len(set(range(max(keys) + 1)) - set(keys)) <= 2  # the rest are still in flight (C = 2)
    # jobs are numbered in start order
    starts = sorted((j.key, j.start) for p in plans for j in p.jobs)
    assert [s for _, s in starts] == sorted(s for _, s in starts)


# ---------------------------------------------------------------------------- determinism and CRN
def test_common_random_numbers_across_algorithms():
    base = {
        "seed": 5, "data": {"name": "quadratic", "clients": 6},
        "system": {"speed": {"dist": "lognormal", "median": 2.0, "sigma": 0.5}, "latency": 0.5,
                   "availability": {"model": "markov", "mean_online": 30, "mean_offline": 10}},
        "round": {"policy": "deadline", "deadline": 6.0, "local_steps": {"dist": "randint", "low": 2, "high": 9},
                  "clients_per_round": 4},
    }
    a = parse_scenario({**base, "algorithm": {"name": "fedavg", "lr": 0.1}})
    b = parse_scenario({**base, "algorithm": {"name": "fednova", "lr": 0.7, "momentum": 0.9, "mu": 0.1}})
    assert take(build_clock(a, [1] * 6), 40) == take(build_clock(b, [1] * 6), 40)


def test_clock_never_imports_torch():
    code = "import sys, fedsim.clock; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plans_restart_from_zero_and_resume_by_skipping():
    clock = make(speed=(1.0, 3.0), availability=(((2.0, 4.0),), ()), policy="wait", local_steps=3)
    full = take(clock, 12)
    assert take(clock, 12) == full
    assert list(itertools.islice(clock.plans(), 5, 12)) == full[5:]


def test_event_log():
    """Round 1 opens only once the server has observed plan 0 (the closed loop): taking one plan
    logs round 0 up to its close; asking for the next one opens round 1 at the same instant."""
    log = []
    clock = make(speed=(1.0, 2.0), latency=0.5, availability=(((2.0, 3.0),), ()), policy="wait", local_steps=2)
    schedule = clock.schedule(log=log)
    next(schedule)
    assert log[-1] == (2.0, "failed", 0, 0)
    schedule.observe()
    next(schedule)
    assert log[:9] == [
        (0.0, "start", 0, 0), (0.0, "start", 1, 0),
        (0.5, "download", 0, 0), (0.5, "download", 1, 0),
        (1.5, "compute", 1, 0),
        (2.0, "upload", 1, 0),  # phase ends come before the toggles of the same instant
        (2.0, "offline", 0, None), (2.0, "failed", 0, 0),
        (2.0, "start", 1, 1),  # round 1 opens at 2.0 without client 0 (offline in [2, 3))
    ]


def test_wait_round_closes_when_every_selected_client_has_uploaded_or_failed():
    """Issue 19 point 2: client 1 fails at 2.7, after the last survivor's upload (2.0). The server
    cannot know at 2.0 that client 1 will fail, so the round closes at 2.7, not 2.0."""
    log = []
    clock = make(speed=(2.0, 1.0), latency=0.5, availability=((), ((2.7, 4.0),)), policy="wait", local_steps=2)
    plan, _ = take(clock, 2, log)
    assert log[:10] == [
        (0.0, "start", 0, 0), (0.0, "start", 1, 0),
        (0.5, "download", 0, 0), (0.5, "download", 1, 0),
        (1.5, "compute", 0, 0),
        (2.0, "upload", 0, 0),  # the last client that will not fail has uploaded: the round stays open
        (2.5, "compute", 1, 0),
        (2.7, "offline", 1, None), (2.7, "failed", 1, 0),
        (2.7, "start", 0, 1),  # round 1 opens at the failure, without client 1 (offline in [2.7, 4))
    ]
    assert (plan.open, plan.close) == (0.0, 2.7)


def test_round_table_roundtrip_and_job_defaults():
    plan = take(make(speed=(1.0, 0.01), latency=0.5, policy="window", window=10.0, fast=False), 1)[0]
    table = plan.table()
    assert len(table) == 2 and table.statuses().tolist() == ["completed", "dropped"]
    assert table.plan() == plan
    j = Job(0, 1, "completed", 3, 0.0, 1.0, 0)
    assert (j.version, j.staleness, j.weight, j.count) == (0, 0, 0.0, 1)
    assert [j for j in plan.jobs if j.status == "completed"] == [plan.jobs[0]]


def test_bad_configuration():
    """Cross-field rules live in the scenario, which blames the key; the clock takes valid values."""
    with pytest.raises(ScenarioError, match="^round.window: required"):
        parse_scenario({"round": {"policy": "window"}})
    with pytest.raises(ScenarioError, match="^round.local_steps: policy wait"):
        parse_scenario({"round": {"policy": "wait"}})
    with pytest.raises(ScenarioError, match="^round.concurrency: required"):
        parse_scenario({"round": {"policy": "async", "local_steps": 1}, "algorithm": {"name": "fedbuff"}})
    with pytest.raises(ScenarioError, match="^system.speed: needs one speed per client"):
        parse_scenario({"data": {"clients": 3}, "system": {"speed": [1.0, 2.0]}, "round": {"window": 1.0}})
    with pytest.raises(ValueError, match="one value per client"):
        Clock(SystemConfig(speed=(1.0, 2.0)).value(), RoundConfig(window=1.0).value(32), Population.of([1, 1, 1]),
              seed=0)
