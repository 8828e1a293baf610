"""Reading runs and comparisons: ``load_compare``, per-run and per-cell tables, completeness.

Everything here only reads run folders (``rounds.csv``, ``clients.csv``, ``scenario.yaml``,
``model.pt``) and a comparison's ``compare.yaml``; :func:`summarize` also writes the two tables it
computes (``runs.csv``, ``summary.csv``). Nothing here runs training: ``fedsim compare``
(fedsim/compare/) plans and runs the grid and uses these functions for its tables.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import yaml

from ..atomic import AtomicFile
from .parquet import has_table, read_table
from .fairness import FAIRNESS_METRICS, participation_fairness
from .summary import SUMMARY_METRICS, aggregate_seeds, run_summary

#: libyaml's safe loader when PyYAML was built with it (same values as ``yaml.safe_load``), else the Python one
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

__all__ = [
    "MANIFEST",
    "read_evals",
    "read_client_evals",
    "read_manifest",
    "format_value",
    "run_complete",
    "find_runs",
    "load_compare",
    "summarize",
    "load_summary",
    "format_summary",
]

#: The file a comparison folder describes itself in (written by ``fedsim compare``).
MANIFEST = "compare.yaml"


def read_manifest(path: str | Path) -> dict | None:
    """The ``compare.yaml`` of comparison folder ``path``; None when there is none."""
    p = Path(path) / MANIFEST
    if not p.is_file():
        return None
    return yaml.safe_load(p.read_text())


def format_value(v: Any) -> str:
    """A grid value as text for cell names and table cells: floats by ``repr``, lists as ``[a,b]``."""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{format_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def run_complete(folder: str | Path, scenario_text: str | None = None) -> bool:
    """True when ``folder`` holds a finished run (whose ``scenario.yaml`` is ``scenario_text``, if given).

    Finished: ``model.pt`` exists and the last row of ``rounds.csv`` (or ``rounds.parquet/``) is the final round
    (``rounds - 1`` of its ``scenario.yaml``) or a divergence (a diverged run is a result too).
    """
    f = Path(folder)
    if not (f / "model.pt").is_file() or not has_table(f, "rounds"):
        return False
    try:
        text = (f / "scenario.yaml").read_text()
    except OSError:
        return False
    if scenario_text is not None and text != scenario_text:
        return False
    try:
        sc = yaml.safe_load(text)
        df = read_table(f, "rounds")
    except Exception:  # noqa: BLE001 - anything unreadable is simply not complete
        return False
    return _complete(sc, df)


def _complete(sc: Any, df: pd.DataFrame) -> bool:
    """:func:`run_complete` from the run's parsed ``scenario.yaml`` and its rounds table."""
    try:
        rounds_total = int(sc["rounds"])
    except Exception:  # noqa: BLE001 - anything unreadable is simply not complete
        return False
    if df.empty:
        return False
    last = df.iloc[-1]
    diverged = str(last.get("diverged", "0")).strip() in ("1", "1.0", "True")
    return bool(int(last["round"]) == rounds_total - 1 or diverged)


def _scenario_keys(folder: Path) -> dict:
    try:
        sc = yaml.safe_load((folder / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        sc = {}
    return {
        "algorithm": (sc.get("algorithm") or {}).get("name"),
        "policy": (sc.get("round") or {}).get("policy"),
        "seed": sc.get("seed"),
    }


def find_runs(path: str | Path) -> tuple[list[dict], list[str], float | None]:
    """The runs under ``path``: ``([{cell, seed, folder, keys}], key columns, target)``.

    ``path`` is a comparison folder (read through its ``compare.yaml``), a single run folder, or
    any folder holding run folders (found recursively; a run folder named ``seed<k>`` belongs to
    the cell named by its parent folder).
    """
    p = Path(path)
    man = read_manifest(p)
    if man is not None:
        runs = [
            {"cell": r["cell"], "seed": r["seed"], "folder": p / r["folder"], "keys": dict(r.get("keys") or {})}
            for r in man.get("runs", [])
        ]
        return runs, list(man.get("keys") or []), man.get("target")
    if has_table(p, "rounds"):
        folders = [p]
    else:
        found = [f for f in p.rglob("rounds.csv") if f.is_file()] + [f for f in p.rglob("rounds.parquet") if f.is_dir()]
        folders = sorted({f.parent for f in found})
    runs = []
    for f in folders:
        info = _scenario_keys(f)
        rel = f.relative_to(p) if f != p else Path(f.resolve().name)
        if re.fullmatch(r"seed\d+", rel.name) and rel.parent != Path("."):
            cell = str(rel.parent)
        elif re.fullmatch(r"seed\d+", rel.name):
            cell = Path(p.resolve()).name
        else:
            cell = str(rel)
        runs.append({"cell": cell, "seed": info["seed"], "folder": f,
                     "keys": {"algorithm": info["algorithm"], "policy": info["policy"]}})
    return runs, ["algorithm", "policy"], None


def _keys_frame(run: dict, keys: list[str]) -> dict:
    d = {"cell": run["cell"]}
    for k in keys:
        v = run["keys"].get(k)
        d[k] = format_value(v) if isinstance(v, (list, dict)) else v
    d["seed"] = run["seed"]
    return d


def _optional_table(folder: str | Path, name: str) -> pd.DataFrame | None:
    """A run folder's optional table ``name``; None when it has none or no row."""
    path = Path(folder) / name
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return df if len(df) else None


def read_evals(folder: str | Path) -> pd.DataFrame | None:
    """A run folder's ``evals.csv`` (``eval.every_seconds``); None when it has none or no row."""
    return _optional_table(folder, "evals.csv")


def read_client_evals(folder: str | Path) -> pd.DataFrame | None:
    """A run folder's ``client_evals.csv`` (``eval.per_client``); None when it has none or no row."""
    return _optional_table(folder, "client_evals.csv")


def load_compare(path: str | Path, table: str = "rounds") -> pd.DataFrame:
    """A tidy long DataFrame of every run under ``path``: one row per run x round.

    Columns: ``cell``, the cell's keys (``algorithm``, ``policy``, any grid key such as
    ``algorithm.lr``), ``seed``, then the run's ``rounds.csv`` columns and ``folder``.
    ``table="clients"`` gives ``clients.csv`` instead (one row per run x round x client). Either
    format is read (:func:`fedsim.report.parquet.read_table`). ``table="evals"``: ``evals.csv``
    (the time grid, one row per run x grid time), for the runs that have one;
    ``table="client_evals"``: ``client_evals.csv`` (one row per run x evaluation x group).
    Runs without that table yet (not started) are left out.
    """
    if table not in ("rounds", "clients", "evals", "client_evals"):
        raise ValueError("table must be 'rounds', 'clients', 'evals' or 'client_evals'")
    runs, keys, _ = find_runs(path)
    frames = []
    for r in runs:
        if table in ("evals", "client_evals"):
            df = (read_evals if table == "evals" else read_client_evals)(r["folder"])
            if df is None:
                continue
        else:
            if not has_table(r["folder"], table):
                continue
            try:
                df = read_table(r["folder"], table)
            except pd.errors.EmptyDataError:
                continue
        meta = _keys_frame(r, keys)
        for i, (k, v) in enumerate(meta.items()):
            df.insert(i, k, [v] * len(df))
        df["folder"] = str(r["folder"])
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["cell", *keys, "seed"])
    return pd.concat(frames, ignore_index=True)


def summarize(path: str | Path, target: float | None = None, *, write: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-run (``runs.csv``) and per-cell (``summary.csv``) tables of the runs under ``path``.

    ``target`` defaults to the one recorded in ``compare.yaml``. With ``write`` both tables are
    written into ``path`` (each replaced atomically).
    """
    p = Path(path)
    runs, keys, recorded = find_runs(p)
    if target is None:
        target = recorded
    rows = []
    for r in runs:
        if not has_table(r["folder"], "rounds"):
            continue
        try:
            rounds = read_table(r["folder"], "rounds")
        except pd.errors.EmptyDataError:
            continue
        row = _keys_frame(r, keys)
        row["target"] = float("nan") if target is None else float(target)
        row.update(run_summary(rounds, target, read_evals(r["folder"])))
        sc = _parsed_scenario(r["folder"])  # read once: the fairness's clients and the completeness's rounds
        row.update(_fairness(r["folder"], sc))
        f = Path(r["folder"])
        row["complete"] = int((f / "model.pt").is_file() and not isinstance(sc, BaseException) and _complete(sc, rounds))
        row["folder"] = str(Path(r["folder"]).relative_to(p)) if Path(r["folder"]).is_relative_to(p) else str(r["folder"])
        rows.append(row)
    runs_df = pd.DataFrame(rows)
    if runs_df.empty:
        return runs_df, pd.DataFrame()
    group = ["cell", *keys]
    metrics = [m for m in SUMMARY_METRICS if m != "diverged"] + list(FAIRNESS_METRICS) + ["diverged"]
    # grid values may be lists/dicts (formatted as text): group on them as given
    summary = aggregate_seeds(runs_df, group, metrics)
    summary.insert(len(group), "target", runs_df["target"].iloc[0])
    if write:
        _write_csv(runs_df, p / "runs.csv")
        _write_csv(summary, p / "summary.csv")
    return runs_df, summary


def run_fairness(folder: str | Path) -> dict[str, float]:
    """Participation fairness of one run folder (:func:`fedsim.report.fairness.participation_fairness`)
    over all its clients: ``data.clients`` of its resolved ``scenario.yaml`` (at least every client
    its ``clients`` table names); NaN without a clients table."""
    return _fairness(folder, _parsed_scenario(folder))


def _parsed_scenario(folder: str | Path) -> Any:
    """The run's ``scenario.yaml`` parsed, or the error reading or parsing it raised. Parsed by
    libyaml when PyYAML has it (the same safe constructor builds the values; the pure-Python
    scanner took most of a 24-run summary's time)."""
    try:
        return yaml.load((Path(folder) / "scenario.yaml").read_text(), Loader=_SAFE_LOADER)
    except Exception as err:  # noqa: BLE001 - each reader decides what an unreadable file means
        return err


def _fairness(folder: str | Path, sc: Any) -> dict[str, float]:
    """:func:`run_fairness` with the run's parsed ``scenario.yaml`` (:func:`_parsed_scenario`)."""
    if not has_table(folder, "clients"):
        return {k: float("nan") for k in FAIRNESS_METRICS}
    clients = read_table(folder, "clients")
    m = int(clients["client"].max()) + 1 if len(clients) else 1
    if isinstance(sc, (OSError, yaml.YAMLError)):
        return participation_fairness(clients, m)
    if isinstance(sc, BaseException):  # as before: any other error reading the file is raised
        raise sc
    try:
        declared = sc["data"]["clients"]
        if isinstance(declared, int) and not isinstance(declared, bool):
            m = max(m, declared)
    except (KeyError, TypeError):
        pass
    return participation_fairness(clients, m)


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    with AtomicFile(path) as f:
        f.write(df.to_csv(index=False).encode())


def load_summary(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, summary)`` of a comparison folder: its ``runs.csv`` and ``summary.csv``."""
    p = Path(path)
    return pd.read_csv(p / "runs.csv"), pd.read_csv(p / "summary.csv")


def format_summary(summary: pd.DataFrame, keys: Sequence[str] | None = None) -> str:
    """A short, aligned text table of ``summary.csv`` for the terminal."""
    if summary.empty:
        return "(no finished runs)"
    keys = list(keys) if keys is not None else [c for c in summary.columns if c not in ("cell", "target", "seeds", "reached") and not c.endswith(("_mean", "_std"))]
    def present(m):
        return f"{m}_mean" in summary and summary[f"{m}_mean"].notna().any()

    has_tgt = "target" in summary and summary["target"].notna().any() and present("final_acc")

    shown = [(m, p) for m, p in (("final_acc", 3), ("best_acc", 3), ("final_loss", 3)) if present(m)]
    if not present("final_loss") and present("final_train_loss"):
        shown.append(("final_train_loss", 4))
    if present("dist_to_opt"):
        shown.append(("dist_to_opt", 4))
    shown += [("sim_time", 1), ("rounds", 0)]
    head = [*keys, "seeds", *(m for m, _ in shown)]
    if has_tgt:
        head += [f"t_to_{summary['target'].iloc[0]:g}", "reached"]
    lines = [head]

    def pm(row, m, prec):
        mu, sd = row.get(f"{m}_mean"), row.get(f"{m}_std")
        if mu is None or (isinstance(mu, float) and math.isnan(mu)):
            return "-"
        s = f"{mu:.{prec}f}"
        if sd is not None and not (isinstance(sd, float) and math.isnan(sd)) and sd > 0:
            s += f"±{sd:.{prec}f}"
        return s

    for _, row in summary.iterrows():
        line = [str(row[k]) for k in keys] + [str(row["seeds"])]
        line += [pm(row, m, prec) for m, prec in shown]
        if has_tgt:
            line += [pm(row, "time_to_target", 1), f"{row['reached']}/{row['seeds']}"]
        lines.append(line)
    widths = [max(len(l[i]) for l in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(l, widths)).rstrip() for l in lines)
