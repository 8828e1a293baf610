"""Devices in the clock (issue 11 items 1-2): compute in FLOP/s, transfers from bytes and bandwidth,
``Job.download`` / ``upload`` and ``RoundPlan.available``; hand-set WorkCost numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.clock import Clock, Population, WorkCost
from fedsim.runner.clock import build_clock
from fedsim.scenario import RoundConfig, ScenarioError, SystemConfig, parse_scenario

COST = WorkCost(step_flops=1e9, model_bytes=1e6, upload_bytes=2e6)  # 8e6 bits down, 1.6e7 bits up


def make(system: dict, fast=None, m=None, cost=COST, seed=0, **round_kw) -> Clock:
    sc = SystemConfig(**system)
    rule = RoundConfig(**round_kw).value(32)
    m = m or 2
    return Clock(sc.value(), rule, Population.of([1] * m), seed=seed, cost=cost, fast=fast)


def jobs(clock: Clock, n: int = 1):
    return [(j.client, j.status, j.steps, j.start, j.end, j.download, j.upload)
            for p in itertools.islice(clock.plans(), n) for j in p.jobs]


BOTH = pytest.mark.parametrize("fast", [True, False], ids=["vectorised", "simpy"])


@BOTH
def test_flops_give_the_step_time(fast):
    # speeds = flops / step_flops = 2 and 0.5 steps/s; tau = floor((10 - 2 * 0.5) * s) = 18, 4
    clock = make({"compute": {"flops": [2e9, 5e8]}, "latency": 0.5}, fast=fast, policy="window", window=10.0)
    assert clock.speeds.tolist() == [2.0, 0.5]
    assert jobs(clock) == [
        (0, "completed", 18, 0.0, 0.5 + 18 / 2.0 + 0.5, 0.5, 0.5),
        (1, "completed", 4, 0.0, 0.5 + 4 / 0.5 + 0.5, 0.5, 0.5),
    ]


@BOTH
def test_transfers_shrink_the_window_and_drop_who_cannot_upload(fast):
    # client 0: download 0.5 + 8e6 / 8e6 = 1.5 s, upload 0.5 + 1.6e7 / 4e6 = 4.5 s: 10 - 6 = 4 s of
    # compute at 1 step/s -> 4 steps, end 1.5 + 4 + 4.5 = 10. Client 1: upload 0.5 + 16 = 16.5 s > W.
    net = {"down": [8e6, 8e6], "up": [4e6, 1e6]}
    clock = make({"speed": 1.0, "latency": 0.5, "network": net}, fast=fast, policy="window", window=10.0)
    assert clock.download.tolist() == [1.5, 1.5] and clock.upload.tolist() == [4.5, 16.5]
    assert jobs(clock) == [
        (0, "completed", 4, 0.0, 10.0, 1.5, 4.5),
        (1, "dropped", 0, 0.0, 10.0, 0.0, 0.0),
    ]


def test_wait_round_is_download_compute_upload():
    # the slowest client sets the pace: 1.5 + 3 / 1 + 4.5 = 9 and 1.5 + 3 / 2 + 16.5 = 19.5
    net = {"down": 8e6, "up": [4e6, 1e6]}
    clock = make({"speed": [1.0, 2.0], "latency": 0.5, "network": net}, policy="wait", local_steps=3)
    (plan,) = itertools.islice(clock.plans(), 1)
    assert (plan.open, plan.close, plan.available) == (0.0, 19.5, 2)
    assert [(j.end, j.download, j.upload) for j in plan.jobs] == [(9.0, 1.5, 4.5), (19.5, 1.5, 16.5)]


def test_deadline_drop_keeps_the_finished_download_only():
    # deadline 10: client 1 would upload until 1.5 + 1.5 + 16.5 = 19.5 -> dropped after its download
    net = {"down": 8e6, "up": [4e6, 1e6]}
    clock = make({"speed": [1.0, 2.0], "latency": 0.5, "network": net}, policy="deadline", deadline=10.0,
                 local_steps=3)
    assert jobs(clock) == [
        (0, "completed", 3, 0.0, 9.0, 1.5, 4.5),
        (1, "dropped", 0, 0.0, 10.0, 1.5, 0.0),
    ]


def test_vectorised_and_simpy_paths_agree_with_drawn_devices():
    system = {"compute": {"flops": {"dist": "lognormal", "median": 3e9, "sigma": 0.8}},
              "network": {"down": {"dist": "lognormal", "median": 2e7, "sigma": 1.0},
                          "up": {"dist": "uniform", "low": 1e6, "high": 2e7}},
              "latency": 0.2, "slowdown": {"dist": "uniform", "low": 1.0, "high": 2.0}}
    kw = dict(policy="window", window=8.0, clients_per_round=7, max_local_steps=20)
    fast = make(system, fast=True, m=25, seed=3, **kw)
    slow = make(system, fast=False, m=25, seed=3, **kw)
    tf, ts = list(itertools.islice(fast.tables(), 6)), [p.table() for p in itertools.islice(slow.plans(), 6)]
    statuses = set()
    for a, b in zip(tf, ts):
        assert (a.round, a.open, a.close, a.available) == (b.round, b.open, b.close, b.available) == (a.round, a.open, a.close, 25)
        for name in a.columns:
            np.testing.assert_array_equal(a.columns[name], b.columns[name], err_msg=name)
        statuses |= set(a.statuses().tolist())
    assert statuses == {"completed", "dropped"}  # both branches exercised


def test_available_counts_clients_online_at_the_open():
    # client 1 offline in [0, 15): round 0 and 1 open with 1 of 2 online, round 2 with both
    clock = make({"speed": 1.0, "availability": [[], [[0.0, 15.0]]]}, policy="window", window=10.0, cost=None)
    plans = list(itertools.islice(clock.plans(), 3))
    assert [p.available for p in plans] == [1, 1, 2]
    assert [sum(j.status != "offline" for j in p.jobs) for p in plans] == [1, 1, 2]


def test_without_devices_transfers_are_the_latency():
    clock = make({"speed": 2.0, "latency": 0.25}, policy="window", window=5.0, cost=None)
    assert jobs(clock)[0] == (0, "completed", 9, 0.0, 0.25 + 9 / 2 + 0.25, 0.25, 0.25)


def test_compute_and_network_need_a_cost():
    with pytest.raises(ValueError, match="WorkCost"):
        make({"compute": {"flops": 1e9}}, policy="window", window=1.0, cost=None)
    with pytest.raises(ValueError, match="WorkCost"):
        make({"network": {"down": 1e6, "up": 1e6}}, policy="window", window=1.0, cost=None)


def test_build_clock_passes_the_cost():
    sc = parse_scenario({"data": {"clients": 2}, "system": {"compute": {"flops": 4e9}},
                         "round": {"policy": "window", "window": 2.0}})
    assert build_clock(sc, [1, 1], cost=COST).speeds.tolist() == [4.0, 4.0]


@pytest.mark.parametrize("system, message", [
    ({"speed": 2.0, "compute": {"flops": 1e9}}, "system.compute: give speed or compute, not both"),
    ({"speed": None}, "system.speed: give speed"),
    ({"compute": {"flops": 0}}, "system.compute.flops: must be > 0"),
    ({"compute": {"flops": [1e9, -1]}}, "system.compute.flops: must be > 0"),
    ({"network": {"down": 1e6, "up": 0}}, "system.network.up: must be > 0"),
    ({"network": {"down": {"dist": "uniform", "low": 0, "high": 5}, "up": 1}}, "system.network.down: must be > 0"),
    ({"network": {"down": 1e6}}, "system.network.up: Field required"),
    ({"network": {"down": 0.5, "up": 1e6}}, "system.network.down: must be at least 1"),
    ({"compute": {"flops": 1e-300}}, "system.compute.flops: must be at least 1"),
    ({"compute": {"flops": 1e9}, "trace": "t.csv"}, "system.compute: a trace gives the speed"),
])
def test_device_keys_are_validated(system, message):
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"data": {"clients": 2}, "system": system, "round": {"window": 5.0}})
    assert str(err.value).startswith(message), str(err.value)


def test_compute_scenario_round_trips():
    from fedsim.scenario import dump_scenario
    import yaml

    sc = parse_scenario({"data": {"clients": 2}, "system": {"compute": {"flops": 1e9}}, "round": {"window": 5.0}})
    assert sc.system.speed is None
    again = parse_scenario(yaml.safe_load(dump_scenario(sc)))
    assert again == sc


@pytest.mark.parametrize("network, policy, message", [
    # 1e6 B down at 8e6 b/s = 1 s, 2e6 B up at 4e6 b/s = 4 s, 2 latencies of 0.5: 6 s >= W = 6
    ({"down": 8e6, "up": 4e6}, {"policy": "window", "window": 6.0},
     "system.network: the quickest download and upload take 6 s, not less than round.window (6 s)"),
    ({"down": [8e5, 8e6], "up": {"dist": "uniform", "low": 1e5, "high": 4e6}},
     {"policy": "deadline", "deadline": 5.0, "local_steps": 1},
     "system.network: the quickest download and upload take 6 s, not less than round.deadline (5 s)"),
])
def test_a_model_too_big_for_any_window_is_refused(network, policy, message):
    sc = parse_scenario({"data": {"clients": 2}, "system": {"latency": 0.5, "network": network}, "round": policy})
    with pytest.raises(ScenarioError) as err:
        build_clock(sc, [1, 1], cost=COST)
    assert str(err.value).startswith(message), str(err.value)


def test_unbounded_bandwidths_or_a_fitting_client_pass():
    # lognormal: some client may be fast enough; W = 6.01 leaves 0.01 s for client 0
    for network, window in (({"down": {"dist": "lognormal", "median": 1e3, "sigma": 1}, "up": 4e6}, 6.0),
                            ({"down": 8e6, "up": 4e6}, 6.01)):
        sc = parse_scenario({"data": {"clients": 2}, "system": {"latency": 0.5, "network": network},
                             "round": {"policy": "window", "window": window}})
        assert build_clock(sc, [1, 1], cost=COST).num_clients == 2


def test_failed_job_keeps_the_finished_download_only():
    # wait, latency 0.5, 4 steps at 1/s: client 0 goes offline at 2.0 (computing) -> failed after
    # its download; client 1 offline at 0.25 (downloading) -> failed before it
    clock = make({"speed": 1.0, "latency": 0.5, "availability": [[[2.0, 9.0]], [[0.25, 9.0]]]}, cost=None,
                 policy="wait", local_steps=4)
    assert jobs(clock) == [
        (0, "failed", 0, 0.0, 2.0, 0.5, 0.0),
        (1, "failed", 0, 0.0, 0.25, 0.0, 0.0),
    ]


def test_async_available_is_the_online_count_when_the_first_job_started():
    # 3 clients, client 2 offline in [0, 1): the first jobs start at 0 with 2 of 3 online
    clock = make({"speed": [1.0, 2.0, 4.0], "latency": 0.5, "availability": [[], [], [[0.0, 1.0]]]}, m=3, cost=None,
                 policy="async", local_steps=2, concurrency=2, buffer=1)
    plans = list(itertools.islice(clock.plans(), 3))
    # update 0: client 1 (speed 2) arrives at 0.5 + 1 + 0.5 = 2; its job started at 0 (2 online)
    assert [(j.client, j.start) for j in plans[0].jobs] == [(1, 0.0)] and plans[0].available == 2
    # update 1: client 0 arrives at 3, started at 0 -> 2. At 2 the freed slot goes to the first of
    # a permutation of [1, 2] (stream ("select", 2): job seq 2); client 1 would arrive at 4, client 2
    # at 3.5, both before the job started at 3 -> update 2 is that pick, started at 2 with 3 online
    from fedsim.rng import stream

    pick = [1, 2][int(stream(0, "select", 2).permutation(2)[0])]
    assert [(j.client, j.start) for j in plans[1].jobs] == [(0, 0.0)] and plans[1].available == 2
    assert [(j.client, j.start) for j in plans[2].jobs] == [(pick, 2.0)] and plans[2].available == 3
