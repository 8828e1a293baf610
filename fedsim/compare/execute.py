"""Running a planned comparison: one run folder per (cell, seed), resumable, in parallel processes.

Layout of the comparison folder ``OUT`` (docs/comparisons.md)::

    OUT/compare.yaml              what was asked: base scenario, axes, seeds, target, one entry per run
    OUT/<cell>/seed<k>/           one ordinary run folder per (cell, seed)
    OUT/runs.csv                  one row per (cell, seed): cell keys, seed, metrics, folder
    OUT/summary.csv               one row per cell: keys, seeds, reached, <metric>_mean, <metric>_std

A cell whose folder already holds a complete run of the same resolved scenario is not run again,
so an interrupted comparison resumes where it stopped and a new ``target`` only recomputes the
tables. By default the runs that share data and model shapes run as one program, a stack
(:mod:`.stacks`, :mod:`.stack`; docs/comparisons.md "Stacks"); ``stack=False`` runs one program per
run. Programs run in parallel local processes (``jobs``, spawn start method) or, with
``executor="ray"``, a stack (a run with ``stack=False``) is a task on a Ray cluster
(:mod:`.ray_executor`), with the same folders.
"""

from __future__ import annotations

import copy
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
import yaml

from ..progress import progress_bar
from ..report.results import MANIFEST, run_complete, summarize
from ..scenario import Scenario, ScenarioError, dump_scenario, parse_scenario, read_yaml
from .plan import CompareRun, parse_grid, plan_compare

__all__ = ["CompareResult", "run_compare", "run_one", "is_complete"]


def is_complete(folder: str | Path, scenario: Scenario | None = None) -> bool:
    """True when ``folder`` holds a finished run (of ``scenario``, if given); see ``run_complete``."""
    return run_complete(folder, None if scenario is None else dump_scenario(scenario))


def run_one(scenario_text: str, folder: str, table_format: str = "csv") -> dict:
    """Worker: run one (cell, seed) into its folder (top level so spawned processes can import it).

    A folder holding an unfinished run of the same scenario is continued from its last checkpoint
    (from the start when it has none), in that run's table format; anything else there is
    replaced by a run writing ``table_format`` tables (``csv`` or ``parquet``). Threads follow the
    engine's rule in every worker (fedsim.engine.threads), so --jobs changes no result; parallel
    workers on the same cores take turns at each round's compute.
    """
    from ..runner import run

    sc = parse_scenario(yaml.safe_load(scenario_text))
    stored = Path(folder) / "scenario.yaml"
    same = stored.is_file() and stored.read_text() == scenario_text
    t0 = time.perf_counter()
    s = run(sc, Path(folder), force=not same, resume=same, progress=False, table_format=None if same else table_format)
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
    progress: bool = False,
    table_format: str = "csv",
    plugins: Sequence[str] = (),
    executor: str = "local",
    address: str | None = None,
    retries: int | None = None,
    gpus_per_cell: float | None = None,
    stack: bool = True,
    stack_rows: int | None = None,
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
        progress: show a progress bar over the runs to do on standard error when it is a terminal.
        table_format: ``csv`` or ``parquet`` tables for the runs started here (:func:`run_one`).
        plugins: ``--plugin`` modules, imported here and by every worker before a scenario is read.
        executor: ``local`` (processes on this machine, ``jobs``) or ``ray`` (a task per stack, or
            per run with ``stack=False``, on a Ray cluster, docs/comparisons.md; needs ``pip install 'fedsim[ray]'``).
        address: with ``ray``: None (a Ray instance on this machine for this comparison), ``auto``
            or ``HOST:PORT`` of a running cluster; a ``ray.init`` already made in this process is used as is.
        retries: with ``ray``: times a run is submitted again after its worker process or node was
            lost (default 3).
        gpus_per_cell: with ``ray``: the GPU fraction a task (a stack, or a run) with ``engine.device: cuda``
            holds (default 1).
        stack: run the runs that share data and model shapes as one program each (a stack,
            :mod:`.stack`; default; with ``ray`` one task per stack); False: one program (or Ray
            task) per run (the runs are the same either way, docs/comparisons.md "Stacks").
        stack_rows: the most training rows (clients of one round, over a stack's runs) one stack
            trains at once (None: sized from the model's parameter bytes, :func:`.stacks.auto_rows`).
    """
    from ..plugins import load_plugins

    load_plugins(plugins)
    if isinstance(scenario, dict):
        base_raw, base_dir, src = copy.deepcopy(scenario), None, None
    else:
        base_raw, base_dir, src = read_yaml(scenario), Path(scenario).resolve().parent, str(scenario)
    if grid is not None and not isinstance(grid, dict):
        grid = parse_grid(list(grid))
    if jobs < 1:
        raise ScenarioError("--jobs: must be >= 1")
    if stack_rows is not None and (isinstance(stack_rows, bool) or not isinstance(stack_rows, int) or stack_rows < 1):
        raise ScenarioError("--stack-rows: must be an integer >= 1")
    ray_options = _check_executor(executor, jobs, address, retries, gpus_per_cell)
    out = Path(out) if out is not None else Path("runs") / f"{base_raw.get('name', 'run')}-compare"
    runs, keys, notes = plan_compare(
        base_raw, out=out, algorithms=algorithms, policies=policies, seeds=seeds, grid=grid,
        overrides=overrides, variants=variants, base_dir=base_dir,
    )
    check_compare_out(out, force)
    log = log or (lambda line: None)
    for n in notes:
        log(n)
    session = None
    if ray_options is not None:  # connect, and check that the cells fit, before anything is written
        from .ray_executor import RaySession

        session = RaySession(ray_options, plugins, log).open(runs)
    bar = None
    try:
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
        total = len(todo)
        bar = progress_bar(str(base_raw.get("name", "compare")), total, unit="run") if progress and total else None

        def finished(r: CompareRun, res: dict | None, err: BaseException | None, note: str = "") -> None:
            k = len(ran) + len(failed) + 1
            if err is not None:
                what = getattr(err, "described", None) or f"{type(err).__name__}: {err}"
                failed.append(f"{r.label}: {what}")
                line = f"[{k}/{total}] {r.label}: FAILED {what}{note}"
            else:
                ran.append(r.label)
                acc = res["test_acc"]
                acc_s = "" if acc != acc else f" acc {acc:.4f}"
                line = (f"[{k}/{total}] {r.label}: {res['rounds']} rounds, t_sim {res['sim_time']:.1f}s{acc_s} "
                        f"({res['wall']:.1f}s){note}")
            if bar is None:
                log(line)
                return
            with bar.hidden():
                log(line)
            bar()

        if session is not None:
            session.run(todo, table_format, finished, run_one, status=None if bar is None else bar.note,
                        stack=stack, stack_rows=stack_rows, log=log if bar is None else bar_log(bar, log))
        elif stack and todo:
            _run_stacked(todo, table_format, finished, jobs, plugins, stack_rows, log if bar is None else bar_log(bar, log),
                         status=None if bar is None else bar.note)
        elif jobs == 1 or len(todo) <= 1:
            for r in todo:
                try:
                    finished(r, run_one(dump_scenario(r.scenario), str(r.folder), table_format), None)
                except Exception as err:  # noqa: BLE001 - one failed cell must not lose the others
                    finished(r, None, err)
        else:
            def one_done(r, fut):
                err = fut.exception()
                finished(r, None if err else fut.result(), err)

            in_processes(jobs, plugins, [(r, (run_one, dump_scenario(r.scenario), str(r.folder), table_format))
                                         for r in todo], one_done)
    finally:
        if bar is not None:
            bar.close()
        if session is not None:
            session.close()
    runs_df, summary_df = summarize(out, target)
    return CompareResult(out, runs_df, summary_df, ran, skipped, failed, notes)


def bar_log(bar, log):
    """``log`` printing around the progress bar."""
    def out(line: str) -> None:
        with bar.hidden():
            log(line)
    return out


def _run_stacked(todo, table_format, finished, jobs, plugins, stack_rows, log, status=None) -> None:
    """The runs to do, planned into stacks (:mod:`.stacks`, the plan logged first) and run: a stack
    of several runs as one program (:func:`.stack.run_stack`), a run alone as :func:`run_one`;
    with ``jobs`` > 1 the programs go to parallel processes."""
    from .stacks import plan_lines, plan_stacks

    stacks = plan_stacks(todo, stack_rows, jobs)
    for line in plan_lines(stacks):
        log(line)
    if jobs == 1 or len(stacks) == 1:
        from .stack import run_stack

        for st in stacks:
            if len(st.runs) == 1:
                r = st.runs[0]
                try:
                    finished(r, run_one(dump_scenario(r.scenario), str(r.folder), table_format), None)
                except Exception as err:  # noqa: BLE001 - one failed run must not lose the others
                    finished(r, None, err)
            else:
                run_stack(st.runs, table_format, finished, max_rows=stack_rows, log=log, status=status)
        return
    def stack_done(st, fut):
        err = fut.exception()
        if err is not None:
            for r in st.runs:
                finished(r, None, err)
            return
        for i, res, what in fut.result():
            finished(st.runs[i], res, None if what is None else CellError(what))

    in_processes(jobs, plugins, [(st, (stack_worker, [dump_scenario(r.scenario) for r in st.runs],
                                       [str(r.folder) for r in st.runs], table_format, stack_rows)) for st in stacks],
                 stack_done)


def in_processes(jobs: int, plugins, calls: list, done: Callable) -> None:
    """Each ``(key, (fn, *args))`` of ``calls`` run as ``fn(*args)`` in up to ``jobs`` spawned
    processes, ``done(key, future)`` called as each ends; Ctrl-C cancels the calls not started. A
    spawned worker first registers what this process did (entry points, --plugin modules)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(calls)), mp_context=ctx, initializer=load_plugins_of,
                             initargs=(tuple(plugins),)) as pool:
        pending = {pool.submit(*call): key for key, call in calls}
        try:
            while pending:
                finished_now, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished_now:
                    done(pending.pop(fut), fut)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def load_plugins_of(plugins) -> None:
    from ..plugins import load_plugins

    load_plugins(plugins)


class CellError(Exception):
    """A run's error as reported by the process that ran its stack (its one-line description)."""

    def __init__(self, described: str):
        super().__init__(described)
        self.described = described


def stack_worker(texts: list[str], folders: list[str], table_format: str, stack_rows: int | None) -> list:
    """Worker: one planned stack (its runs' scenarios and folders) run in this process; returns
    ``(index, result or None, error description or None)`` per run, in the order they ended."""
    from .plan import Cell
    from .stack import run_stack

    runs = [CompareRun(Cell(f, {}, {}), 0, Path(f), parse_scenario(yaml.safe_load(t))) for t, f in zip(texts, folders)]
    where = {id(r): i for i, r in enumerate(runs)}
    out = []

    def finished(r, res, err) -> None:
        out.append((where[id(r)], res, None if err is None else (getattr(err, "described", None)
                                                                 or f"{type(err).__name__}: {err}")))

    if len(runs) == 1:
        try:
            finished(runs[0], run_one(texts[0], folders[0], table_format), None)
        except Exception as err:  # noqa: BLE001
            finished(runs[0], None, err)
    else:
        run_stack(runs, table_format, finished, max_rows=stack_rows)
    return out


def _check_executor(executor, jobs, address, retries, gpus_per_cell):
    """The Ray options when ``executor`` is ``ray`` (None for local processes); ScenarioError naming
    an option that does not apply to the executor."""
    if executor not in ("local", "ray"):
        raise ScenarioError(f"--executor: expected local or ray, got {executor!r}")
    if executor == "local":
        for flag, value in (("--address", address), ("--retries", retries), ("--gpus-per-cell", gpus_per_cell)):
            if value is not None:
                raise ScenarioError(f"{flag}: only with --executor ray")
        return None
    if jobs != 1:
        raise ScenarioError("--jobs: local processes only; with --executor ray the cluster's free CPUs and GPUs "
                            "decide how many runs go at once")
    from .ray_executor import check_options

    return check_options(address, retries, gpus_per_cell)


#: The files ``fedsim compare`` writes directly in its folder (with their ``*.tmp``).
OUT_FILES = (MANIFEST, "runs.csv", "summary.csv")


def check_compare_out(out: Path, force: bool) -> None:
    """Refuse (ScenarioError, before anything is run or written) a comparison folder where one of
    its files (``compare.yaml``, ``runs.csv``, ``summary.csv`` and their ``*.tmp``) is a symbolic
    link or not a regular file, or that holds ``runs.csv`` / ``summary.csv`` without a
    ``compare.yaml`` (not a comparison's: someone else's files) unless ``force``."""
    import stat

    if not out.exists():
        return
    if not out.is_dir():
        raise ScenarioError(f"--out {out}: exists and is not a folder")
    present = []
    for name in OUT_FILES + tuple(f + ".tmp" for f in OUT_FILES):
        try:
            mode = os.lstat(out / name).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise ScenarioError(f"--out {out}: {name} is a symbolic link; fedsim never writes through a link (remove it)")
        if not stat.S_ISREG(mode):
            raise ScenarioError(f"--out {out}: {name} is not a regular file (move it away)")
        present.append(name)
    if not force and MANIFEST not in present and {"runs.csv", "summary.csv"} & set(present):
        raise ScenarioError(f"--out {out}: holds runs.csv or summary.csv but no {MANIFEST}, so not a fedsim "
                            "comparison; use --force to replace them")


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
    from ..runner.files import write_atomic

    write_atomic(out / MANIFEST, yaml.safe_dump(manifest, sort_keys=False).encode())
