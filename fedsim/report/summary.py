"""Per-run and per-cell summaries: time-to-target, final and best accuracy, spread over seeds.

A run's ``rounds.csv`` has one row per round; evaluation rows carry ``test_acc`` / ``test_loss``
(rows between evaluations leave them empty when ``eval.every > 1``). Everything here works on
those DataFrames, so it is equally usable on hand-made tables in tests and notebooks.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "time_to_target",
    "rounds_to_target",
    "run_summary",
    "aggregate_seeds",
    "SUMMARY_METRICS",
]

#: The per-run numbers a comparison reports, in column order.
SUMMARY_METRICS = [
    "final_acc", "best_acc", "final_loss", "final_train_loss", "sim_time", "rounds",
    "time_to_target", "rounds_to_target", "diverged",
]


def _evaluated(rounds: pd.DataFrame, metric: str, x: str) -> tuple[np.ndarray, np.ndarray]:
    if metric not in rounds.columns or x not in rounds.columns:
        return np.empty(0), np.empty(0)
    df = rounds[[x, metric]].apply(pd.to_numeric, errors="coerce").dropna()
    return df[x].to_numpy(dtype=float), df[metric].to_numpy(dtype=float)


def time_to_target(
    rounds: pd.DataFrame,
    target: float,
    *,
    metric: str = "test_acc",
    x: str = "sim_time",
    higher_is_better: bool = True,
    interpolate: bool = True,
) -> float:
    """First simulated time at which ``metric`` reaches ``target``; NaN when it never does.

    Only rows with a value for ``metric`` count (rows between evaluations are skipped). Between
    the last evaluation below the target and the first one at or above it, the crossing time is
    linearly interpolated; an evaluation that hits the target exactly returns its own time, and
    when the very first evaluation already reaches it, that evaluation's time is returned (there
    is nothing earlier to interpolate from). ``higher_is_better=False`` asks for the first time
    the metric drops to ``target`` or below (a loss target). ``interpolate=False`` returns the
    first evaluation's time that reaches it (an ``evals.csv`` time grid: a time the run was seen at).
    """
    t, v = _evaluated(rounds, metric, x)
    if v.size == 0 or target is None or (isinstance(target, float) and math.isnan(target)):
        return float("nan")
    sign = 1.0 if higher_is_better else -1.0
    reached = np.flatnonzero(sign * v >= sign * target)
    if reached.size == 0:
        return float("nan")
    i = int(reached[0])
    if i == 0 or v[i] == target or not interpolate:
        return float(t[i])
    t0, t1, v0, v1 = t[i - 1], t[i], v[i - 1], v[i]
    return float(t0 + (target - v0) / (v1 - v0) * (t1 - t0))


def rounds_to_target(
    rounds: pd.DataFrame, target: float, *, metric: str = "test_acc", higher_is_better: bool = True
) -> float:
    """Number of rounds (``round + 1``) done at the first evaluation reaching ``target``; NaN if never.

    Not interpolated: a round is a whole unit of communication.
    """
    r, v = _evaluated(rounds, metric, "round")
    if v.size == 0 or target is None:
        return float("nan")
    sign = 1.0 if higher_is_better else -1.0
    reached = np.flatnonzero(sign * v >= sign * target)
    return float(r[reached[0]] + 1) if reached.size else float("nan")


def _last(rounds: pd.DataFrame, col: str) -> float:
    if col not in rounds.columns:
        return float("nan")
    s = pd.to_numeric(rounds[col], errors="coerce").dropna()
    return float(s.iloc[-1]) if len(s) else float("nan")


def _best(rounds: pd.DataFrame, col: str) -> float:
    if col not in rounds.columns:
        return float("nan")
    s = pd.to_numeric(rounds[col], errors="coerce").dropna()
    return float(s.max()) if len(s) else float("nan")


def run_summary(rounds: pd.DataFrame, target: float | None = None, evals: pd.DataFrame | None = None) -> dict:
    """The headline numbers of one run (its ``rounds.csv``, and its ``evals.csv`` when it has one).

    Keys: ``final_acc`` / ``final_loss`` / ``final_train_loss`` (last evaluated values),
    ``best_acc``, ``sim_time`` (simulated seconds at the last round), ``rounds`` (rounds done),
    ``time_to_target`` / ``rounds_to_target`` (NaN when never reached or no target), ``diverged``
    (1 if the run stopped on non-finite parameters), plus ``dist_to_opt`` for quadratic runs.
    With ``evals`` (the time grid, ``eval.every_seconds``) the accuracy and loss numbers come
    from the grid: ``final_*`` at the last grid time, ``best_acc`` over the grid, and
    ``time_to_target`` the first grid time that reaches the target (not interpolated).
    """
    tgt = float("nan") if target is None else float(target)
    timed = rounds if evals is None or not len(evals) else evals
    out = {
        "final_acc": _last(timed, "test_acc"),
        "best_acc": _best(timed, "test_acc"),
        "final_loss": _last(timed, "test_loss"),
        "final_train_loss": _last(timed, "train_loss"),
        "sim_time": _last(rounds, "sim_time"),
        "rounds": int(len(rounds)),
        "time_to_target": time_to_target(timed, tgt, interpolate=timed is rounds),
        "rounds_to_target": rounds_to_target(rounds, tgt),
        "diverged": int(bool(pd.to_numeric(rounds.get("diverged", pd.Series(dtype=float)), errors="coerce").fillna(0).any())),
    }
    if "dist_to_opt" in rounds.columns:
        out["dist_to_opt"] = _last(rounds, "dist_to_opt")
    return out


def aggregate_seeds(runs: pd.DataFrame, keys: Sequence[str], metrics: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per cell (``keys``): ``seeds``, ``reached`` and ``<metric>_mean`` / ``<metric>_std``.

    ``runs`` has one row per (cell, seed). Means and standard deviations (ddof=1; NaN for a single
    seed) skip missing values, so ``time_to_target_mean`` is the mean over the seeds that reached
    the target and ``reached`` says how many did (``reached / seeds``).
    """
    metrics = [m for m in (metrics or SUMMARY_METRICS) if m in runs.columns]
    if "dist_to_opt" in runs.columns and "dist_to_opt" not in metrics:
        metrics.append("dist_to_opt")
    rows = []
    for key, g in runs.groupby(list(keys), sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        row["seeds"] = int(len(g))
        row["reached"] = int(g["time_to_target"].notna().sum()) if "time_to_target" in g else 0
        for m in metrics:
            vals = pd.to_numeric(g[m], errors="coerce")
            row[f"{m}_mean"] = float(vals.mean()) if vals.notna().any() else float("nan")
            row[f"{m}_std"] = float(vals.std(ddof=1)) if vals.notna().sum() > 1 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)
