"""``fedsim compare``: a grid of runs over algorithms, round policies, settings and seeds.

Three steps, one module each: :mod:`.plan` makes the grid's cells and validates one scenario per
(cell, seed) before anything runs; :mod:`.execute` runs them into one folder each (resumable; the
runs that share data and model shapes as one program each, planned by :mod:`.stacks` and run by
:mod:`.stack`; in parallel processes, or as tasks on a Ray cluster with :mod:`.ray_executor`) and
writes the tables; :mod:`.cli` is the command line. Reading the results
(``load_compare``, ``summarize``, ``load_summary``) is fedsim/report/results.py, which runs nothing.
Guide: docs/comparisons.md. Names are imported on first use, so ``fedsim --help`` stays light.
"""

from __future__ import annotations

_PLAN = ("Cell", "CompareRun", "split_values", "parse_grid", "plan_compare")
_EXECUTE = ("CompareResult", "run_compare", "run_one", "is_complete")
_CLI = ("add_compare_parser", "cmd_compare")
_RESULTS = ("find_runs", "load_compare", "summarize", "load_summary", "format_summary")

__all__ = [*_PLAN, *_EXECUTE, *_CLI, *_RESULTS]


def __getattr__(name):
    if name in _PLAN:
        from . import plan as module
    elif name in _EXECUTE:
        from . import execute as module
    elif name in _CLI:
        from . import cli as module
    elif name in _RESULTS:
        from ..report import results as module
    else:
        raise AttributeError(f"module 'fedsim.compare' has no attribute {name!r}")
    return getattr(module, name)
