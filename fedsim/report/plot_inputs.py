"""What ``fedsim plot`` reads from run folders: the tables its figures draw (:mod:`.plots` draws them).

:func:`collect` reads every run under some folders into long tables, :func:`cell_runs` the tables
of each cell's first run (clients, rounds, partition, the transfer latency of its timeline),
:func:`target_times` computes the times to a target accuracy. Nothing here draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pandas as pd

from ..errors import ScenarioError
from .parquet import has_table, read_table
from .summary import time_to_target

__all__ = ["PlotInputs", "CellRun", "collect", "cell_runs", "target_times", "read_latency"]


@dataclass(frozen=True)
class PlotInputs:
    """Every run under the folders given to ``fedsim plot``.

    Attributes:
        rounds: The long rounds table (``load_compare``), cells prefixed by their folder's name
            when there are several folders.
        timed: The long table against time: each run's ``evals.csv`` (its time grid,
            ``eval.every_seconds``) when it has one, else its rounds; column ``grid`` 1 or 0.
        runs: One record per run (``cell``, ``seed``, ``folder``, ...; ``find_runs``).
        target: The target accuracy ``fedsim compare`` recorded (the first one found), or None.
        client_evals: The long ``client_evals.csv`` table (``eval.per_client``) of the runs that
            have one (empty when none).
    """

    rounds: pd.DataFrame
    timed: pd.DataFrame
    runs: list[dict]
    target: float | None
    client_evals: pd.DataFrame = None


@dataclass(frozen=True)
class CellRun:
    """The tables of one cell's first run that has a clients table."""

    cell: str
    seed: int
    folder: Path
    clients: pd.DataFrame
    rounds: pd.DataFrame
    latency: float  # system.latency: seconds per transfer, for the client timeline
    partition: pd.DataFrame | None  # partition.csv, when the data are partitioned


def collect(paths: Sequence[str | Path]) -> PlotInputs:
    """The rounds, time and run tables over all ``paths``; labels prefixed when several."""
    from .results import find_runs, load_compare

    frames, timed, runs, target, per_client = [], [], [], None, []
    for p in paths:
        df = load_compare(p)
        ev = load_compare(p, "evals")
        ce = load_compare(p, "client_evals")
        found, _, tgt = find_runs(p)
        target = target if target is not None else tgt
        prefix = f"{Path(p).resolve().name}:" if len(paths) > 1 else ""
        if len(df):
            df = df.assign(cell=prefix + df["cell"].astype(str))
            frames.append(df)
            gridded = set(ev["folder"]) if len(ev) else set()
            timed.append(df[~df["folder"].isin(gridded)].assign(grid=0))
            if len(ev):
                timed.append(ev.assign(cell=prefix + ev["cell"].astype(str), grid=1))
            if len(ce):
                per_client.append(ce.assign(cell=prefix + ce["cell"].astype(str)))
        for r in found:
            runs.append({**r, "cell": prefix + str(r["cell"])})
    rounds = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    timed_df = pd.concat(timed, ignore_index=True) if timed else pd.DataFrame()
    client_df = pd.concat(per_client, ignore_index=True) if per_client else pd.DataFrame()
    return PlotInputs(rounds, timed_df, runs, target, client_df)


def target_times(timed: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per (cell, seed): the first time ``test_acc`` reaches ``target``: the first grid time for
    runs with a time grid, interpolated between evaluations otherwise."""
    rows = []
    keys = ["cell", "seed"] if "seed" in timed.columns else ["cell"]
    for key, g in timed.groupby(keys + ["folder"], sort=False, dropna=False):
        rows.append({"cell": key[0], "seed": key[1] if len(keys) > 1 else 0,
                     "time_to_target": time_to_target(g.sort_values("sim_time"), target,
                                                      interpolate=not bool(g["grid"].iloc[0]))})
    return pd.DataFrame(rows)


def cell_runs(runs: list[dict]) -> Iterator[CellRun]:
    """Each cell's first run with a clients table, read (a run whose tables are empty is skipped)."""
    first: dict[str, dict] = {}
    for r in runs:
        if r["cell"] not in first and has_table(r["folder"], "clients"):
            first[r["cell"]] = r
    for cell, r in first.items():
        folder = Path(r["folder"])
        try:
            clients = read_table(folder, "clients")
            rounds = read_table(folder, "rounds")
        except pd.errors.EmptyDataError:
            continue
        part = pd.read_csv(folder / "partition.csv") if (folder / "partition.csv").is_file() else None
        yield CellRun(cell, r["seed"], folder, clients, rounds, read_latency(folder), part)


def read_latency(folder: str | Path) -> float:
    """``system.latency`` of the run in ``folder`` (its resolved ``scenario.yaml``).

    Raises:
        ScenarioError: one line naming the file when it cannot be read, or holds no finite
            ``system.latency`` >= 0 (a run folder's resolved scenario always has one).
    """
    import yaml

    path = Path(folder) / "scenario.yaml"
    try:
        sc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ScenarioError(f"{path}: cannot read the run's scenario ({type(err).__name__})") from None
    system = sc.get("system") if isinstance(sc, dict) else None
    value = system.get("latency") if isinstance(system, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ScenarioError(f"{path}: system.latency must be a finite number >= 0, got {repr(value)[:60]}")
    return float(value)
