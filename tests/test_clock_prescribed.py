"""Issue 18 items 1-2: the vectorised ``wait`` / ``deadline`` / ``overcommit`` path
(``fedsim/clock/vectorised_wait.py``) against the SimPy simulation, job by job, and the
over-commitment policy on hand-made worlds (event times written out by hand)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.clock import Clock, Population
from fedsim.clock.policy import overcommit_size
from fedsim.availability.diurnal import DiurnalAvailability
from fedsim.availability.markov import MarkovAvailability
from fedsim.scenario import (
    LogNormal, RandInt, RoundConfig, ScenarioError, SystemConfig, Uniform,
    parse_scenario,
)


def make(speed=(1.0,), latency=0.0, availability="always", slowdown=None, sizes=None, weights=None, seed=0,
         batch_size=4, fast=None, **round_kw) -> Clock:
    m = len(speed) if isinstance(speed, tuple) else len(sizes or weights)
    system = SystemConfig(speed=speed, latency=latency, availability=availability, slowdown=slowdown)
    return Clock(system.value(), RoundConfig(**round_kw).value(batch_size), Population.of(sizes or [1] * m, weights),
                 seed=seed, fast=fast)


def take(clock, n):
    return list(itertools.islice(clock.plans(), n))


def rows(plans):
    return [(j.round, j.client, j.status, j.steps, j.start, j.end, j.download, j.upload) for p in plans for j in p.jobs]


SPEEDS = (0.3, 1.0, 2.5, 7.0, 0.11, 1.9, 4.0, 0.7)
INTERVALS = (((0.0, 7.3),), ((3.0, 4.0), (20.0, 30.0)), (), ((7.3, 8.0),), ((1.0, 50.0),),
             ((14.6, 14.7), (100.0, 101.0)), ((2.0, 2.5), (9.0, 9.1), (40.0, 41.0)), ((0.5, 60.0),))
MARKOV = MarkovAvailability(model="markov", mean_online=9.0, mean_offline=4.0)
POLICIES = {
    "wait": dict(policy="wait"),
    "deadline": dict(policy="deadline", deadline=6.5),
    "overcommit": dict(policy="overcommit", overcommit=1.5, clients_per_round=4),
}
CASES = {
    "plain": dict(local_steps=5),
    "randint+slowdown": dict(local_steps=RandInt(dist="randint", low=1, high=12),
                             slowdown=LogNormal(dist="lognormal", median=1.0, sigma=0.5)),
    "epochs+cap": dict(local_epochs=2, max_local_steps=9, sizes=[5, 60, 100, 7, 33, 250, 1, 17]),
    "intervals": dict(local_steps=4, availability=INTERVALS),
    "markov": dict(local_steps=RandInt(dist="randint", low=1, high=8), availability=MARKOV),
    "markov+sampled": dict(local_steps=3, availability=MARKOV, clients_per_round=3),
    "weighted": dict(local_steps=3, availability=MARKOV, clients_per_round=5, sampling="weighted"),
    "lognormal+diurnal": dict(speed=LogNormal(dist="lognormal", median=2.0, sigma=0.7), local_steps=6,
                              availability=DiurnalAvailability(model="diurnal", period=60.0, peak=0.9, trough=0.2,
                                                               phase=Uniform(dist="uniform", low=0, high=60),
                                                               mean_sojourn=6.0)),
}


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("case", list(CASES))
def test_vectorised_prescribed_equals_simpy(policy, case):
    kw = dict(speed=SPEEDS, latency=0.45, seed=21, weights=[0.3, 0.1, 0.2, 0.1, 0.1, 0.05, 0.1, 0.05])
    kw.update(POLICIES[policy])
    kw.update(CASES[case])
    if "sizes" in kw:
        kw["weights"] = None
    fast, slow = make(fast=True, **kw), make(fast=False, **kw)
    assert fast.fast and not slow.fast
    a, b = take(fast, 40), take(slow, 40)
    assert a == b  # every field of every Job and plan, floats bit for bit
    assert [t.plan() for t in itertools.islice(fast.tables(), 40)] == b


def test_paths_agree_on_every_status():
    kw = dict(speed=SPEEDS, latency=0.45, seed=3, availability=INTERVALS, local_steps=4)
    for policy in POLICIES.values():
        a = take(make(fast=True, **kw, **policy), 30)
        assert a == take(make(fast=False, **kw, **policy), 30)
        seen = {j.status for p in a for j in p.jobs}
        assert {"completed", "failed"} <= seen
        if policy["policy"] != "wait":
            assert "dropped" in seen


def test_nobody_online_closes_at_the_first_return():
    av = (((0.0, 7.0),), ((0.0, 3.5),))
    for fast in (True, False):
        plans = take(make(speed=(1.0, 1.0), availability=av, policy="wait", local_steps=2, fast=fast), 3)
        assert [(p.open, p.close) for p in plans] == [(0.0, 3.5), (3.5, 5.5), (5.5, 7.5)]
        plans = take(make(speed=(1.0, 1.0), availability=av, policy="deadline", deadline=2.0, local_steps=2, fast=fast), 3)
        assert [(p.open, p.close) for p in plans] == [(0.0, 2.0), (2.0, 3.5), (3.5, 5.5)]
        clock = make(speed=(1.0,), availability=(((0.0, 1e9),),), policy="wait", local_steps=1, fast=fast)
        assert [(p.open, p.close) for p in take(clock, 2)] == [(0.0, 1e9), (1e9, 1e9 + 1)]


# ---------------------------------------------------------------------------- over-commitment
def test_overcommit_size_reads_the_factor_as_written():
    assert overcommit_size(1.3, 10) == 13  # 1.3 * 10 is 13.000000000000002 in floating point
    assert overcommit_size(1.3, 1000) == 1300 and overcommit_size(1.0, 7) == 7 and overcommit_size(1.25, 3) == 4


@pytest.mark.parametrize("fast", [True, False])
def test_overcommit_keeps_the_first_k_uploads(fast):
    # 4 clients, K = 2, factor 2: all selected. 4 steps, latency 0.5: uploads at
    # 0.5 + 4 / s + 0.5 = 5.0 (s=1), 3.0 (s=2), 2.0 (s=4), 9.0 (s=0.5): the round closes at 3.0
    clock = make(speed=(1.0, 2.0, 4.0, 0.5), latency=0.5, policy="overcommit", clients_per_round=2, overcommit=2.0,
                 local_steps=4, fast=fast)
    plans = take(clock, 2)
    assert rows(plans) == [
        (0, 0, "dropped", 0, 0.0, 3.0, 0.5, 0.0),
        (0, 1, "completed", 4, 0.0, 3.0, 0.5, 0.5),
        (0, 2, "completed", 4, 0.0, 2.0, 0.5, 0.5),
        (0, 3, "dropped", 0, 0.0, 3.0, 0.5, 0.0),
        (1, 0, "dropped", 0, 3.0, 6.0, 0.5, 0.0),
        (1, 1, "completed", 4, 3.0, 6.0, 0.5, 0.5),
        (1, 2, "completed", 4, 3.0, 5.0, 0.5, 0.5),
        (1, 3, "dropped", 0, 3.0, 6.0, 0.5, 0.0),
    ]
    assert [(p.open, p.close) for p in plans] == [(0.0, 3.0), (3.0, 6.0)]


@pytest.mark.parametrize("fast", [True, False])
def test_overcommit_ties_failures_and_too_few_uploads(fast):
    # speeds 2, 2, 1: uploads at 2.0, 2.0, 3.0 (2 steps, no latency); K = 1: client 0 wins the tie at
    # 2.0 (lower index), client 1 uploaded too late (dropped, its upload counted), client 2 stopped
    clock = make(speed=(2.0, 2.0, 1.0), latency=0.0, policy="overcommit", clients_per_round=1, overcommit=3.0,
                 local_steps=4, fast=fast)
    assert rows(take(clock, 1)) == [
        (0, 0, "completed", 4, 0.0, 2.0, 0.0, 0.0),
        (0, 1, "dropped", 0, 0.0, 2.0, 0.0, 0.0),
        (0, 2, "dropped", 0, 0.0, 2.0, 0.0, 0.0),
    ]
    # K = 2 with latency 0.5 (uploads 5.0, 3.0, 2.0): client 2 fails at 1.0, client 0 goes offline
    # exactly at the close 5.0 (not a failure: dropped at the close) -> only client 1 uploads: as wait,
    # the round closes at the last resolution
    av = (((5.0, 6.0),), (), ((1.0, 2.0),))
    clock = make(speed=(1.0, 2.0, 4.0), latency=0.5, availability=av, policy="overcommit", clients_per_round=2,
                 overcommit=1.5, local_steps=4, fast=fast)
    plan = take(clock, 1)[0]
    assert rows([plan]) == [
        (0, 0, "completed", 4, 0.0, 5.0, 0.5, 0.5),
        (0, 1, "completed", 4, 0.0, 3.0, 0.5, 0.5),
        (0, 2, "failed", 0, 0.0, 1.0, 0.5, 0.0),
    ]
    assert plan.close == 5.0
    # K = 1: client 1 uploads at 3.0 and closes the round; client 0's outage at 5.0 comes after it
    clock = make(speed=(1.0, 2.0, 4.0), latency=0.5, availability=(((2.9, 6.0),), (), ((1.0, 2.0),)),
                 policy="overcommit", clients_per_round=1, overcommit=3.0, local_steps=4, fast=fast)
    assert rows(take(clock, 1)) == [
        (0, 0, "failed", 0, 0.0, 2.9, 0.5, 0.0),
        (0, 1, "completed", 4, 0.0, 3.0, 0.5, 0.5),
        (0, 2, "failed", 0, 0.0, 1.0, 0.5, 0.0),
    ]


@pytest.mark.parametrize("fast", [True, False])
def test_overcommit_outage_at_the_close_is_a_drop(fast):
    # K = 1 of 2: client 1 uploads at 3.0; client 0 (upload 5.0) goes offline exactly at 3.0: dropped
    clock = make(speed=(1.0, 2.0), latency=0.5, availability=(((3.0, 4.0),), ()), policy="overcommit",
                 clients_per_round=1, overcommit=2.0, local_steps=4, fast=fast)
    plans = take(clock, 2)
    assert rows(plans[:1]) == [(0, 0, "dropped", 0, 0.0, 3.0, 0.5, 0.0), (0, 1, "completed", 4, 0.0, 3.0, 0.5, 0.5)]
    assert [j.client for j in plans[1].jobs] == [1]  # client 0 is offline at the next open (3.0)


def test_overcommit_weights_are_those_of_the_selection():
    clock = make(speed=(1.0,) * 4, weights=[0.1, 0.2, 0.3, 0.4], policy="overcommit", clients_per_round=2, overcommit=1.5,
                 local_steps=1, seed=5)
    (plan,) = take(clock, 1)
    from fedsim.rng import stream

    assert [j.client for j in plan.jobs] == sorted(stream(5, "select", 0).permutation(4)[:3].tolist())
    p = [0.1, 0.2, 0.3, 0.4]
    chosen = [j.client for j in plan.jobs]
    # round.weights normalized (the default): p_i over the sum of the ceil(1.5 x 2) = 3 selected clients' p
    assert [j.weight for j in plan.jobs] == [p[c] / sum(p[k] for k in chosen) for c in chosen]
    assert sum(j.status == "completed" for j in plan.jobs) == 2


def scenario(**round_kw):
    return {"data": {"name": "quadratic", "clients": 10}, "round": {"policy": "overcommit", "local_steps": 2,
                                                                    "clients_per_round": 4, **round_kw}}


def test_overcommit_keys_are_validated():
    sc = parse_scenario(scenario())
    assert sc.round.overcommit == 1.3
    for bad, msg in ((0.9, "between 1 and 100"), (101, "between 1 and 100"), (float("nan"), "finite")):
        with pytest.raises(ScenarioError, match=f"^round.overcommit: .*{msg}"):
            parse_scenario(scenario(overcommit=bad))
    with pytest.raises(ScenarioError, match="^round.clients_per_round: must be <= data.clients"):
        parse_scenario(scenario(clients_per_round=11))
    with pytest.raises(ScenarioError, match="^round.clients_per_round: required for policy overcommit"):
        parse_scenario(scenario(clients_per_round=None))
    with pytest.raises(ScenarioError, match="^round.local_steps: policy overcommit needs"):
        parse_scenario(scenario(local_steps=None))


def test_docs_state_the_numbers():
    from pathlib import Path

    from fedsim.clock.checkin import CHECKIN_MIN_CLIENTS, checkin_draws
    from fedsim.engine.async_run import PREFETCH_BYTES, PREFETCH_MIN
    from fedsim.scenario.round import MAX_OVERCOMMIT

    docs = Path(__file__).resolve().parent.parent / "docs"
    clock, scen, asyn = ((docs / f).read_text() for f in ("clock.md", "scenario.md", "async.md"))
    assert RoundConfig().overcommit == 1.3 and MAX_OVERCOMMIT == 100
    assert "`overcommit` F, default 1.3, at most 100" in clock and "| `round.overcommit` | number in [1, 100] | `1.3` |" in scen
    assert CHECKIN_MIN_CLIENTS == 65_536 and "from 65,536 clients on" in clock and "below 65,536 clients" in clock
    assert checkin_draws(5) == 4 * 5 + 64 and "after 4 free + 64 draws" in clock
    assert PREFETCH_MIN == 32 and PREFETCH_BYTES == 512 << 20 and "at least 32 of them" in asyn and "512 MiB" in asyn


@pytest.mark.parametrize("round_kw, field", [
    ({"overcommit": 0.5}, "round.overcommit"),
    ({"overcommit": 1e6}, "round.overcommit"),
    ({"clients_per_round": 50}, "round.clients_per_round"),
])
def test_bad_overcommit_input_one_line_exit_2(tmp_path, capsys, round_kw, field):
    import yaml

    from fedsim.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(**round_kw)))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err
