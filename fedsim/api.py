"""The Python API: ``fedsim.run``, ``fedsim.schedule`` and ``fedsim.register_*`` (docs/python-api.md).

A scenario is a path, a mapping or a :class:`~fedsim.scenario.Scenario`. Keyword arguments replace
the scenario's named pieces with Python objects: ``model`` (a factory ``(input_shape, num_classes,
**options) -> nn.Module`` or a module to copy), ``data`` (a :class:`~fedsim.data.FederatedData`),
``loss`` (``(outputs, targets) -> scalar``, recorded as ``loss: from_python``), ``algorithm`` (a registered algorithm's name; an
algorithm of your own is registered by name, :func:`register_algorithm`). Without ``out`` the
run goes to a temporary folder that is removed before the call returns: nothing is left behind.

Importing this module is light (no torch, pandas or pydantic): each function imports what it uses.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import registries

__all__ = [
    "Result", "run", "schedule", "register_model", "register_dataset", "register_algorithm", "register_solver",
    "register_correction", "register_aggregation", "register_server_opt", "register_staleness", "register_loss",
]

#: ``data.name`` / ``model.name`` a run records when the piece came from Python, not from a name.
FROM_PYTHON = "from_python"


@dataclass(frozen=True)
class Result:
    """One run: its tables as DataFrames, ``info.yaml`` as a dict, the resolved scenario, and the
    run folder (None when the run went to a temporary folder, already removed)."""

    rounds: Any  # pandas.DataFrame
    clients: Any  # pandas.DataFrame
    info: dict
    scenario: Any  # fedsim.scenario.Scenario
    folder: Path | None


def run(
    scenario: str | Path | Mapping | Any,
    *,
    out: str | Path | None = None,
    model: Any = None,
    data: Any = None,
    algorithm: Any = None,
    loss: Any = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
    force: bool = False,
    progress: bool = False,
    table_format: str | None = None,
) -> Result:
    """Run one scenario and return its tables.

    Args:
        scenario: A scenario file, a mapping of its keys, or a Scenario.
        out: The run folder (as ``fedsim run --out``); None: a temporary folder, removed afterwards.
        model: A model factory ``(input_shape, num_classes, **options) -> nn.Module`` or an
            ``nn.Module`` (copied) instead of ``model.name``.
        data: A :class:`~fedsim.data.FederatedData` (or a built Dataset) instead of ``data.name``;
            ``data.clients`` follows from it.
        algorithm: A registered algorithm name (``fedsim.register_algorithm``) instead of
            ``algorithm.name``.
        loss: ``loss(outputs, targets) -> scalar mean`` instead of cross-entropy.
        overrides: ``dotted.key=value`` strings, as ``--set``.
        plugins: Modules to import first, as ``--plugin``.
        force: Replace an existing run folder ``out``.
        progress: Show a progress bar.
        table_format: ``csv`` (default) or ``parquet``.

    Returns:
        :class:`Result` with ``rounds`` and ``clients`` DataFrames, ``info``, ``scenario``, ``folder``.

    Raises:
        ScenarioError: Invalid scenario or piece (one line naming the field).
    """
    from .runner.execute import run as run_folder

    sc = _scenario(scenario, overrides, plugins, model=model, data=data, algorithm=algorithm, loss=loss)
    with _folder(out) as folder:
        run_folder(sc, folder, force=force, progress=progress, table_format=table_format,
                   model=model, data=data, loss=loss)
        return _result(sc, folder, keep=out is not None)


def schedule(
    scenario: str | Path | Mapping | Any,
    *,
    out: str | Path | None = None,
    model: Any = None,
    data: Any = None,
    overrides: Sequence[str] = (),
    plugins: Sequence[str] = (),
    force: bool = False,
    table_format: str = "csv",
) -> Result:
    """The clock alone (``fedsim run --schedule-only``): who computes how much and when.

    Arguments as :func:`run` (``model`` matters only where the system model times steps or
    transfers by the model's size). ``rounds`` has the clock's columns (``round, sim_time,
    participants, tau_mean, tau_min, tau_max, available``), ``clients`` the per-client rows.
    """
    from .clock_only import run_schedule

    sc = _scenario(scenario, overrides, plugins, model=model, data=data, algorithm=None)
    with _folder(out) as folder:
        run_schedule(sc, folder, force=force, table_format=table_format, data=data, model=model)
        return _result(sc, folder, keep=out is not None, info=False)


# --------------------------------------------------------------------------- registrations
def _register(registry, name: str, obj: Any, replace: bool, *, factory: bool = False) -> Any:
    from .registry import RegistryError

    if factory and not (callable(obj) or isinstance(obj, str)):
        raise RegistryError(f"{registry.kind} {name!r}: expected a factory (a callable, or 'module:attribute'), "
                            f"got {type(obj).__name__}")
    return registry.register(name, obj, replace=replace)


def register_model(name: str, factory: Any, *, replace: bool = False) -> Any:
    """Register ``factory(input_shape, num_classes, **options) -> nn.Module`` as ``model.name: name``."""
    return _register(registries.MODELS, name, factory, replace, factory=True)


def register_dataset(name: str, factory: Any, *, replace: bool = False) -> Any:
    """Register ``factory(config, seed) -> FederatedData`` as ``data.name: name`` (``config``: the
    scenario's ``data`` section, its own options in ``config.options``; ``seed``: the data seed)."""
    return _register(registries.DATASETS, name, factory, replace, factory=True)


def register_algorithm(name: str, algorithm: Any, *, replace: bool = False) -> Any:
    """Register an algorithm, a preset (a mapping of part keys to values, docs/extending.md), as
    ``algorithm.name: name``."""
    return _register(registries.ALGORITHMS, name, algorithm, replace)


def register_solver(name: str, solver: Any, *, replace: bool = False) -> Any:
    """Register a local solver (``fedsim.algorithms.parts.Solver``) as ``algorithm.solver: name``."""
    return _register(registries.SOLVERS, name, solver, replace)


def register_correction(name: str, correction: Any, *, replace: bool = False) -> Any:
    """Register a local correction as ``algorithm.correction: name``."""
    return _register(registries.CORRECTIONS, name, correction, replace)


def register_aggregation(name: str, aggregation: Any, *, replace: bool = False) -> Any:
    """Register a server aggregation as ``algorithm.aggregation: name``."""
    return _register(registries.AGGREGATIONS, name, aggregation, replace)


def register_server_opt(name: str, server_opt: Any, *, replace: bool = False) -> Any:
    """Register a server optimizer as ``algorithm.server_opt: name``."""
    return _register(registries.SERVER_OPTS, name, server_opt, replace)


def register_staleness(name: str, rule: Any, *, replace: bool = False) -> Any:
    """Register an asynchronous staleness rule as ``algorithm.staleness: name``."""
    return _register(registries.STALENESS, name, rule, replace)


def register_loss(name: str, loss: Any, *, replace: bool = False) -> Any:
    """Register ``loss(outputs, targets) -> scalar mean`` (or ``'module:attribute'`` naming one) as
    ``loss: {name: name}``."""
    return _register(registries.LOSSES, name, loss, replace, factory=True)


def register_availability(name: str, section: Any, *, replace: bool = False) -> Any:
    """Register an availability model, a subclass of :class:`fedsim.availability.AvailabilitySection`
    (or ``'module:attribute'`` naming one), as ``system.availability: {model: name, ...}``."""
    from .availability import AvailabilitySection
    from .registry import RegistryError

    if not (isinstance(section, str) or (isinstance(section, type) and issubclass(section, AvailabilitySection))):
        raise RegistryError(f"availability model {name!r}: expected a subclass of fedsim.availability.AvailabilitySection, "
                            f"got {section!r}")
    return _register(registries.AVAILABILITY, name, section, replace)


# --------------------------------------------------------------------------- helpers
def _scenario(scenario, overrides, plugins, *, model, data, algorithm, loss=None):
    """The validated Scenario, with the keys the Python pieces imply: ``data.name: from_python`` and
    ``data.clients`` for ``data``, ``model.name: from_python`` for ``model``, ``algorithm.name``
    for an algorithm given by name."""
    from .errors import ScenarioError
    from .plugins import load_plugins
    from .scenario import Scenario, apply_overrides, parse_scenario, read_yaml
    from .validate import check_names, check_ready

    load_plugins(plugins)
    base_dir = None
    given = [name for name, piece in (("model", model), ("data", data), ("loss", loss)) if piece is not None]
    if isinstance(scenario, Scenario):
        if not overrides and not given and algorithm is None:
            check_ready(scenario)
            return scenario
        raw = scenario.model_dump(mode="json")
    elif isinstance(scenario, Mapping):
        raw = dict(scenario)
    elif isinstance(scenario, (str, Path)):
        raw, base_dir = read_yaml(scenario), Path(scenario).resolve().parent
    else:
        raise ScenarioError(f"scenario: expected a path, a mapping or a Scenario, got {type(scenario).__name__}")
    raw = apply_overrides(raw, list(overrides))
    if data is not None:
        raw["data"] = dict(raw.get("data") or {})
        if raw["data"].get("name", "quadratic") == "quadratic":
            raw["data"]["name"] = FROM_PYTHON
        raw["data"]["clients"] = _num_clients(data)
    if model is not None:
        raw["model"] = {**(raw.get("model") or {}), "name": FROM_PYTHON}
    if loss is not None:
        raw["loss"] = {"name": FROM_PYTHON}
    if algorithm is not None:
        if not isinstance(algorithm, str):
            raise ScenarioError(f"algorithm: give a registered algorithm's name (fedsim.register_algorithm(name, "
                                f"preset)), got {type(algorithm).__name__}")
        raw["algorithm"] = {**(raw.get("algorithm") or {}), "name": algorithm}
    check_names(raw)
    sc = parse_scenario(raw, base_dir)
    if sc.variants:
        raise ScenarioError("variants: fedsim.run runs one scenario; run each of "
                            "fedsim.scenario.expand_variants(...) or use fedsim compare")
    check_ready(sc, from_python=given)
    return sc


def _num_clients(data: Any) -> int:
    from .data.federated import FederatedData
    from .errors import ScenarioError

    if isinstance(data, FederatedData):
        return data.num_clients
    sizes = getattr(data, "client_sizes", None)
    if sizes is None:
        raise ScenarioError(f"data: expected a FederatedData, got {type(data).__name__}")
    return len(sizes)


class _folder:
    """``out`` as a Path, or a temporary folder removed on exit."""

    def __init__(self, out):
        self.out = out
        self.tmp = None

    def __enter__(self) -> Path:
        if self.out is not None:
            return Path(self.out)
        self.tmp = tempfile.TemporaryDirectory(prefix="fedsim-")
        return Path(self.tmp.name) / "run"

    def __exit__(self, *exc) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


def _result(sc, folder: Path, *, keep: bool, info: bool = True) -> Result:
    import yaml

    from .report.tables import load_run

    tables = load_run(folder)
    meta = yaml.safe_load((folder / "info.yaml").read_text()) if info else {}
    return Result(tables.rounds, tables.clients, meta or {}, sc, folder if keep else None)


def _from_python(config: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``data.name`` / ``model.name`` ``from_python``: a piece handed to :func:`run` as an object."""
    from .errors import ScenarioError

    raise ScenarioError(f"{FROM_PYTHON}: this run's data or model was given from Python "
                        f"(fedsim.run(..., data=..., model=...)); a scenario file cannot supply it")
