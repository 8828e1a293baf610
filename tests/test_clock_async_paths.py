"""Issue 18 item 1: the heap-based ``async`` path (``fedsim/clock/heap.py``) against the SimPy
simulation, every field of every plan, with both pick rules (``fedsim/clock/checkin.py``), and the
check-in rule itself on hand-made candidates."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.clock import Clock, Population
from fedsim.clock.checkin import CHECKIN_MIN_CLIENTS, checkin_draws, checkin_pick, permutation_pick
from fedsim.clock.keyed import keyed_uniform
from fedsim.rng import stream
from fedsim.availability.diurnal import DiurnalAvailability
from fedsim.availability.markov import MarkovAvailability
from fedsim.scenario import (
    LogNormal, RandInt, RoundConfig, SystemConfig, Uniform,
)


def make(speed, latency=0.3, availability="always", slowdown=None, sizes=None, seed=0, fast=None, checkin=None,
         **round_kw) -> Clock:
    m = len(speed) if isinstance(speed, tuple) else len(sizes)
    system = SystemConfig(speed=speed, latency=latency, availability=availability, slowdown=slowdown)
    return Clock(system.value(), RoundConfig(policy="async", **round_kw).value(4),
                 Population.of(sizes or [1] * m), seed=seed, fast=fast, checkin=checkin)


SPEEDS = tuple(np.linspace(0.4, 3.0, 12))
INTERVALS = tuple(((3.0 * c + 1.0, 3.0 * c + 2.5), (40.0 + c, 41.0 + 2 * c)) if c % 3 else () for c in range(12))
CASES = {
    "always": dict(local_steps=4, concurrency=5, buffer=2),
    "markov": dict(local_steps=RandInt(dist="randint", low=1, high=6), concurrency=6, buffer=3,
                   availability=MarkovAvailability(model="markov", mean_online=8.0, mean_offline=3.0)),
    "markov+starved": dict(local_steps=3, concurrency=12, buffer=4,
                           availability=MarkovAvailability(model="markov", mean_online=5.0, mean_offline=5.0)),
    "intervals+slowdown": dict(local_steps=5, concurrency=4, buffer=1, availability=INTERVALS,
                               slowdown=Uniform(dist="uniform", low=1.0, high=2.0)),
    "epochs+zero_work": dict(local_epochs=1, concurrency=3, buffer=2, sizes=[1, 2, 9, 30, 3, 12, 8, 2, 5, 16, 7, 4]),
    "diurnal": dict(speed=LogNormal(dist="lognormal", median=2.0, sigma=0.5), sizes=[1] * 12, local_steps=3,
                    concurrency=4, buffer=2,
                    availability=DiurnalAvailability(model="diurnal", period=40.0, peak=0.9, trough=0.2, phase=0.0,
                                                     mean_sojourn=4.0)),
}


@pytest.mark.parametrize("checkin", [False, True], ids=["permutation", "checkin"])
@pytest.mark.parametrize("case", list(CASES))
def test_heap_async_equals_simpy(case, checkin):
    kw = dict(speed=SPEEDS, seed=13, checkin=checkin)
    kw.update(CASES[case])
    heap, sim = make(fast=True, **kw), make(fast=False, **kw)
    a = list(itertools.islice(heap.plans(), 60))
    b = list(itertools.islice(sim.plans(), 60))
    assert a == b  # every field of every job, plan spans, min_live_version, available, started
    assert [t.plan() for t in itertools.islice(heap.tables(), 60)] == b
    statuses = {j.status for p in a for j in p.jobs}
    assert "completed" in statuses
    if case.startswith(("markov", "intervals")):
        assert "failed" in statuses
    if case == "epochs+zero_work":
        assert "dropped" in statuses


def test_started_lists_every_job_of_the_version():
    kw = dict(speed=SPEEDS, seed=2, local_steps=3, concurrency=6, buffer=2,
              availability=MarkovAvailability(model="markov", mean_online=8.0, mean_offline=3.0))
    plans = list(itertools.islice(make(**kw).plans(), 80))
    jobs = {j.key: j for p in plans for j in p.jobs}
    for p in plans:
        assert [k for _, k, _ in p.started] == sorted(k for _, k, _ in p.started)
        for c, k, steps in p.started:
            if k in jobs:  # reported by now
                assert jobs[k].version == p.round and jobs[k].client == c
                assert steps == 3
    # every reported job with steps > 0 was announced by the plan of its version
    announced = {k for p in plans for _, k, _ in p.started}
    assert {j.key for j in jobs.values() if j.status == "completed"} <= announced


def test_checkin_rule_by_hand():
    m, seed, seq = 50, 3, 7
    online = np.zeros(m, dtype=bool)
    online[::2] = True  # even clients are candidates
    pick = checkin_pick(m, 4, seed, seq, lambda cs: online[cs], lambda: np.flatnonzero(online))
    u = keyed_uniform(seed, "checkin", seq, np.arange(checkin_draws(4)))
    draws = np.minimum((u * m).astype(np.int64), m - 1).tolist()
    expected = []
    for c in draws:  # accept, in draw order, the candidates not accepted yet
        if c % 2 == 0 and c not in expected:
            expected.append(c)
        if len(expected) == 4:
            break
    assert pick.tolist() == sorted(expected)
    # too few candidates for the slots: after the draws, all of them
    one = np.zeros(m, dtype=bool)
    one[[5, 17]] = True
    assert checkin_pick(m, 3, seed, seq, lambda cs: one[cs], lambda: np.flatnonzero(one)).tolist() == [5, 17]
    # a candidate the draws never hit is found by the listing: a permutation of the rest
    rare = np.zeros(10**6, dtype=bool)
    rare[[11, 999_999, 123_456]] = True
    got = checkin_pick(10**6, 2, seed, seq, lambda cs: rare[cs], lambda: np.flatnonzero(rare))
    rest = np.array([11, 123_456, 999_999])
    assert got.tolist() == sorted(rest[stream(seed, "select", seq).permutation(3)[:2]].tolist())
    assert permutation_pick(rest, 2, seed, seq).tolist() == got.tolist()
    assert CHECKIN_MIN_CLIENTS == 65536 and checkin_draws(4) == 80


def test_pick_rule_follows_the_population():
    assert not make(speed=SPEEDS, local_steps=1, concurrency=2).checkin
    big = Clock(SystemConfig(speed=1.0).value(), RoundConfig(policy="async", local_steps=1, concurrency=2).value(4),
                Population.of(np.ones(CHECKIN_MIN_CLIENTS, dtype=np.int64)), seed=0)
    assert big.checkin and big.fast
