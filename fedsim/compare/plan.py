"""Planning a comparison: the grid's cells and one validated scenario per (cell, seed).

Every cell of the grid is the base scenario with a few dotted keys changed (``algorithm.name``,
``round.policy``, a variant's keys, any ``--grid`` key); every seed sets ``seed``. Nothing else is
changed, in particular no system key unless a ``--grid`` key or a variant names it, so all cells of
one seed see the same system trace (docs/comparisons.md). Nothing here runs or writes anything.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any, Sequence

from ..report.results import format_value
from ..limits import MAX_COMPARE_RUNS
from ..scenario import Scenario, ScenarioError, apply_overrides, parse_scenario, set_dotted
from ..scenario.loading import parse_value
from ..validate import check_names, check_ready

__all__ = ["Cell", "CompareRun", "split_values", "parse_grid", "plan_compare"]


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
        vals = [parse_value(v, f"--grid {key}") for v in split_values(values)]
        if not vals:
            raise ScenarioError(f"--grid {item}: no values")
        if key in grid:
            raise ScenarioError(f"--grid {key}: given twice")
        grid[key] = vals
    return grid


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_") or "cell"


def _is_async(algorithm: str) -> bool | None:
    from ..algorithms.presets import PRESETS

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
        sub = copy.deepcopy(base)
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
            set_dotted(sub, k, copy.deepcopy(v), f"compare key {k!r}")
        a = str(_get(sub, "algorithm.name", "fedavg"))
        p = str(_get(sub, "round.policy", "window"))
        asyn = _is_async(a)
        if crossed and asyn is not None and asyn != (p == "async"):
            notes.append(f"skipped {a} x {p}: {a} runs only with{'' if asyn else 'out'} round.policy async")
            continue
        cell_keys = ({"variant": vname} if variants else {}) | {"algorithm": a, "policy": p} | dict(zip(grid, vals))
        parts = [a] + ([vname] if vname is not None else []) + ([p] if vname is None or pol is not None else [])
        parts += [f"{k}={format_value(v)}" for k, v in zip(grid, vals)]
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
    count = max(1, len(algorithms or ())) * max(1, len(policies or ())) * max(1, len(all_variants or {})) * len(seeds)
    for values in (grid or {}).values():
        count *= len(values)
    if count > MAX_COMPARE_RUNS:
        raise ScenarioError(f"compare: the grid makes {count:,} runs (cells x seeds), more than {MAX_COMPARE_RUNS:,}")
    cells, keys, notes = _cells(raw, algorithms, policies, dict(grid or {}), all_variants)
    if not cells:
        raise ScenarioError("compare: no valid (algorithm, policy) combination in the grid")
    runs = []
    out = Path(out)
    for cell, sub0 in cells:
        for seed in seeds:
            sub = copy.deepcopy(sub0)
            sub["seed"] = int(seed)
            sub["name"] = f"{base_name}/{cell.name}/seed{seed}"
            try:
                sc = parse_scenario(sub, base_dir)
                check_ready(sc)
            except ScenarioError as err:
                raise ScenarioError(f"cell {cell.name}: {err}") from None
            runs.append(CompareRun(cell, int(seed), out / cell.name / f"seed{seed}", sc))
    return runs, keys, notes
