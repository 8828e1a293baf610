"""docs/extending.md: its Python examples run as written (in order, one namespace), and the
registry tables it states are the registered built-ins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "extending.md"


@pytest.fixture
def clean_registries():
    from fedsim.registries import ALGORITHMS, AVAILABILITY, COMPRESSORS, CORRECTIONS, SELECTORS, SERVER_OPTS

    yield
    for reg in (ALGORITHMS, CORRECTIONS, SERVER_OPTS):
        reg.unregister("feddyn")
    AVAILABILITY.unregister("duty_cycle")
    SELECTORS.unregister("least_recent")
    COMPRESSORS.unregister("bf16")


def test_examples_run(clean_registries):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 5
    for code in blocks:
        exec(compile(code, str(DOC), "exec", dont_inherit=True), {"__name__": "extending_example"})  # not this file's __future__ flags


def test_built_in_names_are_the_registered_ones():
    from fedsim import registries as R

    text = DOC.read_text()
    line = text[text.index("Built-in names:"):text.index("(docs/algorithms.md has")]
    named = {kind: set(re.findall(r"`(\w+)`", part)) for kind, part in
             zip(("solver", "correction", "aggregation", "server_opt", "staleness"),
                 re.split(r"; ", line))}
    assert named["solver"] == set(R.SOLVERS.names())
    assert named["correction"] == set(R.CORRECTIONS.names())
    assert named["aggregation"] == set(R.AGGREGATIONS.names())
    assert named["server_opt"] == set(R.SERVER_OPTS.names())
    assert named["staleness"] == set(R.STALENESS.names())


def test_preset_keys_are_base():
    from fedsim.algorithms.presets import BASE

    text = DOC.read_text()
    seg = text[text.index("the keys of\n`fedsim.algorithms.presets.BASE`"):text.index("keys it leaves out")]
    assert re.findall(r"`(\w+)`", seg.split("(", 1)[1]) == list(BASE)
