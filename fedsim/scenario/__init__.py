"""Scenario: the typed, frozen, validated description of one simulation.

A scenario is read from YAML with :func:`fedsim.scenario_yaml.load_yaml` (``yaml.safe_load``
with bounds), overridden with dotted ``--set`` keys and validated once here (pydantic v2,
``extra="forbid"``, frozen; then names, numeric bounds and devices by :mod:`fedsim.validate`).
Core code only ever sees these models, never a dict. Errors become :class:`ScenarioError` with one
line naming the field path.

One module per job (where a new key goes):

- ``base.py``: the frozen base model and ``FieldError``, kept here for plug-ins; they live in
  :mod:`fedsim.section` (below every package whose sections subclass them).
- ``distributions.py``: ``{dist: ...}`` values (re-exported from :mod:`fedsim.distributions`).
- ``data.py``: ``data`` (and ``data.partition``) and ``model``; names checked against the registries.
- ``system.py``: ``system`` (speed, compute, network, slowdown, latency, availability models, trace).
- ``round.py``: ``round`` (policy, window, deadline, work, sampling, async concurrency / buffer).
- ``algorithm.py``: ``algorithm`` (preset name and overrides).
- ``loss.py``: ``loss`` (the training loss by name).
- ``model_options.py``: the built-in models' options (types, bounds), checked without torch.
- ``settings.py``: ``eval``, ``engine``, ``checkpoint``.
- ``schema.py``: :class:`Scenario` (sections put together; derived ``data_seed``, ``model_name``).
- ``checks.py``: cross-field rules of a whole scenario.
- ``clock_values.py``: sections -> the clock's plain values (``SystemConfig.value``, ``RoundConfig.value``).
- ``loading.py``: YAML file -> raw mapping -> ``--set`` overrides -> Scenario; Scenario -> YAML.
- ``variants.py``: ``variants:`` expansion.
"""

from __future__ import annotations

from ..errors import ScenarioError
from .algorithm import AlgorithmConfig
from .data import DataConfig, ModelConfig, PartitionConfig
from .loss import LossConfig
from .distributions import Constant, Dist, Exponential, IntDist, LogNormal, RandInt, Uniform, dist_bounds, dist_high, dist_low
from .loading import apply_overrides, dump_scenario, load_scenario, parse_scenario, read_yaml, set_dotted
from .round import RoundConfig
from .schema import Scenario
from .settings import CheckpointConfig, EngineConfig, EvalConfig
from .system import ComputeConfig, NetworkConfig, SystemConfig
from .variants import expand_variants

__all__ = [
    "ScenarioError",
    "Scenario",
    "load_scenario",
    "parse_scenario",
    "apply_overrides",
    "dump_scenario",
]
