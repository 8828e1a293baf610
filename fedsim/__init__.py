"""fedsim: federated learning under system heterogeneity, on a simulated wall clock."""

import os as _os

# Read by libgomp when torch loads it, hence here, before anything imports torch: waiting OpenMP
# threads sleep instead of spinning on cores another run needs (docs/performance.md).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["load_run", "load_compare", "Scenario", "ScenarioError", "load_scenario"]
__version__ = "0.1.0"

_LAZY = {  # name -> module: imported on first use, so `import fedsim` loads neither pandas nor pydantic
    "load_run": "fedsim.report.tables",
    "load_compare": "fedsim.compare",
    "Scenario": "fedsim.scenario",
    "ScenarioError": "fedsim.scenario",
    "load_scenario": "fedsim.scenario",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
