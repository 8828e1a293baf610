"""The clock: who computes how much and when (SimPy and numpy; never imports torch or the scenario).

For every server update the clock yields a :class:`RoundPlan` of :class:`Job` rows (round,
client, status, steps, start, end, download, upload, ...); the engine executes exactly that work.
It takes frozen plain values (:mod:`fedsim.clock.model`). The semantics -- jobs, policies,
selection, availability, traces, random streams -- are stated in ``docs/clock.md``.
"""

from .clock import MIN_SOJOURN, Clock
from .draws import STEP_GUARD, whole_steps
from .model import Population, RoundRule, System, WorkCost
from .plan import JOB_COLUMNS, STATUSES, Job, RoundPlan, RoundTable
from .sim import ClockError
from .trace import TraceError, load_trace

__all__ = [
    "Job",
    "RoundPlan",
    "RoundTable",
    "Clock",
    "System",
    "RoundRule",
    "Population",
    "WorkCost",
    "MIN_SOJOURN",
    "ClockError",
    "TraceError",
    "load_trace",
    "STATUSES",
    "JOB_COLUMNS",
    "STEP_GUARD",
    "whole_steps",
]
