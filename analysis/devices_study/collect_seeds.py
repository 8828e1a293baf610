"""Reduce the devices study's three-seed comparisons (issue 19 point 5) to small CSVs.

    sh analysis/devices_study/run_seeds.sh RUNS_DIR      # runs, then calls this script
    python analysis/devices_study/collect_seeds.py RUNS_DIR

RUNS_DIR holds devices_mlp/ and devices_mlp_slownet/, each a ``fedsim compare`` folder of the
scenario's variants (window, wait, async) over seeds 0, 1, 2 with ``eval.every_seconds`` set, so
every run has ``evals.csv``: its global model evaluated at the same simulated instants. Writes,
next to this file:

* ``grid_curves.csv``: scenario, variant, seed, sim_time, round, test_acc, test_loss (every grid
  row of every run);
* ``grid_summary.csv``: per scenario, variant and grid time reached by every seed of every
  variant of that scenario: the mean and standard deviation (ddof=1) of test_acc over the seeds,
  and the number of seeds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from fedsim.report.results import find_runs, read_evals  # noqa: E402

SCENARIOS = ("devices_mlp", "devices_mlp_slownet")


def curves(runs: Path) -> pd.DataFrame:
    frames = []
    for sc in SCENARIOS:
        found, _, _ = find_runs(runs / sc)
        for r in found:
            ev = read_evals(r["folder"])
            if ev is None:
                raise SystemExit(f"{r['folder']}: no evals.csv (run with --set eval.every_seconds=...)")
            frames.append(ev.assign(scenario=sc, variant=str(r["cell"]), seed=int(r["seed"])))
    df = pd.concat(frames, ignore_index=True)
    first = ["scenario", "variant", "seed"]
    return df[first + [c for c in ("sim_time", "round", "test_acc", "test_loss") if c in df.columns]]


def summary(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for sc, g in df.groupby("scenario", sort=False):
        common = g.groupby(["variant", "seed"]).sim_time.max().min()  # every run reached it
        at = g[g.sim_time <= common]
        for (v, t), h in at.groupby(["variant", "sim_time"], sort=True):
            acc = h.test_acc
            rows.append({"scenario": sc, "variant": v, "sim_time": t, "seeds": len(acc),
                         "test_acc_mean": acc.mean(), "test_acc_std": acc.std(ddof=1) if len(acc) > 1 else float("nan")})
    return pd.DataFrame(rows)


def main(runs: Path) -> None:
    df = curves(runs)
    df.to_csv(HERE / "grid_curves.csv", index=False, float_format="%.6g")
    summary(df).to_csv(HERE / "grid_summary.csv", index=False, float_format="%.6g")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
