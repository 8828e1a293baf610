"""Reading a scenario: YAML file -> raw mapping -> ``--set`` overrides -> validated :class:`Scenario`; and back to YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ScenarioError
from ..limits import MAX_SCENARIO_BYTES, MAX_YAML_DEPTH
from ..scenario_yaml import YamlInputError, load_yaml, read_regular_file
from ..validate import check_limits, check_names, check_paths
from ..section import FieldError
from .loss import DEFAULT_LOSS
from ..section_errors import format_error
from .schema import Scenario

__all__ = ["parse_scenario", "apply_overrides", "set_dotted", "parse_value", "read_yaml", "load_scenario", "load_scenario_raw", "dump_scenario"]


def parse_scenario(raw: Any, base_dir: Path | None = None) -> Scenario:
    """Validate a raw mapping into a :class:`Scenario`; relative paths resolve against ``base_dir``."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ScenarioError("scenario: top level must be a mapping")
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ScenarioError(format_error(err)) from None
    except FieldError as err:  # pragma: no cover - pydantic wraps these
        raise ScenarioError(str(err)) from None
    check_limits(sc)
    check_paths(sc)
    if base_dir is not None:
        sc = _resolve_paths(sc, base_dir)
    return sc


def _resolve_paths(sc: Scenario, base: Path) -> Scenario:
    data = sc.data
    root = Path(data.root)
    if not root.is_absolute():
        data = data.model_copy(update={"root": str((base / root).resolve())})
    system = sc.system
    if system.trace is not None and not Path(system.trace).is_absolute():
        system = system.model_copy(update={"trace": str((base / system.trace).resolve())})
    return sc.model_copy(update={"data": data, "system": system})


def parse_value(text: str, where: str) -> Any:
    """A ``--set`` or ``--grid`` value parsed by the scenario loader (its depth, node and number
    bounds); text that is not YAML stays a string."""
    try:
        return load_yaml(text)
    except YamlInputError as err:
        raise ScenarioError(f"{where}: {err}") from None
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``a.b=value`` overrides (value parsed as YAML) to a raw scenario mapping."""
    raw = _deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected dotted.key=value")
        key, value = item.split("=", 1)
        set_dotted(raw, key.strip(), parse_value(value, f"--set {item}"), f"--set {item}")
    return raw


def set_dotted(raw: dict, key: str, value: Any, where: str) -> None:
    parts = key.split(".")
    if not all(parts):
        raise ScenarioError(f"{where}: empty key")
    if len(parts) > MAX_YAML_DEPTH:
        raise ScenarioError(f"{where}: key nested deeper than {MAX_YAML_DEPTH} levels")
    if parts[0] == "variants" and len(parts) > 2 and isinstance(raw.get("variants"), dict):
        # a variant's overrides are themselves dotted keys: keep the rest of the path as one key
        variant = raw["variants"].get(parts[1])
        if not isinstance(variant, dict):
            variant = raw["variants"][parts[1]] = {}
        variant[".".join(parts[2:])] = value
        return
    node = raw
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


def _deepcopy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deepcopy(v) if isinstance(v, (dict, list)) else v for k, v in x.items()}
    if isinstance(x, list):
        return [_deepcopy(v) if isinstance(v, (dict, list)) else v for v in x]
    return x


def read_yaml(path: str | Path) -> dict:
    """Read a scenario file into a raw mapping (:func:`~fedsim.scenario_yaml.load_yaml` only).

    Only a regular file of at most ``MAX_SCENARIO_BYTES`` is read (never a device or a FIFO).
    """
    p = Path(path)
    try:
        raw = load_yaml(read_regular_file(p, MAX_SCENARIO_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{p}: no such scenario file") from None
    except OSError as err:
        raise ScenarioError(f"{p}: cannot read ({err.strerror or type(err).__name__})") from None
    except YamlInputError as err:
        raise ScenarioError(f"{p}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{p}:{where}: YAML syntax error: {problem}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{p}: not a text file") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{p}: top level must be a mapping")
    return raw


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario file."""
    return load_scenario_raw(path, overrides)[0]


def load_scenario_raw(path: str | Path, overrides: list[str] | None = None) -> tuple[Scenario, dict]:
    """Read, override and validate a scenario file; also the raw mapping (overrides applied) that
    :func:`~fedsim.scenario.variants.expand_variants` expands."""
    raw = apply_overrides(read_yaml(path), overrides or [])
    check_names(raw)
    return parse_scenario(raw, base_dir=Path(path).resolve().parent), raw



#: Keys added after run folders already existed, left out of the resolved scenario when at their
#: default (what they were before the key existed), so an older run folder's scenario.yaml is
#: still the one its scenario dumps (and ``--resume`` accepts it).
_NEWER_DEFAULTS = (
    ("algorithm", "compression", None), ("algorithm", "downlink_compression", None),
    ("round", "local_time", None), ("round", "on_deadline", "drop"),
    ("system", "on_outage", "fail"), ("system", "server", None),
)


def dump_scenario(sc: Scenario) -> str:
    """The fully resolved scenario as YAML (round-trips through :func:`parse_scenario`)."""
    raw = sc.model_dump(mode="json")
    for section in ("data", "model"):  # no options: the key is left out (as every file before it)
        if not raw[section].get("options"):
            raw[section].pop("options", None)
    rnd = raw["round"]  # round.selection or the keys it replaces: one of the two forms, never both
    for key in ("sampling", "weights") if rnd.get("selection") is not None else ("selection",):
        rnd.pop(key, None)
    for section, key, default in _NEWER_DEFAULTS:  # off: left out, so older scenarios dump unchanged
        if raw[section].get(key, default) == default:
            raw[section].pop(key, None)
    if raw.get("loss") == {"name": DEFAULT_LOSS}:  # the default loss: left out (as every file before it)
        raw.pop("loss")
    # libyaml's emitter when PyYAML has it: the same text as yaml.safe_dump (the representer is the
    # same Python code), written 2-3x faster for scenarios with long per-client lists
    return yaml.dump(_plain(raw), Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
