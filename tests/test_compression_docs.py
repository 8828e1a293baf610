"""docs/compression.md states what the code does: its table of compressors names the registered
ones with their keys, its byte formulas evaluate to each compressor's ``payload_bytes``, and its
scenario keys are the sections' fields with their defaults."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from fedsim.compression import CompressionSection
from fedsim.registries import COMPRESSORS
from fedsim.scenario import parse_scenario

DOC = Path(__file__).resolve().parent.parent / "docs" / "compression.md"
BUILT_IN = ("none", "topk", "randk", "qsgd", "sign", "fp16")


def table(header: str) -> list[list[str]]:
    """The cells of the table whose header line is ``header`` (header and rule left out)."""
    lines = DOC.read_text().splitlines()
    i = lines.index(header)
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))])
    return rows


def compressor_rows() -> dict[str, tuple[set[str], str]]:
    rows = table("| name | keys | bytes |")
    return {r[0].strip("`"): (set(re.findall(r"`(\w+)`", r[1])), r[2].strip("`")) for r in rows}


def section(name: str) -> type[CompressionSection]:
    return COMPRESSORS.get(name)


def test_the_table_names_the_built_in_compressors_with_their_keys():
    rows = compressor_rows()
    assert tuple(rows) == BUILT_IN and set(BUILT_IN) <= set(COMPRESSORS.names())
    for name, (keys, _) in rows.items():
        assert keys == set(section(name).model_fields) - {"name", "error_feedback"}, name


@pytest.mark.parametrize("name", BUILT_IN)
def test_the_byte_formulas_are_the_code(name):
    formula = compressor_rows()[name][1]
    for n in (1, 7, 100, 1001, 123_457, 2**31, 2**31 + 3):
        for b in (2, 4, 8):
            for r, s in ((0.07, 1), (0.01, 2), (0.3, 3), (0.5, 5), (0.29, 7), (1.0, 255)):
                keys = {"ratio": r} if "ratio" in section(name).model_fields else {}
                keys |= {"levels": s} if name == "qsgd" else {}
                comp = section(name)(name=name, **keys).compressor()
                k = max(1, math.ceil(Fraction(str(r)) * n))  # the doc's k: r as written
                env = {"n": n, "b": b, "k": min(k, n), "ib": 4 if n <= 2**31 else 8, "s": s,
                       "ceil": math.ceil, "log2": math.log2}
                assert eval(formula, {"__builtins__": {}}, env) == comp.payload_bytes(n, b), (name, n, b, r, s)


def test_the_scenario_keys_are_the_sections_fields():
    rows = {r[0].strip("`"): r[1] for r in table("| key | default | meaning |")}
    fields = {}
    for name in BUILT_IN:
        fields.update(section(name).model_fields)
    assert set(rows) == set(fields)
    assert rows["error_feedback"] == "`false`" and fields["error_feedback"].default is False
    for key in ("ratio", "levels"):
        assert rows[key] == "required" and fields[key].is_required()
    assert rows["scaled"] == "`not error_feedback`"
    for ef in (False, True):
        sec = section("randk")(name="randk", ratio=0.5, error_feedback=ef)
        assert sec.scaled is (not ef)


def test_the_example_is_a_valid_algorithm_section():
    text = DOC.read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    alg = parse_scenario({"data": {"name": "quadratic", "clients": 2}, "round": {"policy": "window", "window": 5.0},
                          **yaml.safe_load(block)}).algorithm
    assert alg.compression.name == "topk" and alg.compression.error_feedback and alg.downlink_compression.name == "fp16"


def test_the_stated_levels_bound_is_the_code():
    from fedsim.compression.qsgd import MAX_LEVELS

    assert "from 1 to 65535" in DOC.read_text() and MAX_LEVELS == 65535
