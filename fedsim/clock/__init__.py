"""The clock: who computes how much and when (SimPy; never imports torch).

For every server update the clock yields a :class:`RoundPlan` of :class:`Job` rows (round,
client, status, steps, start, end, ...); the engine executes exactly that work.

Semantics (times in simulated seconds; L = ``system.latency`` per transfer):

* **Speed** s_i (local steps per second) is drawn once per client (stream ``("speed", i)``); an
  optional ``system.slowdown`` factor per job (stream ``("slowdown", i, key)``) stretches every
  step: step duration = slowdown / s_i. A trace (``system.trace``) replaces speed and availability
  with measured, time-varying values (see :mod:`fedsim.clock.trace`).
* **Jobs**: download (L), tau_i local steps, upload (L). tau_i = 0 means ``dropped`` at once
  (no download, cannot fail; end = the round's close).
* ``window`` (W): round r opens at r * W and closes at (r + 1) * W. tau_i is the number of whole
  steps that fit between download end and the last upload start (open + W - L), capped by
  ``max_local_steps`` and by ``local_steps`` / ``local_epochs`` when given: with constant speed and
  no outage floor((W - 2L) * s_i). Floors use ``floor(x * (1 + 1e-12))`` so that products that are
  integers in exact arithmetic count as whole (see :data:`fedsim.clock.draws.STEP_GUARD`). A client
  uploads as soon as its steps are done.
* ``wait``: prescribed work; the round closes when the last selected client that did not fail
  has uploaded (if all fail: at the last failure; if nobody is online at open: when the first
  client comes online, with only offline rows).
* ``deadline`` (D): prescribed work; jobs not done (upload finished) by open + D are ``dropped``
  (end = open + D); the round closes at open + D or when all selected jobs have resolved, whichever
  comes first (nobody online at open: when the first client comes online, at most open + D).
* **Availability**: always; Markov on/off sojourns; explicit offline intervals ``[start, end)``;
  or the trace. A client offline at round open is not selectable and gets an ``offline`` row
  (start = end = open). An outage during a job (start < t < resolution) interrupts it: ``failed``,
  steps 0, end = t. An outage exactly at resolution does not.
* **Selection** at open among online clients (stream ``("select", round)``): all
  (``clients_per_round`` None, weight p_i); uniform without replacement, q = min(clients_per_round,
  m available), weight p_i m / q; ``sampling: weighted``: q draws with replacement proportional to
  p_i, count k -> weight k / q (FedNova paper, ALGORITHMS.md section 1).
* ``async`` (FedBuff-style): ``concurrency`` C jobs run at any moment. Whenever slots are free the
  server picks among online clients not in flight, uniformly without replacement (stream
  ``("select", seq)``, seq = the sequence number of the first job it starts), jobs started at one
  instant numbered in client order. Every ``buffer`` K completed arrivals make one server update and
  one plan holding those K arrivals plus every failed / dropped job processed since the previous
  plan, in processing order, all with the plan's ``round`` (= the update index; the update makes
  server version round + 1). ``version`` = server version at download; ``staleness`` = round -
  version. Jobs started at the instant of an update download the new version.
* **Ties**: at one instant state changes (toggles, job phases, interrupts) come first, then the
  server's decisions; async events of one instant are processed in job key order.
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
