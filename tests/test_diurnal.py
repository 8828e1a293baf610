"""Diurnal availability (issue 11 item 4): the long-run online share and the daily profile
against their closed forms, the two clock paths against each other, and the keys' validation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedsim.clock import Clock, Population
from fedsim.availability.diurnal import Diurnal, DiurnalStates
from fedsim.runner.clock import build_clock
from fedsim.scenario import ScenarioError, parse_scenario


def states(m=20000, peak=0.8, trough=0.1, period=100.0, tau=10.0, seed=1):
    d = Diurnal(period=period, peak=peak, trough=trough, phase=0.0, mean_sojourn=tau)
    return DiurnalStates(d, seed, np.arange(m, dtype=np.int64), np.zeros(m))


def profile(t, peak=0.8, trough=0.1, period=100.0, tau=10.0):
    """p(t) = a + b cos(w t - atan(w tau)) / sqrt(1 + (w tau)^2): the periodic solution of
    p' = (pi(t) - p) / tau with pi(t) = a + b cos(w t)."""
    a, b, w = (peak + trough) / 2, (peak - trough) / 2, 2 * math.pi / period
    return a + b * math.cos(w * t - math.atan(w * tau)) / math.sqrt(1 + (w * tau) ** 2)


def test_online_share_follows_the_closed_form_profile():
    st = states()
    shares = []
    for t in np.arange(0.0, 300.0, 5.0):  # three periods
        st.advance(t)
        shares.append(st.online.mean())
        # 20,000 clients: binomial standard error <= 0.0036; 5 sigma
        assert st.online.mean() == pytest.approx(profile(t), abs=0.018), t
    # long-run online share: the mean of pi over a period, (peak + trough) / 2
    assert np.mean(shares) == pytest.approx(0.45, abs=0.005)


def test_one_client_long_run_share_is_peak_plus_trough_over_two():
    st = states(m=1, period=50.0, tau=5.0, seed=7)
    t, on, total = 0.0, 0.0, 0.0
    while t < 50.0 * 2000:  # 2,000 periods of one client's alternating sojourns
        nxt = float(st.next[0])
        if st.online[0]:
            on += nxt - t
        total += nxt - t
        t = nxt
        st.advance(t)
    assert on / total == pytest.approx((0.8 + 0.1) / 2, abs=0.01)


def test_peak_trough_equal_is_markov_with_that_share():
    # pi constant = 0.3: sojourns online have rate 0.7 / tau, offline 0.3 / tau
    st = states(m=50000, peak=0.3, trough=0.3, tau=2.0)
    st.advance(123.0)
    assert st.online.mean() == pytest.approx(0.3, abs=0.01)


@pytest.mark.parametrize("cpr", [None, 4])
def test_window_paths_agree(cpr):
    sc = parse_scenario({
        "data": {"clients": 12}, "seed": 3,
        "system": {"speed": {"dist": "uniform", "low": 0.5, "high": 2.0}, "latency": 0.2,
                   "availability": {"model": "diurnal", "period": 60.0, "peak": 0.9, "trough": 0.2,
                                    "phase": {"dist": "uniform", "low": 0, "high": 60}, "mean_sojourn": 4.0}},
        "round": {"policy": "window", "window": 3.0, "clients_per_round": cpr},
    })
    fast = build_clock(sc, [1] * 12)
    slow = build_clock(sc, [1] * 12, fast=False)
    assert fast.fast and not slow.fast
    a, b = list(itertools.islice(fast.plans(), 80)), list(itertools.islice(slow.plans(), 80))
    assert a == b
    assert {"completed", "failed"} <= {j.status for p in a for j in p.jobs}
    assert len({p.available for p in a}) > 3  # the online count moves with the day


def test_phase_shifts_the_peak():
    # half the clients peak at t = 0, half at t = 50: at t = 0 the first half is mostly online
    d = Diurnal(period=100.0, peak=1.0, trough=0.0, phase=0.0, mean_sojourn=1.0)
    m = 4000
    st = DiurnalStates(d, 0, np.arange(m, dtype=np.int64), np.repeat([0.0, 50.0], m // 2))
    assert st.online[: m // 2].mean() > 0.9 and st.online[m // 2:].mean() < 0.1


@pytest.mark.parametrize("av, message", [
    ({"model": "diurnal", "peak": 0.2, "trough": 0.5}, "system.availability.trough: must be <= peak"),
    ({"model": "diurnal", "peak": 0.0, "trough": 0.0}, "system.availability.peak: must be > 0"),
    ({"model": "diurnal", "phase": [1.0]}, "system.availability.phase: needs one phase per client (2)"),
])
def test_diurnal_keys(av, message):
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"data": {"clients": 2}, "system": {"availability": av}, "round": {"window": 5.0}})
    assert str(err.value).startswith(message), str(err.value)


def test_tiny_diurnal_sojourn_is_refused():
    sc = parse_scenario({"data": {"clients": 2}, "round": {"window": 5.0},
                         "system": {"availability": {"model": "diurnal", "mean_sojourn": 1e-300}}})
    with pytest.raises(ScenarioError, match="^system.availability.mean_sojourn: must be at least 0.0005 s"):
        build_clock(sc, [1, 1])


def test_defaults():
    sc = parse_scenario({"data": {"clients": 2}, "round": {"window": 5.0}, "system": {"availability": {"model": "diurnal"}}})
    assert sc.system.value().availability == Diurnal(86400.0, 0.8, 0.1, 0.0, 3600.0)
    assert isinstance(Clock(sc.system.value(), sc.round.value(32), Population.of([1, 1]), seed=0).fast, bool)
