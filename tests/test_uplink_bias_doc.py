"""docs/devices.md's uplink-bias table states the numbers analysis/devices_study/uplink_bias.txt holds
(the script's own output: mean +- std over seeds 0, 1, 2 at both horizons)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _means(text: str) -> dict[int, dict[str, tuple[str, str]]]:
    """{horizon s: {row name: (windows 'm +- s', waiting 'm +- s')}} from the txt's mean blocks."""
    out: dict[int, dict[str, tuple[str, str]]] = {}
    for block in text.split("# ===== both models standing at ")[1:]:
        horizon = int(block.split(" s", 1)[0])
        mean = block.split("## mean +- standard deviation", 1)[1].split("##", 1)[0]
        rows = {}
        for line in mean.splitlines()[2:]:
            m = re.match(r"^(\S+(?: \S+)?)\s+([\d.]+ \+- [\d.]+)\s+([\d.]+ \+- [\d.]+)$", line.strip())
            if m:
                rows[m.group(1)] = (m.group(2), m.group(3))
        out[horizon] = rows
    return out


def _pm(s: str) -> str:
    return s.replace(" +- ", " ± ")


def test_docs_table_matches_the_results_file():
    means = _means((ROOT / "analysis/devices_study/uplink_bias.txt").read_text())
    assert set(means) == {2700, 10800}
    doc = (ROOT / "docs/devices.md").read_text()
    section = doc.split("### Non-IID data correlated with uplink speed", 1)[1]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "±" in r]
    assert len(rows) == 4
    for row, (horizon, policy) in zip(rows, [(2700, 0), (2700, 1), (10800, 0), (10800, 1)]):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == ("windows", "waiting")[policy]
        assert cells[2] == _pm(means[horizon]["test acc"][policy])
        assert cells[3] == _pm(means[horizon]["acc q0"][policy])
        for cell, q in zip(cells[4:7], ("q1", "q2", "q3")):
            assert cell == means[horizon][f"acc {q}"][policy].split(" +- ")[0]
