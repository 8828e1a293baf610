"""fedsim: federated learning under system heterogeneity, on a simulated wall clock."""

import os as _os

# Read by libgomp and MKL when torch loads them, hence here, before anything imports torch
# (docs/performance.md): OpenMP threads sleep instead of spinning while they wait (runs sharing
# cores do not burn each other's time), and MKL's ?gemm gives the same bits for any thread count.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

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
