"""Participation fairness (fedsim.report.fairness) on hand tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedsim.report.fairness import FAIRNESS_METRICS, gini, heard_counts, participation_fairness


def table(rows):
    return pd.DataFrame(rows, columns=["round", "client", "status", "steps"])


def test_gini_by_hand():
    # [0, 0, 1, 3]: mean 1, sum over ordered pairs |x_i - x_j| = 2 (1 + 3 + 1 + 3 + 2) = 20 -> 20 / (2 * 16 * 1)
    assert gini(np.array([0, 0, 1, 3])) == 0.625
    assert gini(np.array([3, 0, 1, 0])) == 0.625
    assert gini(np.array([2, 2, 2])) == 0.0
    assert gini(np.array([0, 0, 0, 5])) == 0.75  # one client has everything: 1 - 1/m
    assert gini(np.array([1, 2])) == pytest.approx(1 / 6, rel=1e-15)  # |1 - 2| * 2 / (2 * 4 * 1.5)
    assert gini(np.zeros(4)) == 0.0 and gini(np.zeros(0)) == 0.0
    with pytest.raises(ValueError):
        gini(np.array([-1.0, 2.0]))


def test_participation_fairness_by_hand():
    t = table([
        (0, 0, "completed", 3), (0, 1, "dropped", 0), (0, 2, "offline", 0),
        (1, 0, "completed", 2), (1, 1, "failed", 0), (1, 3, "completed", 1),
        (2, 0, "completed", 5), (2, 3, "completed", 2), (2, 1, "completed", 0),  # steps 0: not heard
        (3, 3, "completed", 4), (3, 0, "completed", 1),
    ])
    # heard: client 0 four times, 3 three times, 1 and 2 never; m = 5 also counts client 4
    assert heard_counts(t, 5).tolist() == [4, 0, 0, 3, 0]
    f = participation_fairness(t, 5)
    assert tuple(f) == FAIRNESS_METRICS
    assert f["never_heard"] == 3 / 5
    # sorted [0, 0, 0, 3, 4]: sum (2i - 6) x_(i) = 2 * 3 + 4 * 4 = 22; / (5 * 7)
    assert f["gini_jobs"] == pytest.approx(22 / 35, rel=1e-15)


def test_nobody_heard_and_everybody_equally():
    assert participation_fairness(table([(0, 0, "failed", 0)]), 3) == {"never_heard": 1.0, "gini_jobs": 0.0}
    assert participation_fairness(table([]), 2) == {"never_heard": 1.0, "gini_jobs": 0.0}
    t = table([(r, c, "completed", 1) for r in range(3) for c in range(4)])
    assert participation_fairness(t, 4) == {"never_heard": 0.0, "gini_jobs": 0.0}


def test_categorical_status_as_load_run_may_give():
    t = table([(0, 0, "completed", 1), (0, 1, "failed", 0)])
    t["status"] = t["status"].astype("category")
    assert heard_counts(t, 2).tolist() == [1, 0]


@pytest.mark.parametrize("rows, m, message", [
    ([(0, 5, "completed", 1)], 5, "client 5 is not an id"),
    ([(0, -1, "completed", 1)], 5, "client -1 is not an id"),
    ([(0, 0, "completed", 1)], 0, "num_clients must be >= 1"),
])
def test_bad_input_is_one_line(rows, m, message):
    with pytest.raises(ValueError, match=message):
        participation_fairness(table(rows), m)
    with pytest.raises(ValueError, match="lacks column"):
        participation_fairness(pd.DataFrame({"client": [0]}), 1)
