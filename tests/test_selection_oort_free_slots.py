"""Oort's free slots (issue 38 defect 6): when too few candidates are unexplored to take the slots
eps keeps for exploration, exploitation takes them, as Oort's Algorithm 1 exploits whatever
exploration leaves: k - explore clients drawn by score from the pool cut off at that length
(Lai et al., OSDI 2021). Before, the free slots went to the best-scored clients with no draw.

The expected frequencies are computed by hand: a draw of n without replacement in proportion to
weights w (successive sampling) includes client i with probability
w_i + sum_{j != i} w_j w_i / (1 - w_j) for n = 2."""

from __future__ import annotations

import numpy as np

from _selection import done, observations, request
from fedsim.selection import check_picked
from fedsim.selection.oort import Oort

M = 30


def _explored(rule):
    """Every client heard once in round 0 with utility u = c + 1 and duration 1 (R = 1: no
    staleness bonus; equal durations: no penalty)."""
    s = rule.init(M, np.full(M, 1 / M), 0)
    return rule.observe(s, observations(0, 5.0, [done(c, 1.0, 1.0, float(c + 1) ** 2, 1) for c in range(M)]))


def test_with_nothing_to_explore_every_slot_is_drawn_by_score_from_the_longer_pool():
    rule = Oort(cut_off_util=0.5, exploration_factor=0.5, exploration_min=0.5)
    s = _explored(rule)
    plan = rule.plan(s, request(1, range(M), 2, M, np.full(M, 1 / M)))
    # eps = 0.5: Oort's exploit length 2 - int(2 x 0.5) = 1, cut at the second best (u = 28 clipped):
    # 0.5 x 27.001 / 29.001 -> u >= 15: 16 clients (FedScale's exploitLen and pool)
    assert (plan.exploit_len, plan.pool_len) == (1, 16)
    # nobody to explore: both slots drawn by score, the pool cut at length 2: at least 10 x 2 + 1 = 21
    assert plan.explore_len == 0 and (plan.draw_len, plan.draw_pool_len) == (2, 21)
    # scores (min(u, 28) - 0.999) / 29.001 over the pool u = 10..30 (clients 9..29)
    u = np.arange(10, 31, dtype=np.float64)
    w = np.minimum(u, 28) - 0.999
    w = w / w.sum()
    expect = np.array([w[i] + sum(w[j] * w[i] / (1 - w[j]) for j in range(len(w)) if j != i) for i in range(len(w))])
    n = 3000
    seen = np.zeros(M)
    for key in range(1, n + 1):
        req = request(key, range(M), 2, M, np.full(M, 1 / M))
        state, picked = rule.select(s, req)
        assert state is s
        seen[check_picked(picked, req, "oort").clients] += 1
    freq = seen / n
    assert freq[:9].sum() == 0  # outside the pool: never
    assert np.abs(freq[9:] - expect).max() < 0.03, np.round(freq[9:] - expect, 3)
    assert freq[9:14].min() > 0.02  # clients 9..13 lie beyond Oort's own 16 but in the pool of 21


def test_too_few_unexplored_leave_their_slots_to_the_draw():
    rule = Oort(exploration_factor=0.5, exploration_min=0.5)
    m = M + 2  # two clients never heard of
    s = rule.init(m, np.full(m, 1 / m), 0)
    s = rule.observe(s, observations(0, 5.0, [done(c, 1.0, 1.0, float(c + 1) ** 2, 1) for c in range(M)]))
    req = request(1, range(m), 6, m, np.full(m, 1 / m))
    plan = rule.plan(s, req)
    # exploit 6 - 3 = 3, explore min(2, 6 - 3) = 2, so 6 - 2 = 4 are drawn by score
    assert (plan.exploit_len, plan.explore_len, plan.draw_len) == (3, 2, 4)
    assert sorted(plan.unexplored.tolist()) == [30, 31] and plan.explore_pool_len == 2
    picked = check_picked(rule.select(s, req)[1], req, "oort").clients.tolist()
    assert len(picked) == 6 and {30, 31} <= set(picked)


def test_with_enough_to_explore_the_draw_is_oorts_exploitation():
    rule = Oort(exploration_factor=0.5, exploration_min=0.5)
    m = M + 10
    s = rule.init(m, np.full(m, 1 / m), 0)
    s = rule.observe(s, observations(0, 5.0, [done(c, 1.0, 1.0, float(c + 1) ** 2, 1) for c in range(M)]))
    plan = rule.plan(s, request(1, range(m), 6, m, np.full(m, 1 / m)))
    assert (plan.draw_len, plan.draw_pool_len) == (plan.exploit_len, plan.pool_len) == (3, M)
    assert plan.explore_len == 3
