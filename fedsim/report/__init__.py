"""Reporting: run-folder tables, summaries (time-to-target), comparisons and figures.

The plotting functions import matplotlib (Agg backend) on first use, so ``import fedsim`` stays light.
"""

from .summary import aggregate_seeds, rounds_to_target, run_summary, time_to_target
from .tables import load_run

_PLOTS = (
    "plot_curves", "plot_accuracy", "plot_loss", "plot_time_to_target", "plot_tau_heatmap",
    "plot_client_timeline", "plot_class_mix", "plot_dir", "save_figure",
)
_COMPARE = ("load_compare", "load_summary", "summarize")

__all__ = ["load_run", "time_to_target", "rounds_to_target", "run_summary", "aggregate_seeds", *_PLOTS, *_COMPARE]


def __getattr__(name):
    if name in _PLOTS:
        from . import plots

        return getattr(plots, name)
    if name in _COMPARE:
        from .. import compare

        return getattr(compare, name)
    raise AttributeError(f"module 'fedsim.report' has no attribute {name!r}")
