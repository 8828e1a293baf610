"""docs/reliability.md states fedsim's bounds: its table must equal fedsim/limits.py."""

import re
from pathlib import Path

from fedsim import limits

DOC = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"


def _table() -> dict[str, str]:
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", DOC.read_text(), flags=re.M)
    return {name: value.strip() for name, value in rows}


def _number(text: str):
    text = text.replace(",", "")
    return float(text) if re.search(r"[.e]", text) else int(text)


def test_every_limit_is_documented_with_its_value():
    table = _table()
    assert sorted(table) == sorted(limits.__all__)
    for name, text in table.items():
        value = getattr(limits, name)
        assert _number(text) == value, f"{name}: doc says {text}, code has {value}"
        assert type(_number(text)) is type(value), name


def test_doc_examples_match_the_constants():
    text = DOC.read_text()
    assert "1 GiB" in text and "15 s" in text  # the fuzz test's bounds (tests/test_fuzz_scenario.py)
    from tests.test_fuzz_scenario import MEMORY_BYTES, TIMEOUT_S

    assert MEMORY_BYTES == 2**30 and TIMEOUT_S == 15
    assert limits.MAX_SCENARIO_BYTES == 16 * 2**20 and "(16 MiB)" in text
