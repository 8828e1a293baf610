"""Oort (fedsim.selection.oort) on hand-made histories: every number derived by hand from Oort's
equations (docs/selection.md); FedScale's own decisions are in test_selection_oort_fedscale.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _selection import done, observations, request
from fedsim.selection import check_picked
from fedsim.selection.oort import Oort, utility, weighted_order
from fedsim.rng import stream

P = np.array([0.1, 0.2, 0.3, 0.4])


def round0(rule=Oort()):
    """Round 0 asks all four; client 0 completes in 4 s with utility sqrt(4 * 9) = 6, client 1 in
    8 s with sqrt(1 * 4) = 2, client 2 is dropped at the close (10 s), client 3 fails."""
    state = rule.init(4, P, seed=3)
    req = request(0, [0, 1, 2, 3], 4, 4, P)
    state, picked = rule.select(state, req)
    assert picked.clients.tolist() == [0, 1, 2, 3]
    obs = observations(0, 10.0, [(0, "completed", 1.0, 2.0, 1.0, 1.5, 9.0, 4), done(1, 8.0, 1.0, 4.0, 1),
                                 (2, "dropped", 1.0), (3, "failed")])
    return rule.observe(state, obs)


def test_utility_is_oorts_equation_one():
    # |B| sqrt(sum loss^2 / |B|): 4 samples with losses 1, 1, 2, 2 -> 4 sqrt(10 / 4) = sqrt(40)
    assert utility(np.array([4]), np.array([1 + 1 + 4 + 4.0]))[0] == pytest.approx(4 * math.sqrt(10 / 4), rel=1e-15)
    assert utility(np.array([0]), np.array([0.0]))[0] == 0.0


def test_feedback_of_round0_by_hand():
    s = round0()
    assert s.rounds == 1 and s.last_close == 10.0
    assert s.count.tolist() == [1, 1, 1, 0] and s.last.tolist() == [1, 1, 1, 0]
    assert s.reward.tolist() == [6.0, 2.0, 4.0, 0.0]  # the straggler gets the mean of 6 and 2
    assert s.duration[:3].tolist() == [4.0, 8.0, 10.0] and math.isnan(s.duration[3])
    assert s.exploration == 0.9 * 0.98
    assert s.history == (0.0,)  # nobody was exploited in round 0


def test_round1_plan_by_hand():
    s = round0()
    plan = Oort().plan(s, request(1, [0, 1, 2, 3], 2, 4, P))
    # T: 30th percentile of [4, 8, 10]: index int(3 * 30 / 100) = 0 -> 4
    assert plan.preferred_duration == 4.0
    # utilities [6, 2, 4]: clip = sorted[min(int(3 * 0.9), 2)] = 6, U_min = 2 * 0.999, range 6 - 1.998;
    # R = 1: log R = 0, no staleness bonus; clients 1 and 2 are slower than T: (4 / t)^2
    rng_ = 6 - 1.998
    expect = {0: (6 - 1.998) / rng_, 1: (2 - 1.998) / rng_ * (4 / 8) ** 2, 2: (4 - 1.998) / rng_ * (4 / 10) ** 2}
    assert plan.scored.tolist() == [0, 2, 1]
    np.testing.assert_allclose(plan.scores, [expect[0], expect[2], expect[1]], rtol=1e-15)
    # eps = 0.882: exploit 2 - int(2 * 0.882) = 1, among all three (3 <= 10 x 1 + 1); explore 1 of [3]
    assert (plan.exploit_len, plan.pool_len) == (1, 3)
    assert plan.unexplored.tolist() == [3] and (plan.explore_len, plan.explore_pool_len) == (1, 1)
    state, picked = Oort().select(s, request(1, [0, 1, 2, 3], 2, 4, P))
    assert state is s
    assert 3 in picked.clients and len(picked.clients) == 2


def test_round2_scores_with_staleness_and_penalty_by_hand():
    rule = Oort()
    s = round0(rule)
    s = rule.observe(s, observations(1, 25.0, [done(0, 5.0, 1.0, 4.0, 4), done(3, 3.0, 1.0, 1.0, 9)]))
    assert s.reward.tolist() == [4.0, 2.0, 4.0, 3.0] and s.last.tolist() == [2, 1, 1, 2]
    assert s.history == (0.0, 4.0 / (1e-4 + 1))  # client 0 was exploited (heard before), 3 explored
    plan = rule.plan(s, request(2, [0, 1, 2, 3], 2, 4, P))
    # T: sorted [3, 5, 8, 10], index int(4 * 0.3) = 1 -> 5; clip sorted([2,3,4,4])[3] = 4, range 4 - 1.998
    assert plan.preferred_duration == 5.0
    bonus = lambda last: math.sqrt(0.1 * math.log(2) / last)  # noqa: E731
    r = 4 - 1.998
    expect = {0: (4 - 1.998) / r + bonus(2), 1: ((2 - 1.998) / r + bonus(1)) * (5 / 8) ** 2,
              2: ((4 - 1.998) / r + bonus(1)) * (5 / 10) ** 2, 3: (3 - 1.998) / r + bonus(2)}
    assert plan.scored.tolist() == sorted(expect, key=lambda c: -expect[c])
    np.testing.assert_allclose(plan.scores, sorted(expect.values(), reverse=True), rtol=1e-14)
    assert plan.exploit_len == 2 - int(2 * 0.9 * 0.98 * 0.98) and plan.explore_len == 0


def test_the_exploitation_pool_is_cut_at_the_cut_off():
    # 30 explored clients, equal durations, utilities u = 1..30 (client u - 1); R = 1: no bonus.
    # clip = sorted[int(30 * 0.9)] = 28, U_min = 0.999, range 30 - 0.999: score = (min(u, 28) - 0.999) / 29.001
    m = 30
    req = request(1, range(m), 2, m, np.full(m, 1 / m))

    def plan_of(rule):
        s = rule.init(m, np.full(m, 1 / m), 0)
        s = rule.observe(s, observations(0, 5.0, [done(c, 1.0, 1.0, float(c + 1) ** 2, 1) for c in range(m)]))
        return rule.plan(s, req)

    plan = plan_of(Oort(cut_off_util=0.5, exploration_factor=0.0, exploration_min=0.0))
    assert plan.scored.tolist() == [27, 28, 29] + list(range(26, -1, -1))  # the clipped three tie: by id
    assert plan.exploit_len == 2
    # cut = 0.5 x the score of the first left out (clipped 28): u - 0.999 >= 13.5005, u = 15..30: 16
    # clients; the pool keeps at least 10 x 2 + 1 = 21
    assert plan.pool_len == 21


def test_the_cut_off_binds_when_it_keeps_more_than_ten_times():
    m = 30
    rule = Oort(cut_off_util=0.5, exploration_factor=0.5, exploration_min=0.5)
    s = rule.init(m, np.full(m, 1 / m), 0)
    s = rule.observe(s, observations(0, 5.0, [done(c, 1.0, 1.0, float(c + 1) ** 2, 1) for c in range(m)]))
    plan = rule.plan(s, request(1, range(m), 2, m, np.full(m, 1 / m)))
    # exploit 2 - int(2 * 0.5) = 1; cut 0.5 x the second best (clipped 28): the 16 clients u = 15..30
    assert plan.exploit_len == 1 and plan.pool_len == 16


def _flat(us):
    """Two clients report the same utility u per round (samples 1, loss_sq u^2)."""
    rule = Oort(pacer_step=2)
    s = rule.init(2, np.array([0.5, 0.5]), 0)
    thresholds = []
    for r, u in enumerate(us):
        s = rule.observe(s, observations(r, 10.0 * (r + 1), [done(0, 1.0, 1.0, u * u, 1), done(1, 1.0, 1.0, u * u, 1)]))
        thresholds.append(s.threshold)
    return s, thresholds


def test_the_pacer_relaxes_when_utility_is_flat_and_tightens_when_it_jumps():
    # history h_r = 2 u_r / (2 + 1e-4) for r >= 1 (h_0 = 0); checks after rounds 4 and 6 (step 2)
    s, th = _flat([1.0, 10.0, 5.0, 5.0, 50.0, 50.0])
    # round 4: before h0 + h1 = h(10), now h(5) + h(5) = h(10): flat -> 30 + 5; round 6: 10x -> 35 - 5
    assert th == [30.0, 30.0, 30.0, 35.0, 35.0, 30.0]
    s, th = _flat([1.0, 10.0, 8.0, 8.0])  # |16 - 10| neither <= 1 nor >= 50: unchanged
    assert th[-1] == 30.0


def test_the_pacer_stays_within_delta_and_100():
    rule = Oort(pacer_step=1, pacer_delta=40.0, round_threshold=90.0)
    s = rule.init(1, np.array([1.0]), 0)
    for r in range(4):  # h = [0, u, u, u]: flat from round 3 on -> min(100, 90 + 40) = 100
        s = rule.observe(s, observations(r, r + 1.0, [done(0, 1.0, 1.0, 4.0, 1)]))
    assert s.threshold == 100.0 and rule.preferred_duration(s) == math.inf
    rule = Oort(pacer_step=1, pacer_delta=5.0, round_threshold=7.0)
    s = rule.init(1, np.array([1.0]), 0)
    for r, u in enumerate([1.0, 1.0, 100.0]):  # h = [0, 1, 100]: at round 3 a jump -> max(5, 7 - 5) = 5
        s = rule.observe(s, observations(r, r + 1.0, [done(0, 1.0, 1.0, u * u, 1)]))
    assert s.threshold == 5.0


def test_exploration_decays_per_observed_round_to_its_minimum():
    rule = Oort()
    s = rule.init(1, np.array([1.0]), 0)
    eps = 0.9
    for r in range(80):
        s = rule.observe(s, observations(r, r + 1.0, []))
        eps = max(eps * 0.98, 0.3)
        assert s.exploration == eps
    assert s.exploration == 0.3


def test_blacklist_most_heard_first_capped():
    rule = Oort(blacklist_rounds=2, blacklist_max_len=0.4)
    s = rule.init(5, np.full(5, 0.2), 0)
    for r, who in enumerate([[0, 1, 2, 3], [0, 1, 2], [0, 1, 2], [0, 2], [0, 2]]):
        s = rule.observe(s, observations(r, r + 1.0, [done(c, 1.0, 1.0, 1.0, 1) for c in who]))
    assert s.count.tolist() == [5, 3, 5, 1, 0]
    # over 2: clients 0, 2 (5 each) and 1 (3); cap floor(0.4 * 5) = 2 -> the two most heard
    assert rule.blacklist(s).tolist() == [0, 2]
    assert Oort().blacklist(s).tolist() == []


def test_slots_nobody_may_fill_go_to_the_best_blacklisted():
    # everyone heard once and blacklisted (count 1 > 0): nothing to exploit or explore
    rule = Oort(blacklist_rounds=0, blacklist_max_len=1.0)
    s = rule.init(4, P, 0)
    s = rule.observe(s, observations(0, 10.0, [done(c, 1.0, 1.0, float(c + 1) ** 2, 1) for c in range(4)]))
    req = request(1, [0, 1, 2, 3], 2, 4, P)
    plan = rule.plan(s, req)
    assert plan.scored.size == 0 and plan.others.tolist() == [3, 2, 1, 0]
    assert rule.select(s, req)[1].clients.tolist() == [2, 3]


def test_round0_is_uniform_and_full_participation_takes_everybody():
    rule = Oort()
    s = rule.init(10, np.full(10, 0.1), 7)
    req = request(0, range(10), 3, 10)
    _, picked = rule.select(s, req)
    check_picked(picked, req, "oort")
    expect = np.sort(np.arange(10)[stream(7, "select", 0).permutation(10)[:3]])  # uniform's pick
    assert picked.clients.tolist() == expect.tolist()
    for k in (None, 10, 12):
        assert rule.select(s, request(0, [1, 4, 5], k, 10))[1].clients.tolist() == [1, 4, 5]


def test_a_diverged_loss_keeps_the_last_utility():
    rule = Oort()
    s = round0(rule)
    s = rule.observe(s, observations(1, 20.0, [done(0, 4.0, float("inf"), float("inf"), 4),
                                               done(1, 8.0, float("nan"), float("nan"), 1)]))
    assert s.reward[:2].tolist() == [6.0, 2.0] and s.count[:2].tolist() == [2, 2]
    plan = rule.plan(s, request(2, [0, 1, 2, 3], 2, 4, P))
    assert np.isfinite(plan.scores).all()


def test_weighted_order_draws_in_proportion_and_puts_zeros_last():
    g = np.random.default_rng(0)
    w = np.array([1.0, 0.0, 3.0, 0.0])
    firsts = np.array([weighted_order(g, w)[0] for _ in range(4000)])
    assert set(firsts) == {0, 2} and abs(np.mean(firsts == 2) - 0.75) < 0.03
    assert all(set(weighted_order(g, w)[2:]) == {1, 3} for _ in range(50))
    assert sorted(weighted_order(g, np.zeros(5)).tolist()) == list(range(5))


@pytest.mark.parametrize("seed", range(20))
def test_every_answer_is_valid_and_select_is_pure(seed):
    g = np.random.default_rng(seed)
    m = int(g.integers(2, 40))
    p = g.dirichlet(np.ones(m))
    rule = Oort(blacklist_rounds=int(g.integers(0, 4)) if seed % 2 else None, pacer_step=int(g.integers(1, 4)))
    s = rule.init(m, p, seed)
    close = 0.0
    for r in range(12):
        online = np.flatnonzero(g.random(m) < 0.7)
        k = int(g.integers(1, m + 1))
        req = request(r, online, k, m, p)
        s2, picked = rule.select(s, req)
        assert s2 is s
        again = rule.select(s, req)[1]
        check_picked(picked, req, "oort")
        assert picked.clients.tolist() == again.clients.tolist()
        close += float(g.uniform(1, 10))
        rows = []
        for c in picked.clients:
            kind = g.choice(["completed", "dropped", "failed"], p=[0.7, 0.2, 0.1])
            if kind == "completed":
                rows.append(done(int(c), float(g.uniform(0.5, 9)), 1.0, float(g.uniform(0, 5)), int(g.integers(1, 50))))
            else:
                rows.append((int(c), str(kind)))
        s = rule.observe(s, observations(r, close, rows))
