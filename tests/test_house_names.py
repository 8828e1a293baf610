"""No private names across packages (issue 30): a module imports a ``_name`` only from its own
package, and the bases plug-ins subclass or raise are public."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _package(module: str) -> str:
    """``fedsim.X`` for a module under fedsim/X/, else ``fedsim`` (the top-level modules)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def _private_imports():
    for path in sorted((ROOT / "fedsim").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        is_pkg = rel.name == "__init__"
        module = ".".join(rel.parts[:-1] if is_pkg else rel.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("fedsim"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        yield module, target, alias.name


def test_private_names_stay_inside_their_package():
    crossing = [f"{m} imports {name} from {t}" for m, t, name in _private_imports() if _package(m) != _package(t)]
    assert crossing == []


def test_the_checker_sees_a_crossing():
    assert _package("fedsim.runner.folder") != _package("fedsim.report.parquet")
    assert _package("fedsim.scenario.system") == _package("fedsim.scenario.base")
    assert _package("fedsim.api") == "fedsim"


def test_plugin_bases_are_public():
    from fedsim.availability import AvailabilitySection
    from fedsim.scenario.base import FieldError, Section
    from fedsim.selection.section import SelectionSection

    assert issubclass(AvailabilitySection, Section) and issubclass(SelectionSection, Section)
    err = FieldError("system.availability.on", "must be > 0")
    assert str(err) == "system.availability.on: must be > 0" and isinstance(err, ValueError)


def _imports():
    """(module, imported fedsim module or name) for every import in fedsim, lazy ones included."""
    for path in sorted((ROOT / "fedsim").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        is_pkg = rel.name == "__init__"
        module = ".".join(rel.parts[:-1] if is_pkg else rel.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                yield from ((module, a.name) for a in node.names if a.name.startswith("fedsim"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.startswith("fedsim"):
                    yield module, target


def _layer(module: str) -> str:
    """``fedsim.X`` for fedsim/X/... and for the top-level module fedsim/X.py; ``fedsim`` itself."""
    return ".".join(module.split(".")[:2])


def test_packages_never_import_each_other():
    """Issue 38, the house: every arrow between two of fedsim's packages points one way (lazy
    imports included), so each package has a side below it."""
    arrows: dict[tuple[str, str], str] = {}
    for m, t in _imports():
        a, b = _layer(m), _layer(t)
        if a != b and "fedsim" not in (a, b):
            arrows.setdefault((a, b), f"{m} -> {t}")
    both = sorted(f"{a} <-> {b} ({arrows[a, b]}; {arrows[b, a]})" for a, b in arrows if (b, a) in arrows and a < b)
    assert both == []
