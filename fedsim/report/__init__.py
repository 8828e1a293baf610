"""Reporting, read-only: run-folder tables, summaries (time-to-target), comparison results, figures.

Nothing here runs training (running a comparison is fedsim/compare/). Every name is imported on
first use (pandas, matplotlib with the Agg backend), so importing a submodule such as
``fedsim.report.tables`` does not load the others.
"""

_SUMMARY = ("time_to_target", "rounds_to_target", "run_summary", "aggregate_seeds")
_PLOTS = (
    "plot_curves", "plot_accuracy", "plot_loss", "plot_time_to_target", "plot_tau_heatmap",
    "plot_client_timeline", "plot_class_mix", "plot_dir", "save_figure",
)
_RESULTS = ("load_compare", "load_summary", "summarize", "find_runs")

__all__ = ["load_run", *_SUMMARY, *_PLOTS, *_RESULTS]


def __getattr__(name):
    import importlib

    if name == "load_run":
        return importlib.import_module("fedsim.report.tables").load_run
    for module, names in (("fedsim.report.summary", _SUMMARY), ("fedsim.report.plots", _PLOTS), ("fedsim.report.results", _RESULTS)):
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'fedsim.report' has no attribute {name!r}")
