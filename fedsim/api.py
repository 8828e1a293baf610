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

import os
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from . import registries
from .errors import ScenarioError

__all__ = [
    "Result", "ArgumentError", "run", "schedule", "register_model", "register_dataset", "register_algorithm",
    "register_solver", "register_correction", "register_aggregation", "register_server_opt", "register_staleness",
    "register_availability", "register_selector", "register_compressor", "register_loss",
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
        loss: ``loss(outputs, targets) -> scalar mean`` instead of ``loss.name`` (default
            cross-entropy); recorded as ``loss: from_python``.
        overrides: ``dotted.key=value`` strings, as ``--set`` (None: none).
        plugins: Modules to import first, as ``--plugin`` (None: none).
        force: Replace an existing run folder ``out``.
        progress: Show a progress bar.
        table_format: ``csv`` (default) or ``parquet``.

    Returns:
        :class:`Result` with ``rounds`` and ``clients`` DataFrames, ``info``, ``scenario``, ``folder``.

    Raises:
        ScenarioError: Invalid scenario or piece (one line naming the field).
        ArgumentError: An argument of the wrong type or value (one line naming it; both a
            ScenarioError and a TypeError).
    """
    from .runner.execute import run as run_folder

    overrides, plugins = _arguments(out, overrides, plugins, force=force, progress=progress, table_format=table_format)
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

    overrides, plugins = _arguments(out, overrides, plugins, force=force, table_format=table_format)
    sc = _scenario(scenario, overrides, plugins, model=model, data=data, algorithm=None)
    with _folder(out) as folder:
        run_schedule(sc, folder, force=force, table_format=table_format, data=data, model=model)
        return _result(sc, folder, keep=out is not None, info=False)


# --------------------------------------------------------------------------- registrations
# Every piece is checked when it is registered (a lazy 'module:attribute' target when it is first
# loaded): a piece of the wrong kind is one line naming it (RegistryError, exit 2), never an
# AttributeError in the middle of a run. The registry records who registered each name.
def _register(registry, name: str, obj: Any, replace: bool, check) -> Any:
    if obj is None:  # not the registry's decorator form: register_* take the piece itself
        from .named_pieces import RegistryError

        try:
            check(None)
        except ValueError as err:
            raise RegistryError(f"{registry.kind} {str(name)[:64]!r}: {err}") from None
    return registry.register(name, obj, replace=replace, check=check)


def _factory(obj: Any) -> None:
    if not callable(obj):
        raise ValueError(f"expected a factory (a callable, or 'module:attribute'), got {type(obj).__name__}")


def _part(kind: str):
    def check(obj: Any) -> None:
        from .algorithms.parts import check_part

        check_part(kind, obj)

    return check


def _preset(obj: Any) -> None:
    from .scenario.algorithm import check_preset

    check_preset(obj)


def _subclass_of(module: str, name: str):
    """The check of a piece that is a section class: a subclass of ``module.name``."""

    def check(obj: Any) -> None:
        import importlib

        base = getattr(importlib.import_module(module), name)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise ValueError(f"expected a subclass of {module}.{name}, got {repr(obj)[:80]}")

    return check


def register_model(name: str, factory: Any, *, replace: bool = False) -> Any:
    """Register ``factory(input_shape, num_classes, **options) -> nn.Module`` as ``model.name: name``
    (a callable; what it returns is checked when a run builds the model)."""
    return _register(registries.MODELS, name, factory, replace, _factory)


def register_dataset(name: str, factory: Any, *, replace: bool = False) -> Any:
    """Register ``factory(config, seed) -> FederatedData`` as ``data.name: name`` (``config``: the
    scenario's ``data`` section, its own options in ``config.options``; ``seed``: the data seed; a
    callable; what it returns is checked when a run builds the data)."""
    return _register(registries.DATASETS, name, factory, replace, _factory)


def register_algorithm(name: str, algorithm: Any, *, replace: bool = False) -> Any:
    """Register an algorithm, a preset (a mapping of part keys to values, docs/extending.md), as
    ``algorithm.name: name``; its keys and values are checked as the scenario's ``algorithm`` keys
    (:func:`fedsim.scenario.algorithm.check_preset`)."""
    return _register(registries.ALGORITHMS, name, algorithm, replace, _preset)


def register_solver(name: str, solver: Any, *, replace: bool = False) -> Any:
    """Register a local solver (``fedsim.algorithms.parts.Solver``) as ``algorithm.solver: name``."""
    return _register(registries.SOLVERS, name, solver, replace, _part("solver"))


def register_correction(name: str, correction: Any, *, replace: bool = False) -> Any:
    """Register a local correction (``fedsim.algorithms.parts.Correction``) as ``algorithm.correction: name``."""
    return _register(registries.CORRECTIONS, name, correction, replace, _part("correction"))


def register_aggregation(name: str, aggregation: Any, *, replace: bool = False) -> Any:
    """Register a server aggregation (``fedsim.algorithms.parts.Aggregation``) as ``algorithm.aggregation: name``."""
    return _register(registries.AGGREGATIONS, name, aggregation, replace, _part("aggregation"))


def register_server_opt(name: str, server_opt: Any, *, replace: bool = False) -> Any:
    """Register a server optimizer (``fedsim.algorithms.parts.ServerOpt``) as ``algorithm.server_opt: name``."""
    return _register(registries.SERVER_OPTS, name, server_opt, replace, _part("server_opt"))


def register_staleness(name: str, rule: Any, *, replace: bool = False) -> Any:
    """Register an asynchronous staleness rule (``fedsim.algorithms.parts.StalenessRule``) as
    ``algorithm.staleness: name``."""
    return _register(registries.STALENESS, name, rule, replace, _part("staleness"))


def register_loss(name: str, loss: Any, *, replace: bool = False) -> Any:
    """Register ``loss(outputs, targets) -> scalar mean`` (or ``'module:attribute'`` naming one) as
    ``loss: {name: name}``."""
    return _register(registries.LOSSES, name, loss, replace, _factory)


def register_availability(name: str, section: Any, *, replace: bool = False) -> Any:
    """Register an availability model, a subclass of :class:`fedsim.availability.AvailabilitySection`
    (or ``'module:attribute'`` naming one), as ``system.availability: {model: name, ...}``."""
    return _register(registries.AVAILABILITY, name, section, replace,
                     _subclass_of("fedsim.availability", "AvailabilitySection"))


def register_selector(name: str, section: Any, *, replace: bool = False) -> Any:
    """Register a selection rule, a subclass of :class:`fedsim.selection.section.SelectionSection`
    (or ``'module:attribute'`` naming one), as ``round.selection: {name: name, ...}``."""
    return _register(registries.SELECTORS, name, section, replace,
                     _subclass_of("fedsim.selection.section", "SelectionSection"))


def register_compressor(name: str, section: Any, *, replace: bool = False) -> Any:
    """Register a compressor, a subclass of :class:`fedsim.compression.CompressionSection` (or
    ``'module:attribute'`` naming one), as ``algorithm.compression: {name: name, ...}`` (and
    ``algorithm.downlink_compression``)."""
    return _register(registries.COMPRESSORS, name, section, replace,
                     _subclass_of("fedsim.compression", "CompressionSection"))


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
        _check_tree(scenario)
        raw = dict(scenario)
    elif isinstance(scenario, (str, Path)):
        raw, base_dir = read_yaml(scenario), Path(scenario).resolve().parent
    else:
        raise ArgumentError(f"scenario: expected a path, a mapping or a Scenario, got {type(scenario).__name__}")
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


class ArgumentError(ScenarioError, TypeError):
    """An argument of :func:`run` or :func:`schedule` of the wrong type or value: one line naming it."""


_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _arguments(out, overrides, plugins, *, force, table_format, progress=False) -> tuple[tuple, tuple]:
    """Check the plain arguments of :func:`run` / :func:`schedule` (issue 28 item 17); returns
    ``overrides`` and ``plugins`` as tuples of strings (None: none)."""
    for name, value in (("force", force), ("progress", progress)):
        if not isinstance(value, bool):
            raise ArgumentError(f"{name}: must be True or False, got {_short(value)}")
    if table_format not in (None, "csv", "parquet"):
        raise ArgumentError(f"table_format: must be 'csv' or 'parquet', got {_short(table_format)}")
    if out is not None:
        if not isinstance(out, (str, os.PathLike)) or isinstance(os.fspath(out), bytes):
            raise ArgumentError(f"out: must be a folder path (str or pathlib.Path) or None, got {type(out).__name__}")
        if os.fspath(out) == "":
            raise ArgumentError("out: must name a folder; '' would be the current folder (give '.' to mean it)")
    return _strings("overrides", overrides), _strings("plugins", plugins)


def _strings(name: str, value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ArgumentError(f"{name}: must be a list of strings (or None), got {type(value).__name__}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise ArgumentError(f"{name}: must be a list of strings, got an item of type {type(item).__name__}")
    return items


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_tree(value, where: str = "scenario") -> None:
    """A mapping handed as a scenario is walked (iteratively) before it is read, with the YAML
    loader's bounds: nesting at most ``MAX_YAML_DEPTH``, at most ``MAX_YAML_NODES`` values counted
    as often as they are reached, and no container inside itself (issue 28 item 17: a recursive or
    5,000-deep mapping raised RecursionError)."""
    from .limits import MAX_YAML_DEPTH, MAX_YAML_NODES

    stack = [(value, where, ())]
    nodes = 0
    while stack:
        node, path, above = stack.pop()
        nodes += 1
        if nodes > MAX_YAML_NODES:
            raise ArgumentError(f"{where}: holds more than {MAX_YAML_NODES:,} values (MAX_YAML_NODES)")
        if not isinstance(node, (Mapping, list, tuple)):
            continue
        if any(node is a for a in above):
            raise ArgumentError(f"{path}: contains itself (a recursive structure)")
        if len(above) + 1 > MAX_YAML_DEPTH:
            raise ArgumentError(f"{path}: nested deeper than {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)")
        inside = above + (node,)
        items = node.items() if isinstance(node, Mapping) else enumerate(node)
        for key, child in items:
            if isinstance(child, (Mapping, list, tuple)):
                stack.append((child, f"{path}.{str(key)[:40]}", inside))
            else:  # a leaf: counted, not stacked
                nodes += 1


class _folder:
    """``out`` as a Path, or a temporary folder removed on exit, also when SIGTERM or SIGHUP ends
    the process (issue 28 item 17): while it exists those signals raise SystemExit where the
    default would kill at once; once it is removed the signal is delivered again with the
    default action, so the process still ends as the sender meant.

    A handler runs wherever the main thread is, also inside third-party code that swallows what
    it raises (seen: an ``abc.__subclasscheck__`` under a lazy numpy import mid-run). So after the
    first signal a daemon thread sends it again every ``RESEND`` seconds until ``__exit__``
    begins; each delivery raises ``SystemExit`` again, and one lands where nothing swallows it."""

    RESEND = 0.5

    def __init__(self, out):
        self.out = out
        self.tmp = None
        self.old: dict = {}
        self.received: list[int] = []
        self.exiting = threading.Event()  # set when __exit__ begins: later signals wait for it
        self.resender: threading.Thread | None = None

    def __enter__(self) -> Path:
        if self.out is not None:
            return Path(self.out)
        self._catch()
        try:
            self.tmp = tempfile.TemporaryDirectory(prefix="fedsim-")
        except BaseException:
            self._restore()
            raise
        return Path(self.tmp.name) / "run"

    def __exit__(self, *exc) -> None:
        self.exiting.set()
        if self.resender is not None:  # its last resend lands while our handler still ignores it
            self.resender.join()
        try:
            if self.tmp is not None:
                self.tmp.cleanup()
        finally:
            self._restore()
        if self.received:  # removed: now end as the signal meant
            signal.raise_signal(self.received[0])

    def _catch(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            if self.exiting.is_set():  # cleaning up: __exit__ ends the process by the signal
                return
            if not self.received:
                self.received.append(signum)
                self.resender = threading.Thread(target=self._resend, args=(signum,), daemon=True)
                self.resender.start()
            raise SystemExit(128 + self.received[0])

        for s in _SIGNALS:
            if signal.getsignal(s) is signal.SIG_DFL:  # a handler of the caller's own is left alone
                self.old[s] = signal.signal(s, stop)

    def _resend(self, signum: int) -> None:
        while not self.exiting.wait(self.RESEND):
            os.kill(os.getpid(), signum)

    def _restore(self) -> None:
        for s, handler in self.old.items():
            signal.signal(s, handler)
        self.old = {}


def _result(sc, folder: Path, *, keep: bool, info: bool = True) -> Result:
    import yaml

    from .report.tables import load_run

    tables = load_run(folder)
    meta = yaml.safe_load((folder / "info.yaml").read_text()) if info else {}
    return Result(tables.rounds, tables.clients, meta or {}, sc, folder if keep else None)


def from_python_placeholder(config: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The factory registered as ``data.name`` / ``model.name`` ``from_python``: a run records that
    name when its piece was handed to :func:`run` as an object; a scenario file naming it gets
    this one-line error (nothing to build)."""
    from .errors import ScenarioError

    raise ScenarioError(f"{FROM_PYTHON}: this run's data or model was given from Python "
                        f"(fedsim.run(..., data=..., model=...)); a scenario file cannot supply it")
