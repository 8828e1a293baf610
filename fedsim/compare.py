"""``fedsim compare``: a grid of runs over algorithms, round policies, settings and seeds.

Every cell of the grid is the base scenario with a few dotted keys changed (``algorithm.name``,
``round.policy``, any ``--grid`` key); every seed sets ``seed``. The clock draws its randomness
from streams keyed by (seed, purpose, client, round) only (purposes speed, slowdown, work, select,
availability), so all cells of one seed see the *same* system trace:
differences between cells are the algorithm's and the policy's alone. Nothing else is changed, in
particular no system key unless a ``--grid`` names it.

Policies that need different settings (``wait`` prescribes ``round.local_steps``, which under
``window`` would also cap tau_i) are best given as the base scenario's ``variants``: each variant
is one more axis value, e.g. ``wait: {round.policy: wait, round.local_steps: 20}``. ``--policies``
only sets ``round.policy``, so the base scenario must then carry every policy's keys
(``round.window``, ``round.deadline``, ``round.local_steps``). Combinations of an asynchronous
algorithm with a synchronous policy (or the reverse) are skipped with a note.

Folder layout (``--out DIR``)::

    DIR/compare.yaml              what was asked: base scenario, axes, seeds, target, one entry per run
    DIR/<cell>/seed<k>/           one ordinary run folder per (cell, seed)
    DIR/runs.csv                  one row per (cell, seed): cell keys, seed, metrics, folder
    DIR/summary.csv               one row per cell: keys, seeds, reached, <metric>_mean, <metric>_std

A cell whose folder already holds a complete run of the same resolved scenario (``scenario.yaml``
identical, ``rounds.csv`` ends with the final round or a divergence, ``model.pt`` present) is not
run again, so an interrupted comparison resumes where it stopped and a new ``--target`` only
recomputes the tables. Cells run in parallel local processes (``--jobs``, spawn start method).
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import yaml

from .report.summary import SUMMARY_METRICS, aggregate_seeds, run_summary
from .scenario import Scenario, ScenarioError, _deepcopy, apply_overrides, dump_scenario, parse_scenario, read_yaml
from .validate import check_names, check_target, parse_seeds

__all__ = [
    "Cell",
    "CompareRun",
    "CompareResult",
    "parse_grid",
    "split_values",
    "plan_compare",
    "run_compare",
    "is_complete",
    "summarize",
    "load_compare",
    "load_summary",
    "find_runs",
]

MANIFEST = "compare.yaml"


# --------------------------------------------------------------------------- grid
@dataclass(frozen=True)
class Cell:
    """One point of the grid: ``keys`` (column -> value) and the dotted overrides that make it."""

    name: str
    keys: dict
    overrides: dict


@dataclass(frozen=True)
class CompareRun:
    """One (cell, seed): its folder and its validated scenario."""

    cell: Cell
    seed: int
    folder: Path
    scenario: Scenario

    @property
    def label(self) -> str:
        return f"{self.cell.name} seed {self.seed}"


def split_values(text: str) -> list[str]:
    """Split ``a,b,[1,2]`` at top-level commas (commas inside brackets or braces stay)."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [v for v in out if v != ""]


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_grid(items: Sequence[str]) -> dict[str, list]:
    """``["algorithm.lr=0.01,0.05", ...]`` -> ``{"algorithm.lr": [0.01, 0.05]}`` (values parsed as YAML)."""
    grid: dict[str, list] = {}
    for item in items:
        if "=" not in item:
            raise ScenarioError(f"--grid {item}: expected dotted.key=v1,v2,...")
        key, values = item.split("=", 1)
        key = key.strip()
        if not key or not all(key.split(".")):
            raise ScenarioError(f"--grid {item}: empty key")
        vals = [_yaml_value(v) for v in split_values(values)]
        if not vals:
            raise ScenarioError(f"--grid {item}: no values")
        if key in grid:
            raise ScenarioError(f"--grid {key}: given twice")
        grid[key] = vals
    return grid


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_fmt_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_") or "cell"


def _is_async(algorithm: str) -> bool | None:
    from .algorithms.presets import PRESETS

    p = PRESETS.get(algorithm)
    return None if p is None else p["asynchronous"] is not None


def _get(raw: dict, key: str, default: Any = None) -> Any:
    node: Any = raw
    for p in key.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node


def _cells(
    base: dict,
    algorithms: Sequence[str] | None,
    policies: Sequence[str] | None,
    grid: dict[str, list],
    variants: dict | None,
) -> tuple[list[tuple[Cell, dict]], list[str], list[str]]:
    """The grid's cells (each with its overridden raw scenario), its key columns and notes.

    Axes, outermost first: variants of the base scenario (when it has ``variants``), algorithms,
    policies, then the ``--grid`` keys. A cell is named ``<algorithm>-<variant or policy>``
    (both when ``--policies`` is given with variants) followed by ``key=value`` for grid keys.
    """
    for k in grid:
        if k in ("algorithm.name", "round.policy", "seed", "name"):
            raise ScenarioError(f"--grid {k}: use --algorithms / --policies / --seeds for this key")
    algos = list(algorithms) if algorithms else [None]
    pols = list(policies) if policies else [None]
    vnames = list(variants) if variants else [None]
    keys = (["variant"] if variants else []) + ["algorithm", "policy"] + list(grid)
    crossed = len(algos) * len(pols) * len(vnames) > 1
    cells, notes, seen = [], [], set()
    for vname, algo, pol, *vals in product(vnames, algos, pols, *grid.values()):
        sub = _deepcopy(base)
        over: dict[str, Any] = {}
        if vname is not None:
            if not isinstance(variants[vname], dict):
                raise ScenarioError(f"variants.{vname}: must map dotted keys to values")
            over.update({str(k): v for k, v in variants[vname].items()})
        if algo is not None:
            over["algorithm.name"] = algo
        if pol is not None:
            over["round.policy"] = pol
        over.update(dict(zip(grid, vals)))
        for k, v in over.items():
            _set(sub, k, _deepcopy(v))
        a = str(_get(sub, "algorithm.name", "fedavg"))
        p = str(_get(sub, "round.policy", "window"))
        asyn = _is_async(a)
        if crossed and asyn is not None and asyn != (p == "async"):
            notes.append(f"skipped {a} x {p}: {a} runs only with{'' if asyn else 'out'} round.policy async")
            continue
        cell_keys = ({"variant": vname} if variants else {}) | {"algorithm": a, "policy": p} | dict(zip(grid, vals))
        parts = [a] + ([vname] if vname is not None else []) + ([p] if vname is None or pol is not None else [])
        parts += [f"{k}={_fmt_value(v)}" for k, v in zip(grid, vals)]
        name = _safe("-".join(parts))
        while name in seen:
            name += "+"
        seen.add(name)
        cells.append((Cell(name, cell_keys, over), sub))
    return cells, keys, notes


def plan_compare(
    base_raw: dict,
    *,
    out: str | Path,
    algorithms: Sequence[str] | None = None,
    policies: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    grid: dict[str, list] | None = None,
    overrides: Sequence[str] = (),
    variants: Sequence[str] | None = None,
    base_dir: Path | None = None,
) -> tuple[list[CompareRun], list[str], list[str]]:
    """Validate every (cell, seed) up front; returns (runs, key columns, notes).

    A cell that makes an invalid scenario raises :class:`ScenarioError` naming the cell, before
    anything runs (e.g. policy ``wait`` on a base scenario without ``round.local_steps``).
    ``variants`` picks some of the base scenario's variants (default: all of them).
    """
    raw = apply_overrides(base_raw, list(overrides))
    check_names(raw)
    all_variants = raw.pop("variants", None)
    if all_variants is not None and not isinstance(all_variants, dict):
        raise ScenarioError("variants: must map names to dotted overrides")
    if variants:
        unknown = [v for v in variants if v not in (all_variants or {})]
        if unknown:
            known = ", ".join(all_variants or {}) or "none"
            raise ScenarioError(f"--variants {','.join(unknown)}: not in the scenario (it has: {known})")
        all_variants = {v: all_variants[v] for v in variants}
    base_name = str(raw.get("name", "run"))
    seeds = list(seeds) if seeds else [int(raw.get("seed", 0))]
    if len(set(seeds)) != len(seeds):
        raise ScenarioError("--seeds: repeated seed")
    cells, keys, notes = _cells(raw, algorithms, policies, dict(grid or {}), all_variants)
    if not cells:
        raise ScenarioError("compare: no valid (algorithm, policy) combination in the grid")
    runs = []
    out = Path(out)
    for cell, sub0 in cells:
        for seed in seeds:
            sub = _deepcopy(sub0)
            sub["seed"] = int(seed)
            sub["name"] = f"{base_name}/{cell.name}/seed{seed}"
            try:
                sc = parse_scenario(sub, base_dir)
            except ScenarioError as err:
                raise ScenarioError(f"cell {cell.name}: {err}") from None
            runs.append(CompareRun(cell, int(seed), out / cell.name / f"seed{seed}", sc))
    return runs, keys, notes


def _set(raw: dict, key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


# --------------------------------------------------------------------------- resume
def is_complete(folder: str | Path, scenario: Scenario | None = None) -> bool:
    """True when ``folder`` holds a finished run (of ``scenario``, if given).

    Finished: ``model.pt`` exists and the last row of ``rounds.csv`` is the final round
    (``scenario.rounds - 1``) or a divergence (a diverged run is a result too).
    """
    f = Path(folder)
    if not (f / "model.pt").is_file() or not (f / "rounds.csv").is_file():
        return False
    text = None
    try:
        text = (f / "scenario.yaml").read_text()
    except OSError:
        return False
    if scenario is not None and text != dump_scenario(scenario):
        return False
    try:
        rounds_total = scenario.rounds if scenario is not None else int(yaml.safe_load(text)["rounds"])
        df = pd.read_csv(f / "rounds.csv")
    except Exception:  # noqa: BLE001 - anything unreadable is simply not complete
        return False
    if df.empty:
        return False
    last = df.iloc[-1]
    diverged = str(last.get("diverged", "0")).strip() in ("1", "1.0", "True")
    return bool(int(last["round"]) == rounds_total - 1 or diverged)


# --------------------------------------------------------------------------- running
def _run_one(scenario_text: str, folder: str, threads: int | None) -> dict:
    """Worker: run one (cell, seed) into its folder (top level so spawned processes can import it).

    A folder holding an unfinished run of the same scenario is continued from its last checkpoint
    (from the start when it has none); anything else there is replaced.
    """
    if threads:
        import torch

        torch.set_num_threads(threads)
    from .runner import run

    sc = parse_scenario(yaml.safe_load(scenario_text))
    stored = Path(folder) / "scenario.yaml"
    same = stored.is_file() and stored.read_text() == scenario_text
    t0 = time.perf_counter()
    s = run(sc, Path(folder), force=not same, resume=same, progress=False)
    return {"rounds": s.rounds, "sim_time": s.sim_time, "test_acc": s.test_acc, "wall": time.perf_counter() - t0}


@dataclass
class CompareResult:
    out: Path
    runs: pd.DataFrame  # one row per (cell, seed)
    summary: pd.DataFrame  # one row per cell
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def run_compare(
    scenario: str | Path | dict,
    *,
    out: str | Path | None = None,
    algorithms: Sequence[str] | None = None,
    policies: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    grid: dict[str, list] | Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    variants: Sequence[str] | None = None,
    target: float | None = None,
    jobs: int = 1,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> CompareResult:
    """Run (or resume) a comparison and write its tables; see the module docstring for the layout.

    Args:
        scenario: path of the base scenario, or its raw mapping.
        out: comparison folder (default ``runs/<name>-compare``).
        algorithms, policies, seeds: axes (default: the base scenario's value, one entry).
        grid: ``{dotted.key: [values]}`` or ``["key=v1,v2", ...]``, crossed with the other axes.
        overrides: ``key=value`` applied to the base scenario before the grid (like ``--set``).
        variants: names of the base scenario's ``variants`` to use (default all; each is an axis value).
        target: test accuracy for time-to-target (None: that column stays empty).
        jobs: parallel processes (1 runs in this process).
        force: rerun cells even when complete.
        log: called with one line per finished or skipped run (e.g. ``print``).
    """
    if isinstance(scenario, dict):
        base_raw, base_dir, src = _deepcopy(scenario), None, None
    else:
        base_raw, base_dir, src = read_yaml(scenario), Path(scenario).resolve().parent, str(scenario)
    if grid is not None and not isinstance(grid, dict):
        grid = parse_grid(list(grid))
    if jobs < 1:
        raise ScenarioError("--jobs: must be >= 1")
    out = Path(out) if out is not None else Path("runs") / f"{base_raw.get('name', 'run')}-compare"
    runs, keys, notes = plan_compare(
        base_raw, out=out, algorithms=algorithms, policies=policies, seeds=seeds, grid=grid,
        overrides=overrides, variants=variants, base_dir=base_dir,
    )
    log = log or (lambda line: None)
    for n in notes:
        log(n)
    out.mkdir(parents=True, exist_ok=True)
    _write_manifest(out, src, runs, keys, target, algorithms, policies, seeds, grid, overrides, variants)

    todo, skipped = [], []
    for r in runs:
        if not force and is_complete(r.folder, r.scenario):
            skipped.append(r.label)
        else:
            todo.append(r)
    if skipped:
        log(f"{len(skipped)} of {len(runs)} runs already complete in {out}, not run again")
    ran, failed = [], []
    threads = None
    if jobs > 1 and len(todo) > 1:
        threads = max(1, (os.cpu_count() or 1) // min(jobs, len(todo)))
    total = len(todo)

    def finished(r: CompareRun, res: dict | None, err: BaseException | None) -> None:
        k = len(ran) + len(failed) + 1
        if err is not None:
            failed.append(f"{r.label}: {type(err).__name__}: {err}")
            log(f"[{k}/{total}] {r.label}: FAILED {type(err).__name__}: {err}")
            return
        ran.append(r.label)
        acc = res["test_acc"]
        acc_s = "" if acc != acc else f" acc {acc:.4f}"
        log(f"[{k}/{total}] {r.label}: {res['rounds']} rounds, t_sim {res['sim_time']:.1f}s{acc_s} ({res['wall']:.1f}s)")

    if jobs == 1 or len(todo) <= 1:
        for r in todo:
            try:
                finished(r, _run_one(dump_scenario(r.scenario), str(r.folder), None), None)
            except Exception as err:  # noqa: BLE001 - one failed cell must not lose the others
                finished(r, None, err)
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx) as pool:
            pending = {pool.submit(_run_one, dump_scenario(r.scenario), str(r.folder), threads): r for r in todo}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        r = pending.pop(fut)
                        err = fut.exception()
                        finished(r, None if err else fut.result(), err)
            except KeyboardInterrupt:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    runs_df, summary_df = summarize(out, target)
    return CompareResult(out, runs_df, summary_df, ran, skipped, failed, notes)


def _write_manifest(out, src, runs, keys, target, algorithms, policies, seeds, grid, overrides, variants) -> None:
    manifest = {
        "scenario": src,
        "target": None if target is None else float(target),
        "keys": keys,
        "axes": {
            "algorithms": list(algorithms) if algorithms else None,
            "policies": list(policies) if policies else None,
            "variants": list(variants) if variants else None,
            "seeds": sorted({r.seed for r in runs}),
            "grid": {k: list(v) for k, v in (grid or {}).items()},
            "set": list(overrides),
        },
        "runs": [
            {"cell": r.cell.name, "seed": r.seed, "folder": str(r.folder.relative_to(out)), "keys": dict(r.cell.keys)}
            for r in runs
        ],
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(yaml.safe_dump(manifest, sort_keys=False))
    os.replace(tmp, out / MANIFEST)


# --------------------------------------------------------------------------- reading
def _read_manifest(path: Path) -> dict | None:
    p = path / MANIFEST
    if not p.is_file():
        return None
    return yaml.safe_load(p.read_text())


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
    man = _read_manifest(p)
    if man is not None:
        runs = [
            {"cell": r["cell"], "seed": r["seed"], "folder": p / r["folder"], "keys": dict(r.get("keys") or {})}
            for r in man.get("runs", [])
        ]
        return runs, list(man.get("keys") or []), man.get("target")
    folders = [p] if (p / "rounds.csv").is_file() else sorted(f.parent for f in p.rglob("rounds.csv"))
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
        d[k] = _fmt_value(v) if isinstance(v, (list, dict)) else v
    d["seed"] = run["seed"]
    return d


def load_compare(path: str | Path, table: str = "rounds") -> pd.DataFrame:
    """A tidy long DataFrame of every run under ``path``: one row per run x round.

    Columns: ``cell``, the cell's keys (``algorithm``, ``policy``, any grid key such as
    ``algorithm.lr``), ``seed``, then the run's ``rounds.csv`` columns and ``folder``.
    ``table="clients"`` gives ``clients.csv`` instead (one row per run x round x client).
    Runs without that table yet (not started) are left out.
    """
    if table not in ("rounds", "clients"):
        raise ValueError("table must be 'rounds' or 'clients'")
    runs, keys, _ = find_runs(path)
    frames = []
    for r in runs:
        f = Path(r["folder"]) / f"{table}.csv"
        if not f.is_file():
            continue
        try:
            df = pd.read_csv(f)
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

    ``target`` defaults to the one recorded in ``compare.yaml``.
    """
    p = Path(path)
    runs, keys, recorded = find_runs(p)
    if target is None:
        target = recorded
    rows = []
    for r in runs:
        f = Path(r["folder"]) / "rounds.csv"
        if not f.is_file():
            continue
        try:
            rounds = pd.read_csv(f)
        except pd.errors.EmptyDataError:
            continue
        row = _keys_frame(r, keys)
        row["target"] = float("nan") if target is None else float(target)
        row.update(run_summary(rounds, target))
        row["complete"] = int(is_complete(r["folder"]))
        row["folder"] = str(Path(r["folder"]).relative_to(p)) if Path(r["folder"]).is_relative_to(p) else str(r["folder"])
        rows.append(row)
    runs_df = pd.DataFrame(rows)
    if runs_df.empty:
        return runs_df, pd.DataFrame()
    group = ["cell", *keys]
    metrics = [m for m in SUMMARY_METRICS if m != "diverged"] + ["diverged"]
    # grid values may be lists/dicts (formatted as text): group on them as given
    summary = aggregate_seeds(runs_df, group, metrics)
    summary.insert(len(group), "target", runs_df["target"].iloc[0])
    if write:
        _write_csv(runs_df, p / "runs.csv")
        _write_csv(summary, p / "summary.csv")
    return runs_df, summary


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


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


def _main_log(quiet: bool) -> Callable[[str], None] | None:
    if quiet:
        return None
    return lambda line: print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- command line
def _list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or None


def add_compare_parser(sub) -> None:
    """Register ``fedsim compare`` on the CLI's subparsers."""
    c = sub.add_parser(
        "compare",
        help="run a grid of algorithms x round policies x settings x seeds and summarize it",
        description="Every cell of a seed runs on the same system trace; finished cells are not run again.",
    )
    c.add_argument("scenario")
    c.add_argument("--algorithms", default=None, metavar="A,B", help="algorithm.name values (default: the scenario's)")
    c.add_argument("--policies", default=None, metavar="P,Q", help="round.policy values (default: the scenario's)")
    c.add_argument("--variants", default=None, metavar="V,W",
                   help="use only these of the scenario's variants (default: all, as one more axis)")
    c.add_argument("--seeds", default=None, metavar="0,1,2", help="scenario seeds (default: the scenario's seed)")
    c.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="more axes (repeatable)")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override the base scenario for every cell")
    c.add_argument("--target", type=float, default=None, help="test accuracy for time-to-target")
    c.add_argument("--jobs", type=int, default=1, help="parallel processes (default 1)")
    c.add_argument("--out", default=None, help="comparison folder (default runs/<name>-compare)")
    c.add_argument("--force", action="store_true", help="rerun cells that are already complete")
    c.add_argument("--plot", action="store_true", help="also write the figures to OUT/figures")
    c.add_argument("--quiet", action="store_true")


def cmd_compare(args) -> int:
    res = run_compare(
        args.scenario,
        out=args.out,
        algorithms=_list(args.algorithms),
        policies=_list(args.policies),
        seeds=parse_seeds(args.seeds),
        grid=parse_grid(args.grid),
        overrides=args.overrides,
        variants=_list(args.variants),
        target=check_target(args.target),
        jobs=args.jobs,
        force=args.force,
        log=_main_log(args.quiet),
    )
    man = _read_manifest(res.out) or {}
    print(format_summary(res.summary, man.get("keys")))
    print(f"{len(res.ran)} run, {len(res.skipped)} already done, {len(res.failed)} failed; "
          f"tables: {res.out / 'summary.csv'}, {res.out / 'runs.csv'}")
    if args.plot and not res.runs.empty:
        from .report.plots import plot_dir

        files = plot_dir(res.out, res.out / "figures", target=args.target)
        print(f"{len(files)} figures in {res.out / 'figures'}")
    if res.failed:
        for line in res.failed:
            print(f"fedsim: failed: {line}", file=sys.stderr)
        return 1
    return 0
