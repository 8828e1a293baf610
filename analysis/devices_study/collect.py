"""Reduce the devices study's run folders to the small CSVs analysis/devices_study.ipynb reads.

    python analysis/devices_study/collect.py RUNS_DIR

RUNS_DIR holds devices_mlp/, devices_mlp_slownet/ (``fedsim run``) and devices_vgg11/
(``fedsim run --schedule-only``), each with the variants window, wait, async. Writes, next to
this file: curves.csv (evaluated rounds of the trained runs) and jobs.csv (one row per round:
jobs completed / dropped / failed, local steps, busy seconds, transfer seconds of completed jobs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
SCENARIOS = ("devices_mlp", "devices_mlp_slownet", "devices_vgg11")
VARIANTS = ("window", "wait", "async")
#: server updates per variant, as in the scenarios; rows past them are ignored
ROUNDS = {"window": 45, "wait": 20, "async": 60}


def round_jobs(clients: pd.DataFrame) -> pd.DataFrame:
    """Per round: jobs by status, steps, and (completed jobs) busy and transfer seconds."""
    c = clients.assign(busy=clients.end - clients.start, transfer=clients.download + clients.upload)
    done = c[c.status == "completed"]
    counts = c.groupby(["round", "status"]).size().unstack(fill_value=0)
    out = pd.DataFrame({s: counts.get(s, 0) for s in ("completed", "dropped", "failed")})
    out["steps"] = c.groupby("round").steps.sum()
    out["busy_s"] = done.groupby("round").busy.sum()
    out["transfer_s"] = done.groupby("round").transfer.sum()
    return out.fillna(0).reset_index()


def main(runs: Path) -> None:
    curves, jobs = [], []
    for sc in SCENARIOS:
        for v in VARIANTS:
            folder = runs / sc / v
            n = ROUNDS[v]
            r = pd.read_csv(folder / "rounds.csv").query("round < @n")
            j = round_jobs(pd.read_csv(folder / "clients.csv").query("round < @n")).merge(r[["round", "sim_time", "available"]], on="round")
            jobs.append(j.assign(scenario=sc, variant=v))
            if "test_acc" in r:
                e = r.dropna(subset=["test_acc"])[["round", "sim_time", "test_acc", "train_loss"]]
                curves.append(e.assign(scenario=sc, variant=v))
    first = ["scenario", "variant"]
    for name, frames in (("curves.csv", curves), ("jobs.csv", jobs)):
        df = pd.concat(frames, ignore_index=True)
        df[first + [c for c in df.columns if c not in first]].to_csv(HERE / name, index=False, float_format="%.6g")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
