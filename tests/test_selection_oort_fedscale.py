"""fedsim's Oort against FedScale's own selector, on the histories of tests/fixtures/oort_fedscale.

FedScale's selector (``thirdparty/oort/oort.py``, commit in the fixture) was driven on synthetic
histories and its decisions recorded (README.md there). Its random draws use numpy's global
generator and fedsim's keyed streams, so the picks themselves differ; everything before the draws
must agree: eps, the pacer's percentile and preferred duration T, the blacklist, the exploitation
pool (clients in order, with their normalised scores) and how many are drawn from it, the
exploration pool (with its normalised p_i) and its size, and the pacer's utility history.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _selection import observations, request
from fedsim.selection import check_picked
from fedsim.selection.oort import Oort

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "oort_fedscale" / "reference.json").read_text())
SCENARIOS = FIXTURE["scenarios"]


def _rows(rows):
    return [tuple(float("nan") if v is None else v for v in row) for row in rows]


def _replay(name):
    """Yield (round record, our plan or None, our state before the pick) along the scenario."""
    sc = SCENARIOS[name]
    m, p = sc["m"], np.array(sc["p"])
    rule = Oort(**sc["keys"])
    state = rule.init(m, p, seed=0)
    for rd in sc["rounds"]:
        req = request(rd["round"], rd["online"], rd["k"], m, p)
        plan = rule.plan(state, req) if rd["round"] >= 1 else None
        yield rd, plan, state
        if "fedscale_error" in rd:
            return
        state, picked = rule.select(state, req)
        check_picked(picked, req, "oort")
        state = rule.observe(state, observations(rd["round"], rd["close"], _rows(rd["rows"])))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_deterministic_decision_equals_fedscales(name):
    compared = exploit_compared = explore_compared = 0
    for rd, plan, state in _replay(name):
        f = rd.get("fedscale")
        if plan is None or f is None:
            continue
        compared += 1
        where = f"{name} round {rd['round']}"
        assert plan.exploration == f["exploration"], where
        assert state.threshold == f["threshold"], where
        assert plan.preferred_duration == f["preferred_duration"], where
        assert plan.blacklist.tolist() == f["blacklist"], where
        exploit, *explore = f["choices"]
        assert plan.exploit_len == exploit["size"], where
        if not f["unexplored_online"]:  # FedScale also normalises over the unexplored clients' priors
            pool = plan.scored[: plan.pool_len]
            assert pool.tolist() == exploit["a"], where
            np.testing.assert_allclose(plan.scores[: plan.pool_len] / plan.scores[: plan.pool_len].sum(), exploit["p"],
                                       rtol=1e-12, err_msg=where)
            exploit_compared += 1
        if explore:
            (e,) = explore
            assert plan.explore_len == e["size"], where
            epool = plan.unexplored[: plan.explore_pool_len]
            assert epool.tolist() == e["a"], where
            np.testing.assert_allclose(state.p[epool] / state.p[epool].sum(), e["p"], rtol=1e-12, err_msg=where)
            explore_compared += 1
        else:
            assert plan.explore_len == 0 and not f["unexplored_online"], where
        if name != "explore":  # there FedScale re-runs stale exploration picks (docs/selection.md)
            assert state.history[-1] == pytest.approx(f["exploit_utility"], rel=1e-12, abs=1e-300), where
    assert compared >= 20 and exploit_compared >= 10
    if name == "explore":
        assert explore_compared >= 8


def test_the_scenarios_cover_what_they_are_for():
    pacer = [rd["fedscale"]["threshold"] for rd in SCENARIOS["pacer"]["rounds"] if rd.get("fedscale")]
    assert max(np.diff(pacer)) == 5.0 and min(np.diff(pacer)) == -5.0  # the pacer moved both ways
    black = [len(rd["fedscale"]["blacklist"]) for rd in SCENARIOS["blacklist"]["rounds"] if rd.get("fedscale")]
    assert max(black) >= 10
    # FedScale's blacklist cap slices a list by a float: it fails once the cap is exceeded
    assert SCENARIOS["blacklist"]["rounds"][-1]["fedscale_error"].startswith("TypeError")
    assert all(rd["fedscale"]["preferred_duration"] == float("inf") for rd in SCENARIOS["explore"]["rounds"][1:])


def test_where_fedscale_fails_ours_caps_the_blacklist():
    *_, (rd, plan, state) = _replay("blacklist")
    assert "fedscale_error" in rd
    over = np.flatnonzero(state.count > 3)
    assert len(over) > 12 and len(plan.blacklist) == 12  # floor(0.3 x 40)
    most = over[np.lexsort((over, -state.count[over]))][:12]
    assert plan.blacklist.tolist() == sorted(most.tolist())
