"""fedsim: federated learning under system heterogeneity, on a simulated wall clock."""

import os as _os

# Read by libgomp when torch loads it, hence here, before anything imports torch: waiting OpenMP
# threads spin briefly (10,000 iterations, not libgomp's 300,000) and then sleep, so they do not
# burn cores another run needs, while a lone run keeps its speed (fully passive waiting made a
# lone batched logistic-regression run ~1.6x slower; docs/performance.md). A user's own
# OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", "10000")

__all__ = [
    "load_run", "load_compare", "Scenario", "ScenarioError", "load_scenario", "run", "schedule", "Result",
    "FederatedData", "register_model", "register_dataset", "register_algorithm", "register_solver",
    "register_correction", "register_aggregation", "register_server_opt", "register_staleness",
    "register_availability", "register_selector", "register_compressor", "register_loss",
]
__version__ = "0.1.0"

_LAZY = {  # name -> module: imported on first use, so `import fedsim` loads neither pandas nor pydantic
    "load_run": "fedsim.report.tables",
    "load_compare": "fedsim.compare",
    "Scenario": "fedsim.scenario",
    "ScenarioError": "fedsim.scenario",
    "load_scenario": "fedsim.scenario",
    "FederatedData": "fedsim.data.federated",
    "Result": "fedsim.api",
    "run": "fedsim.api",
    "schedule": "fedsim.api",
    **{f"register_{kind}": "fedsim.api" for kind in (
        "model", "dataset", "algorithm", "solver", "correction", "aggregation", "server_opt", "staleness",
        "availability", "selector", "compressor", "loss")},
}


def __getattr__(name):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
