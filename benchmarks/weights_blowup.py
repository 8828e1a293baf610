"""Uniform sampling's aggregation weights on 1,000 non-IID Synthetic(1, 1) clients (issue 19).

FedNova, 20 of 1,000 clients per round, one local epoch (capped at 40 steps), lr 0.02, batch 20,
``round.weights`` normalized vs unbiased, same draws. Prints per mode the range and median of the
per-round weight sum, the largest test loss and the final / lowest test accuracy, and writes
``benchmarks/results/weights_blowup.md``. Not a speed benchmark: the numbers are deterministic.

    python benchmarks/weights_blowup.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from fedsim.cli import main  # noqa: E402
from fedsim.clock.draws import select  # noqa: E402
from fedsim.scenario import parse_scenario  # noqa: E402
from fedsim.clock_only import client_sizes_and_weights  # noqa: E402


def scenario(rounds: int) -> dict:
    return {
        "name": "weights_blowup", "seed": 0, "rounds": rounds,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 1000},
        "model": {"name": "logreg"}, "system": {"speed": 1.0},
        "round": {"policy": "wait", "local_epochs": 1, "max_local_steps": 40, "clients_per_round": 20},
        "algorithm": {"name": "fednova", "lr": 0.02, "batch_size": 20},
        "variants": {"normalized": {"round.weights": "normalized"}, "unbiased": {"round.weights": "unbiased"}},
    }


def main_(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    raw = scenario(args.rounds)
    import numpy as np

    sc = parse_scenario({k: v for k, v in raw.items() if k != "variants"})
    _, p = client_sizes_and_weights(sc)
    sums = [select(np.arange(len(p)), 20, "uniform", p, sc.seed, r, "unbiased")[2].sum() for r in range(args.rounds)]
    lines = [f"# Uniform sampling weights, 1,000 Synthetic(1,1) clients, 20 per round, FedNova, {args.rounds} rounds",
             "", f"largest client share p_max = {p.max():.3f}",
             f"unbiased per-round weight sum: min {min(sums):.2f}, median {np.median(sums):.2f}, max {max(sums):.2f}",
             "", "| weights | max test_loss | final test_acc | min test_acc (round) |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump(raw))
        assert main(["run", str(path), "--out", str(Path(tmp) / "runs")]) == 0
        for v in ("normalized", "unbiased"):
            r = pd.read_csv(Path(tmp) / "runs" / v / "rounds.csv")
            i = int(r["test_acc"].idxmin())
            lines.append(f"| {v} | {r['test_loss'].max():.3g} | {r['test_acc'].iloc[-1]:.3f} | "
                         f"{r['test_acc'].min():.3f} ({int(r['round'][i])}) |")
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "benchmarks" / "results" / "weights_blowup.md").write_text(text)


if __name__ == "__main__":
    main_()
