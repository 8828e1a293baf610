"""The information boundary: a rule's picks depend only on what the server observed.

Two worlds agree on everything the server can observe during the run (who is online at each pick,
the outcome of every job it asked for) and differ in what it cannot: the devices' speeds and
availability after the run, and the speed of a client that is never online. Every rule picks the
same clients in both; rules that do not read losses also pick the same when every reported loss
differs (tests/test_selection_fastest_tiers.py)."""

from __future__ import annotations

import numpy as np
import pytest

from _selection import done, observations, request
from fedsim.selection import check_picked
from fedsim.selection.fastest import Fastest
from fedsim.selection.oort import Oort
from fedsim.selection.tiers import AdaptiveTiers, Tiers

M, ROUNDS, HORIZON = 20, 12, 30
RULES = [Oort(pacer_step=2), Fastest(), Tiers(tiers=3), AdaptiveTiers(tiers=3, interval=2, credits=2)]


def world(variant: int):
    """Speeds and availability per (round, client) over HORIZON rounds; variants differ only after
    ROUNDS and for client M - 1 (never online)."""
    g = np.random.default_rng(0)
    speed = g.uniform(0.2, 3.0, (HORIZON, M))
    online = g.random((HORIZON, M)) < 0.8
    online[:, M - 1] = False
    if variant:
        h = np.random.default_rng(variant)
        speed[ROUNDS:] = h.uniform(0.01, 100.0, (HORIZON - ROUNDS, M))
        online[ROUNDS:] = h.random((HORIZON - ROUNDS, M)) < 0.5
        speed[:, M - 1] = h.uniform(0.01, 100.0, HORIZON)
    return speed, online


def run(rule, variant: int):
    speed, online = world(variant)
    state = rule.init(M, np.full(M, 1 / M), 9)
    picks = []
    for r in range(ROUNDS):
        req = request(r, np.flatnonzero(online[r]), 4, M)
        state, picked = rule.select(state, req)
        picks.append(check_picked(picked, req, type(rule).__name__).clients.tolist())
        rows = []
        for c in picked.clients:
            d = 10.0 / speed[r, c]
            rows.append(done(int(c), d, 1.0 / speed[r, c], 4.0 / speed[r, c] ** 2, 4) if d < 20 else (int(c), "dropped"))
        state = rule.observe(state, observations(r, 20.0 * (r + 1), rows))
    return picks


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_what_the_server_cannot_observe_does_not_change_the_picks(rule):
    base = run(rule, 0)
    assert all(run(rule, v) == base for v in (1, 2))
    assert all(M - 1 not in p for p in base)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: type(r).__name__)
def test_observe_leaves_the_state_it_was_given_untouched(rule):
    import dataclasses

    state = rule.init(M, np.full(M, 1 / M), 9)
    obs = observations(0, 20.0, [done(0, 3.0, 1.0, 4.0, 4), (1, "dropped"), (2, "failed")])
    first = rule.observe(state, obs)
    before = {f.name: np.array(getattr(first, f.name), copy=True) for f in dataclasses.fields(first)}
    second = rule.observe(first, observations(1, 40.0, [done(0, 5.0, 2.0, 9.0, 4), done(3, 1.0, 1.0, 1.0, 4)]))
    assert second is not first
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(first, name), value, err_msg=name)
