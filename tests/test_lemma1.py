"""FedNova Lemma 1 on quadratics with window-derived tau_i: exact closed-form fixed points.

F_i(x) = 1/2 ||x - e_i||^2, exact gradients. In a window W with latency L and constant speed s_i,
tau_i = floor((W - 2L) s_i). One round of tau_i GD steps gives Delta_i = K_i (e_i - x) with
K_i = 1 - (1 - lr)^tau_i, so FedAvg's fixed point is sum p_i K_i e_i / sum p_i K_i and FedNova's
uses weights p_i K_i / tau_i (docs/algorithms.md, "Aggregation").
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim import load_run
from fedsim.runner import run
from fedsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
CENTERS = np.array([[4.0, 0.0], [0.0, 4.0], [-4.0, 0.0], [0.0, -4.0]])
SPEEDS = [1.0, 2.0, 4.0, 8.0]
TAUS = np.array([9, 18, 36, 72])  # floor((10 - 2 * 0.5) * s)


def _run(tmp_path, algo, lr, rounds, weights=None):
    sets = [f"algorithm.name={algo}", f"algorithm.lr={lr}", f"rounds={rounds}", "variants=null"]
    if weights is not None:
        sets.append(f"data.weights={list(weights)}")
    sc = load_scenario(ROOT / "scenarios" / "fednova_lemma1.yaml", sets)
    out = tmp_path / f"{algo}-{lr}"
    run(sc, out, progress=False)
    return out, torch.load(out / "model.pt", weights_only=True).numpy()


def _fixed_point(lr, p, nova):
    k = 1 - (1 - lr) ** TAUS
    w = p * k / TAUS if nova else p * k
    return (w @ CENTERS) / w.sum()


@pytest.mark.parametrize("algo", ["fedavg", "fednova"])
@pytest.mark.parametrize("weights", [None, (0.1, 0.2, 0.3, 0.4)])
def test_fixed_point_closed_form(tmp_path, algo, weights):
    lr = 0.01
    p = np.full(4, 0.25) if weights is None else np.asarray(weights)
    out, x = _run(tmp_path, algo, lr, 400, weights)
    clients = load_run(out).clients
    assert clients[clients["round"] == 0]["steps"].tolist() == TAUS.tolist()
    assert set(clients["status"]) == {"completed"}
    expected = _fixed_point(lr, p, algo == "fednova")
    np.testing.assert_allclose(x, expected, rtol=1e-9, atol=1e-12)


def test_fedavg_is_inconsistent_and_fednova_approaches_optimum(tmp_path):
    p = np.full(4, 0.25)
    optimum = p @ CENTERS
    dist = {}
    for lr, rounds in [(0.05, 200), (0.005, 400)]:
        for algo in ("fedavg", "fednova"):
            out, x = _run(tmp_path, algo, lr, rounds)
            dist[algo, lr] = float(np.linalg.norm(x - optimum))
            rows = load_run(out).rounds
            assert rows["dist_to_opt"].iloc[-1] == pytest.approx(dist[algo, lr], rel=1e-9)
    # FedAvg stays far from the optimum as lr -> 0 (it minimizes sum p_i tau_i F_i instead) ...
    assert dist["fedavg", 0.005] > 1.0
    assert dist["fedavg", 0.005] > 0.8 * dist["fedavg", 0.05]
    # ... while FedNova's error shrinks roughly linearly with lr.
    assert dist["fednova", 0.005] < dist["fednova", 0.05] / 5
    assert dist["fednova", 0.005] < 0.1 * dist["fedavg", 0.005]
