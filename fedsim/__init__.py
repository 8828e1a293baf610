"""fedsim: federated learning under system heterogeneity, on a simulated wall clock."""

from .report.tables import load_run
from .scenario import Scenario, ScenarioError, load_scenario

__all__ = ["load_run", "Scenario", "ScenarioError", "load_scenario"]
__version__ = "0.1.0"
