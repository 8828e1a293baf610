"""Reporting: run-folder tables, summaries (time-to-target), comparisons and figures.

Every name is imported on first use (pandas, matplotlib with the Agg backend), so importing a
submodule such as ``fedsim.report.tables`` does not load the others.
"""

_SUMMARY = ("time_to_target", "rounds_to_target", "run_summary", "aggregate_seeds")
_PLOTS = (
    "plot_curves", "plot_accuracy", "plot_loss", "plot_time_to_target", "plot_tau_heatmap",
    "plot_client_timeline", "plot_class_mix", "plot_dir", "save_figure",
)
_COMPARE = ("load_compare", "load_summary", "summarize")

__all__ = ["load_run", *_SUMMARY, *_PLOTS, *_COMPARE]


def __getattr__(name):
    import importlib

    if name == "load_run":
        return importlib.import_module("fedsim.report.tables").load_run
    for module, names in (("fedsim.report.summary", _SUMMARY), ("fedsim.report.plots", _PLOTS), ("fedsim.compare", _COMPARE)):
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'fedsim.report' has no attribute {name!r}")
