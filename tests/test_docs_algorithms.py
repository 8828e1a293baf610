"""docs/algorithms.md states the registry, the scenario keys and their defaults, and the module
map as the code has them (each checked both ways)."""

import re
from pathlib import Path

import yaml

from fedsim.algorithms.presets import BASE, PRESETS
from fedsim.algorithms.spec import OVERRIDABLE
from fedsim.scenario import AlgorithmConfig

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "algorithms.md").read_text()


def section(title: str) -> str:
    return PAGE.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return [r for r in rows[1:] if not set(r[0]) <= {"-"}]  # drop the header


def value(s: str):
    v = yaml.safe_load(s)
    if isinstance(v, str):  # YAML 1.1 reads 1e-08 (no dot) as a string
        try:
            return float(v)
        except ValueError:
            return v
    return tuple(v) if isinstance(v, list) else v


def parts(s: str) -> dict:
    return {} if s == "-" else {k: value(v) for k, v in (p.split("=", 1) for p in re.findall(r"\w+=(?:\[[^\]]*\]|\S+)", s))}


def test_preset_table_is_the_registry():
    rows = {r[0].strip("`"): parts(r[1]) for r in table_rows(section("Presets"))}
    assert set(rows) == set(PRESETS)
    base = dict(BASE)
    for name, p in PRESETS.items():
        assert rows[name] == {k: v for k, v in p.items() if base[k] != v}, name


def test_preset_base_is_stated():
    text = section("Presets").split("from the base (`", 1)[1].split("`, synchronous)", 1)[0]
    stated = parts(" ".join(text.split()))
    assert stated == {k: v for k, v in BASE.items() if k != "asynchronous"}


def test_scenario_keys_and_defaults():
    rows = {r[0].strip("`"): r[1] for r in table_rows(section("Scenario keys"))}
    fields = AlgorithmConfig.model_fields
    assert set(rows) == set(fields)
    for key, cell in rows.items():
        default = fields[key].default
        if cell == "preset":
            assert default is None and key in OVERRIDABLE, key
        elif cell == "none":
            assert default is None and key not in OVERRIDABLE, key
        else:
            assert value(cell.strip("`")) == default, key


def test_module_map_lists_every_module():
    rows = table_rows(section("How the code is organised"))
    listed = {f.strip("` ") for r in rows for f in r[0].split(",")}
    have = {p.name for p in (ROOT / "fedsim" / "algorithms").glob("*.py") if p.name != "__init__.py"}
    assert listed == have


def test_minibatch_rule_as_documented():
    """docs/algorithms.md, "Minibatches": B examples a step, a running stream of shuffled epochs,
    B = 32 on 10 examples repeats each example two to four times in a step."""
    import numpy as np

    from fedsim.engine.train import BatchStream, Task

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "algorithms.md").read_text().split())
    assert "each example appears two to four times in it" in text and "No batch is ever smaller than B" in text

    class Work:
        client_indices = [np.arange(100, 110)]

    for seed in range(20):
        steps = BatchStream(Work(), seed, Task(0, 7, seed), 32).take(7)
        assert steps.shape == (7, 32) and set(np.unique(steps)) <= set(range(100, 110))
        counts = np.array([np.bincount(r - 100, minlength=10) for r in steps])
        assert counts.min() >= 2 and counts.max() <= 4
        flat = steps.reshape(-1)[: 10 * 22]  # whole epochs: each a permutation of the client's examples
        assert all(sorted(flat[i:i + 10]) == list(range(100, 110)) for i in range(0, len(flat), 10))
    # B = 4 on 10 examples, 5 steps: 2 epochs exactly, each example twice
    steps = BatchStream(Work(), 0, Task(0, 5, 0), 4).take(5)
    assert sorted(np.bincount(steps.reshape(-1) - 100).tolist()) == [2] * 10
