"""fedsim: federated learning under system heterogeneity, on a simulated wall clock."""

from .report.tables import load_run
from .scenario import Scenario, ScenarioError, load_scenario

__all__ = ["load_run", "load_compare", "Scenario", "ScenarioError", "load_scenario"]
__version__ = "0.1.0"


def __getattr__(name):  # lazy: comparisons pull in pandas-heavy helpers only when used
    if name == "load_compare":
        from .compare import load_compare

        return load_compare
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
