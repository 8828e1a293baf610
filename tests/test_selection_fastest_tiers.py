"""``fastest`` and ``tiers`` (TiFL) on hand-made histories, with expectations derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

from _selection import done, observations, request
from _selection import uniform_pick as select
from fedsim.rng import stream
from fedsim.selection import check_picked
from fedsim.selection.fastest import Fastest
from fedsim.selection.oort import Oort
from fedsim.selection.tiers import AdaptiveTiers, Tiers, change_probs, tier_sizes

ALL = list(range(6))


# -- fastest ----------------------------------------------------------------------------------------

def test_fastest_by_hand():
    rule = Fastest()
    s = rule.init(6, np.full(6, 1 / 6), 0)
    s, picked = rule.select(s, request(0, [0, 1, 2], 3, 6))
    assert picked.clients.tolist() == [0, 1, 2]  # everybody online
    s = rule.observe(s, observations(0, 9.0, [done(0, 6.0), done(1, 2.0), (2, "dropped")]))
    # unseen 3 first; then the fastest seen: 1 (2 s) before 0 (6 s) before 2 (no completion)
    assert rule.select(s, request(1, [0, 1, 2, 3], 2, 6))[1].clients.tolist() == [1, 3]
    s = rule.observe(s, observations(1, 20.0, [done(3, 1.0), done(1, 4.0), done(4, 6.0)]))
    # means: 0: 6, 1: (2 + 4) / 2 = 3, 2: inf, 3: 1, 4: 6
    assert rule.select(s, request(2, [0, 1, 2, 3, 4], 2, 6))[1].clients.tolist() == [1, 3]
    assert rule.select(s, request(2, [0, 2, 4], 1, 6))[1].clients.tolist() == [0]  # 0 and 4 tie: by id
    assert rule.select(s, request(2, [0, 2, 4], 2, 6))[1].clients.tolist() == [0, 4]
    assert rule.select(s, request(2, [2, 4, 5], 2, 6))[1].clients.tolist() == [4, 5]  # unseen 5 first
    assert s.mean_duration(np.arange(6)).tolist() == [6.0, 3.0, np.inf, 1.0, 6.0, np.inf]


def test_fastest_draws_among_the_unseen_as_uniform_draws():
    rule = Fastest()
    s = rule.init(10, np.full(10, 0.1), 5)
    s = rule.observe(s, observations(0, 1.0, [done(0, 1.0), done(1, 1.0)]))
    picked = rule.select(s, request(4, range(10), 3, 10))[1].clients
    unseen = np.arange(2, 10)  # the clock's uniform pick among them: first 3 of a permutation, stream ("select", 4)
    assert picked.tolist() == select(unseen, 3, "uniform", np.full(10, 0.1), 5, 4)[0].tolist()


@pytest.mark.parametrize("rule", [Fastest(), Tiers(), AdaptiveTiers(), Oort()], ids=lambda r: type(r).__name__)
def test_every_first_pick_is_uniforms(rule):
    p = np.random.default_rng(1).dirichlet(np.ones(30))
    online = np.sort(np.random.default_rng(2).choice(30, 22, replace=False))
    s = rule.init(30, p, 17)
    picked = rule.select(s, request(0, online, 7, 30, p))[1]
    clients, _, weights = select(online, 7, "uniform", p, 17, 0)
    assert picked.clients.tolist() == clients.tolist()
    np.testing.assert_allclose(picked.weights, weights, rtol=1e-15)


def test_fastest_counts_repeated_jobs_of_a_client_in_one_update():
    rule = Fastest()
    s = rule.init(2, np.full(2, 0.5), 0)
    s = rule.observe(s, observations(0, 9.0, [done(0, 2.0), done(0, 4.0), (1, "failed")]))
    assert s.completed.tolist() == [2, 0] and s.reported.tolist() == [2, 1] and s.total.tolist() == [6.0, 0.0]


# -- tiers ------------------------------------------------------------------------------------------

def profiled(rule, m=6):
    """Round 0 asks everybody; latencies 0: 1, 1: 5, 2: 2, 3: 6, 4: 3 s; client 5 fails (+inf).
    Training losses 0: 1, 2: 1, 4: 1 (fast half), 1: 3, 3: 3."""
    s = rule.init(m, np.full(m, 1 / m), 11)
    rows = [done(0, 1.0, 1.0), done(1, 5.0, 3.0), done(2, 2.0, 1.0), done(3, 6.0, 3.0), done(4, 3.0, 1.0), (5, "failed")]
    s, _ = rule.select(s, request(0, range(m), m, m))
    return rule.observe(s, observations(0, 10.0, rows))


def test_tier_sizes_are_equal_the_first_ones_larger():
    assert tier_sizes(6, 4).tolist() == [2, 2, 1, 1]
    assert tier_sizes(2, 5).tolist() == [1, 1, 0, 0, 0]
    assert tier_sizes(10, 5).tolist() == [2] * 5


def test_tiers_by_observed_latency():
    # by latency: 0 (1), 2 (2), 4 (3), 1 (5), 3 (6), 5 (+inf: never completed)
    assert Tiers(tiers=2).tier_of(profiled(Tiers(tiers=2))).tolist() == [0, 1, 0, 1, 0, 1]
    assert Tiers(tiers=4).tier_of(profiled(Tiers(tiers=4))).tolist() == [0, 1, 0, 2, 1, 3]
    s = Tiers().init(3, np.full(3, 1 / 3), 0)
    assert Tiers().tier_of(s).tolist() == [-1, -1, -1]


def test_one_tier_per_round_uniform_inside():
    rule = Tiers(tiers=2)
    s = profiled(rule)
    members = {0: {0, 2, 4}, 1: {1, 3, 5}}
    seen_tiers = set()
    for key in range(1, 40):
        req = request(key, ALL, 2, 6)
        picked = set(rule.select(s, req)[1].clients.tolist())
        t = rule.draw_tier(s, key)
        assert picked <= members[t]
        seen_tiers.add(t)
        # the tier draw: u = stream(seed, "tiers", key, 0) against the cumulative probabilities (1/2, 1)
        assert t == int(stream(11, "tiers", key, 0).random() >= 0.5)
    assert seen_tiers == {0, 1}


def test_a_tier_short_of_online_members_is_filled_from_the_nearest():
    rule = Tiers(tiers=3)  # tiers {0, 2}, {4, 1}, {3, 5}
    s = profiled(rule)
    assert rule.tier_of(s).tolist() == [0, 1, 0, 2, 1, 2]
    key = next(k for k in range(100) if rule.draw_tier(s, k) == 0)
    # tier 0 has only client 0 online; then tier 1 (distance 1): both of 4, 1; never tier 2
    assert rule.select(s, request(key, [0, 1, 3, 4, 5], 3, 6))[1].clients.tolist() == [0, 1, 4]
    key = next(k for k in range(100) if rule.draw_tier(s, k) == 1)
    # tier 1 has 1 and 4; a third from distance 1: tiers 0 and 2 alike, the faster (0) first
    assert rule.select(s, request(key, [0, 1, 3, 4], 3, 6))[1].clients.tolist() == [0, 1, 4]


def test_unprofiled_clients_first():
    rule = Tiers(tiers=2)
    s = profiled(rule, m=8)  # 6 and 7 never asked
    picked = rule.select(s, request(1, range(8), 3, 8))[1].clients.tolist()
    assert {6, 7} <= set(picked) and len(picked) == 3
    picked = rule.select(s, request(1, [0, 5, 6, 7], 1, 8))[1].clients.tolist()
    assert picked[0] in (6, 7)


def test_credits_are_spent_then_refilled():
    rule = Tiers(tiers=2, credits=1)
    s = profiled(rule)
    assert s.credits.tolist() == [1.0, 1.0]
    t1 = rule.draw_tier(s, 1)
    picked = rule.select(s, request(1, ALL, 2, 6))[1].clients
    s = rule.observe(s, observations(1, 20.0, [done(int(c), 1.0) for c in picked]))
    assert s.credits[t1] == 0.0 and s.credits[1 - t1] == 1.0
    assert all(rule.draw_tier(s, key) == 1 - t1 for key in range(2, 30))  # only the other has credits
    picked = rule.select(s, request(2, ALL, 2, 6))[1].clients
    s = rule.observe(s, observations(2, 30.0, [done(int(c), 1.0) for c in picked]))
    assert s.credits.tolist() == [1.0, 1.0]  # both spent: all get theirs again


def test_a_pick_of_unprofiled_clients_only_spends_no_credit():
    rule = Tiers(tiers=2, credits=3)
    s = profiled(rule, m=8)
    s = rule.observe(s, observations(1, 20.0, [done(6, 1.0), done(7, 1.0)]))
    assert s.credits.tolist() == [3.0, 3.0]


def test_change_probs_is_tifls():
    # n = 3 eligible tiers, D = 6: lowest accuracy 3/6, then 2/6, then 1/6; not eligible: 0
    np.testing.assert_allclose(change_probs(np.array([0.5, 0.2, 0.9, 0.2]), np.array([True, True, True, False])),
                               [2 / 6, 3 / 6, 1 / 6, 0.0], rtol=1e-15)
    np.testing.assert_allclose(change_probs(np.array([0.3, 0.3]), np.array([True, True])), [2 / 3, 1 / 3])  # ties: by index


def test_adaptive_tiers_favour_the_tier_with_the_higher_reported_loss():
    rule = AdaptiveTiers(tiers=2, interval=2)
    s = profiled(rule)
    # tier 0 = {0, 2, 4} reported loss 1, tier 1 = {1, 3} loss 3 (5 never reported): accuracy -1, -3
    np.testing.assert_allclose(rule.tier_accuracy(s), [-1.0, -3.0])
    assert s.probs.tolist() == [0.5, 0.5]  # interval 2: nothing changes after one round
    s = rule.observe(s, observations(1, 20.0, []))
    np.testing.assert_allclose(s.probs, [1 / 3, 2 / 3], rtol=1e-15)
    static = Tiers(tiers=2, interval=2)
    s = profiled(static)
    assert static.observe(s, observations(1, 20.0, [])).probs.tolist() == [0.5, 0.5]


def test_a_tier_nobody_reported_a_loss_for_ranks_last():
    rule = AdaptiveTiers(tiers=3, interval=1)  # tier 2 = {3, 5}: 3 reported 3.0; make it unknown
    s = rule.init(6, np.full(6, 1 / 6), 0)
    rows = [done(0, 1.0, 5.0), done(1, 5.0, 1.0), done(2, 2.0, 5.0), done(3, 6.0), done(4, 3.0, 1.0), (5, "failed")]
    s = rule.observe(s, observations(0, 10.0, rows))
    np.testing.assert_allclose(rule.tier_accuracy(s), [-5.0, -1.0, np.inf])
    np.testing.assert_allclose(s.probs, [3 / 6, 2 / 6, 1 / 6], rtol=1e-15)


# -- both -------------------------------------------------------------------------------------------

RULES = [Fastest(), Tiers(), Tiers(tiers=3, credits=2), AdaptiveTiers(tiers=2, interval=3, credits=4)]


def drive(rule, seed, m=25, rounds=15, loss_noise=None):
    """Run ``rule`` on a random world; ``loss_noise`` replaces every reported loss (what a rule
    that does not read losses must not notice)."""
    g = np.random.default_rng(seed)
    speed = g.uniform(0.2, 2.0, m)
    h = np.random.default_rng(seed + 1000)
    s = rule.init(m, np.full(m, 1 / m), seed)
    picks, close = [], 0.0
    for r in range(rounds):
        req = request(r, np.flatnonzero(g.random(m) < 0.8), int(g.integers(1, 8)), m)
        s2, picked = rule.select(s, req)
        assert s2 is s  # select never changes the state
        picks.append(check_picked(picked, req, type(rule).__name__).clients.tolist())
        rows = []
        for c in picked.clients:
            u = g.random()
            loss = float(h.uniform(0, 9)) if loss_noise is not None else 1.0 + c % 3
            if u < 0.1:
                rows.append((int(c), "failed"))
            elif u < 0.2:
                rows.append((int(c), "dropped", 0.5))
            else:
                rows.append(done(int(c), 1.0 / speed[c] + u, loss, loss * loss * 4, 4))
        close += 10.0
        s = rule.observe(s, observations(r, close, rows))
    return picks, s


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_deterministic_and_valid(rule):
    assert drive(rule, 3)[0] == drive(rule, 3)[0]


@pytest.mark.parametrize("rule", [Fastest(), Tiers(), Tiers(tiers=3, credits=2)], ids=lambda r: type(r).__name__)
def test_rules_that_do_not_read_losses_ignore_them(rule):
    assert not rule.uses_losses
    assert drive(rule, 4)[0] == drive(rule, 4, loss_noise=True)[0]


def test_flags():
    assert (Fastest.uses_feedback, Fastest.uses_losses, Fastest.sync_only) == (True, False, False)
    assert (Tiers.uses_feedback, Tiers.uses_losses, Tiers.sync_only) == (True, False, True)
    assert (AdaptiveTiers.uses_feedback, AdaptiveTiers.uses_losses, AdaptiveTiers.sync_only) == (True, True, True)
