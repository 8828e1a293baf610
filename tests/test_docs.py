"""The documentation states what the code has: the scenario reference lists exactly the schema's
key paths, its example is the shipped quickstart file, and every local link resolves."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from fedsim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
KEY_ROW = re.compile(r"^\| `([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)` \|", re.M)


def _section(annotation) -> type[BaseModel] | None:
    """The model class of a nested section (``X`` or ``X | None``); None for a value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _section(args[0])
    return None


def schema_keys(model: type[BaseModel] = Scenario, prefix: str = "") -> set[str]:
    """Every key path of the schema: nested sections are walked, anything else is a key."""
    keys = set()
    for name, field in model.model_fields.items():
        sub = _section(field.annotation)
        keys |= schema_keys(sub, f"{prefix}{name}.") if sub else {prefix + name}
    return keys


def test_schema_walk_finds_nested_sections():
    keys = schema_keys()
    assert {"seed", "data.partition.alpha", "round.policy", "engine.threads", "variants"} <= keys
    assert "data" not in keys and "data.partition" not in keys


def test_scenario_reference_lists_exactly_the_schema_keys():
    rows = KEY_ROW.findall((DOCS / "scenario.md").read_text())
    assert len(rows) == len(set(rows)), "a key is documented twice"
    documented, schema = set(rows), schema_keys()
    assert not documented - schema, f"documented but not in the schema: {sorted(documented - schema)}"
    assert not schema - documented, f"in the schema but not documented: {sorted(schema - documented)}"


def test_scenario_reference_example_is_the_quickstart_file():
    text = (DOCS / "scenario.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    shipped = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    assert example == "".join(l for l in shipped.splitlines(keepends=True) if not l.startswith("#"))


def _local_links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # links inside code blocks are code
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    return [l for l in links if not re.match(r"[a-z]+:", l) and not l.startswith("#")]


def test_local_links_resolve():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    # pages other helpers write may land after this one; a link to them is not a broken link
    others = {"algorithms.md", "clock.md", "devices.md", "performance.md", "reliability.md"}
    broken = []
    for md in pages:
        for link in _local_links(md):
            target = (md.parent / link.split("#", 1)[0]).resolve()
            if not target.exists() and not (target.parent == DOCS and target.name in others):
                broken.append(f"{md.relative_to(ROOT)}: {link}")
    assert not broken, broken


@pytest.mark.slow
def test_readme_quickstart_table_is_what_the_quickstart_prints(tmp_path, capsys):
    from fedsim.cli import main

    readme = (ROOT / "README.md").read_text()
    block = readme.split("```\nrun ", 1)[1].split("```", 1)[0]
    expected = [line.split()[:-1] for line in ("run " + block).strip().splitlines()]  # folder differs
    assert main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(tmp_path), "--quiet"]) == 0
    printed = [line.split()[:-1] for line in capsys.readouterr().out.strip().splitlines()]
    assert printed == expected
