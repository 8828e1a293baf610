"""docs/img/coupling.png: device speed against a client's mean label at coupling strength 0, 0.5, 1.

300 Synthetic(1, 1) clients, speeds lognormal (median 5, sigma 0.6), scenario seed 0; the clock is
built as a run builds it (fedsim.runner.clock.build_clock). Run: python docs/img/coupling.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from scipy.stats import spearmanr

from fedsim.clock_only import client_sizes_and_weights
from fedsim.engine.workload import dataset_for
from fedsim.runner.clock import build_clock
from fedsim.runner.coupling import data_scores
from fedsim.scenario import parse_scenario


def scenario(strength: float):
    return parse_scenario({
        "name": "coupling", "seed": 0, "rounds": 1,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 300},
        "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6},
                   "coupling": {"by": "speed", "to": "label_axis", "strength": strength}},
        "round": {"policy": "window", "window": 5.0},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
    })


def main(out: Path = Path(__file__).with_name("coupling.png")) -> list[float]:
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2), sharey=True)
    rhos = []
    for ax, strength in zip(axes, (0.0, 0.5, 1.0)):
        sc = scenario(strength)
        ds = dataset_for(sc)
        n, w = client_sizes_and_weights(sc, ds)
        speeds = build_clock(sc, n, w, data=ds).speeds
        labels = data_scores("label_axis", ds)
        rho = float(spearmanr(labels, speeds).statistic)
        rhos.append(rho)
        ax.scatter(labels, speeds, s=6, alpha=0.6)
        ax.set_yscale("log")
        ax.set_title(f"strength {strength:g}: Spearman {rho:.2f}")
        ax.set_xlabel("client's mean label")
    axes[0].set_ylabel("device speed (steps/s)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return rhos


if __name__ == "__main__":
    print(main())
