"""README's and docs/performance.md's stacked-comparison tables are the rows that
benchmarks/bench_compare_grids.py recorded (benchmarks/results/compare_grids.csv, the last row of
each grid): every number in them is checked here."""

from __future__ import annotations

import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ("straggler", "wire", "devices", "hparams")


def recorded() -> dict[str, dict]:
    with open(ROOT / "benchmarks" / "results" / "compare_grids.csv", newline="") as f:
        rows = {r["grid"]: r for r in csv.DictReader(f)}
    return {g: rows[g] for g in GRIDS if g in rows}


def files(r: dict) -> str:
    if r["clients_same"] != "True":
        return "clients.csv differs"
    if r["rounds_same"] == "True":
        return "byte-identical"
    return f"clients.csv byte-identical; rounds.csv, evals.csv within {r['largest_diff']}"


def readme_row(grid: str, r: dict) -> str:
    return (f"| {grid} | {r['runs']} | {r['stacked_s']} s | {r['stacked_jobs2_s']} s | {r['jobs2_s']} s "
            f"| {r['x_stacked']}x / {r['x_stacked_jobs2']}x |")


def performance_row(grid: str, r: dict) -> str:
    return (f"| {grid} ({r['runs']}, seeds {r['seeds']}) | {r['stacked_s']} s | {r['stacked_jobs2_s']} s | {r['jobs2_s']} s "
            f"| {r['x_stacked']}x / {r['x_stacked_jobs2']}x | {r['stacked_MiB']} / {r['jobs2_MiB']} MiB | {files(r)} |")


def test_the_tables_hold_the_recorded_rows():
    rows = recorded()
    assert "straggler" in rows and "hparams" in rows
    readme = (ROOT / "README.md").read_text()
    perf = (ROOT / "docs" / "performance.md").read_text()
    for grid, r in rows.items():
        assert readme_row(grid, r) in readme, grid
        assert performance_row(grid, r) in perf, grid
    listed = [ln for ln in readme.splitlines() if ln.startswith("| ") and ln.split(" | ")[0][2:] in GRIDS]
    assert len(listed) == len(rows)  # no row that was not recorded


if __name__ == "__main__":  # print the tables' rows (to paste them after a new benchmark run)
    for grid, r in recorded().items():
        print(readme_row(grid, r))
    for grid, r in recorded().items():
        print(performance_row(grid, r))
