"""``round.weights`` (issue 19 point 3): uniform sampling's aggregation weights.

``unbiased`` (p_i m / q) has a random per-round sum; on 1,000 non-IID Synthetic(1, 1) clients with
log-normal sizes and 20 per round FedNova (which takes the sum in twice) blows up at once.
``normalized`` (p_i / sum over the selected) sums to 1 and the same run stays finite and above
chance. The long version (20 rounds, weight-sum range): benchmarks/weights_blowup.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedsim.cli import main
from _selection import uniform_pick as select

BLOWUP = {
    "name": "blowup", "seed": 0, "rounds": 3,
    "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 1000},
    "model": {"name": "logreg"},
    "system": {"speed": 1.0},
    "round": {"policy": "wait", "local_epochs": 1, "max_local_steps": 40, "clients_per_round": 20},
    "algorithm": {"name": "fednova", "lr": 0.02, "batch_size": 20},
    "variants": {"normalized": {"round.weights": "normalized"}, "unbiased": {"round.weights": "unbiased"}},
}


def test_weight_sums_per_round():
    """normalized: sum_S w_i = 1 exactly up to rounding and w_i proportional to p_i; unbiased:
    sum_S w_i = (m / q) sum_S p_i, which with skewed p_i is far from 1 in some rounds."""
    rng = np.random.default_rng(3)
    p = rng.lognormal(0.0, 2.0, 200)
    p /= p.sum()
    online = np.arange(200)
    sums = []
    for r in range(200):
        chosen, _, w = select(online, 10, "uniform", p, 1, r)
        assert math.isclose(w.sum(), 1.0, rel_tol=1e-12)
        np.testing.assert_allclose(w, p[chosen] / p[chosen].sum(), rtol=1e-12)
        chosen_u, _, wu = select(online, 10, "uniform", p, 1, r, "unbiased")
        assert chosen_u.tolist() == chosen.tolist()
        np.testing.assert_allclose(wu, p[chosen] * 200 / 10, rtol=1e-12)
        sums.append(wu.sum())
    assert min(sums) < 0.5 and max(sums) > 2.0
    assert abs(np.mean(sums) - 1.0) < 0.3  # unbiased: the mean sum over draws is 1


def test_normalized_weights_keep_fednova_finite_on_1000_non_iid_clients(tmp_path, write_yaml):
    out = tmp_path / "runs"
    assert main(["run", str(write_yaml(BLOWUP)), "--out", str(out)]) == 0
    norm = pd.read_csv(out / "normalized" / "rounds.csv")
    unb = pd.read_csv(out / "unbiased" / "rounds.csv")
    assert np.isfinite(norm["test_loss"]).all() and norm["diverged"].eq(0).all()
    assert norm["test_loss"].max() < 3.0  # starts at ln(10) = 2.3 + a little
    assert norm["test_acc"].iloc[-1] > 0.2  # 10 classes: chance is 0.1
    # the same draws with p_i m / q: the first aggregated round multiplies the loss forty-fold
    assert unb["test_loss"].iloc[1] > 40 * norm["test_loss"].iloc[1]
    # both modes aggregate the same clients; only the weights differ
    cn, cu = (pd.read_csv(out / v / "clients.csv") for v in ("normalized", "unbiased"))
    assert cn[["round", "client", "status"]].equals(cu[["round", "client", "status"]])
    per_round = cn.groupby("round")["weight"].sum()
    np.testing.assert_allclose(per_round, 1.0, rtol=1e-12)
