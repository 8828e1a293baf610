"""Reporting, read-only: run-folder tables, summaries (time-to-target), comparison results, figures.

Nothing here runs training (running a comparison is fedsim/compare/). The plotting functions import
matplotlib (Agg backend) on first use, so ``import fedsim`` stays light.
"""

from .summary import aggregate_seeds, rounds_to_target, run_summary, time_to_target
from .tables import load_run

_PLOTS = (
    "plot_curves", "plot_accuracy", "plot_loss", "plot_time_to_target", "plot_tau_heatmap",
    "plot_client_timeline", "plot_class_mix", "plot_dir", "save_figure",
)
_RESULTS = ("load_compare", "load_summary", "summarize", "find_runs")

__all__ = ["load_run", "time_to_target", "rounds_to_target", "run_summary", "aggregate_seeds", *_PLOTS, *_RESULTS]


def __getattr__(name):
    if name in _PLOTS:
        from . import plots

        return getattr(plots, name)
    if name in _RESULTS:
        from . import results

        return getattr(results, name)
    raise AttributeError(f"module 'fedsim.report' has no attribute {name!r}")
