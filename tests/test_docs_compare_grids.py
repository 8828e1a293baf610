"""README's and docs/performance.md's stacked-comparison tables are the rows that
benchmarks/bench_compare_grids.py recorded (benchmarks/results/compare_grids.csv, the last row of
each grid), and docs/performance.md's profile table the rows of benchmarks/profile_shares.py
(results/stack_profile.csv) and of each run alone (results/alone_profile.csv), and the grids against
the code before stacks (results/compare_filed.csv): every number in them is checked here."""

from __future__ import annotations

import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ("straggler", "wire", "devices", "hparams")


def recorded(name: str = "compare_grids") -> dict[str, dict]:
    with open(ROOT / "benchmarks" / "results" / f"{name}.csv", newline="") as f:
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


def profile_row(grid: str, r: dict) -> str:
    return (f"| {grid} ({r['runs_profiled']} of {r['runs']} runs) | {r['data_s']} s | {r['compression_s']} s "
            f"| {r['training_s']} s | {r['evaluation_s']} s | {r['imports_s']} s | {r['rest_s']} s "
            f"| {r['floor_s']} s | {r['jobs2_s']} s | {r['best_x']}x |")


def test_the_profile_table_holds_the_recorded_rows_and_their_bound():
    rows = recorded("stack_profile")
    grids = recorded()
    assert set(rows) == set(GRIDS)
    perf = (ROOT / "docs" / "performance.md").read_text()
    for grid, r in rows.items():
        assert profile_row(grid, r) in perf, grid
        # the bound: the grid's tensor arithmetic, shared by two processes when a run uses one thread
        arith = sum(float(r[f"{p}_s"]) for p in ("compression", "training", "evaluation"))
        scale = int(r["runs"]) / int(r["runs_profiled"]) / (2 if r["threads"] == "1" else 1)
        # each part is recorded to 0.1 s: three half-tenths scaled, and the floor's own rounding
        assert abs(arith * scale - float(r["floor_s"])) <= 0.15 * scale + 0.05, grid
        assert float(r["jobs2_s"]) == float(grids[grid]["jobs2_s"]), grid  # the recorded baseline
        assert abs(float(r["jobs2_s"]) / float(r["floor_s"]) / float(r["best_x"]) - 1) <= 0.01, grid
        assert int(r["runs"]) == int(grids[grid]["runs"]), grid


def alone_row(grid: str, r: dict) -> str:
    return (f"| {grid} ({r['runs_profiled']} runs) | {r['data_s']} s | {r['compression_s']} s | {r['training_s']} s "
            f"| {r['evaluation_s']} s | {r['alone_s']} s | {r['stacked_s']} s | {r['saved_x']}x |")


def test_the_alone_table_holds_the_recorded_rows_against_the_stacked_profile():
    rows = recorded("alone_profile")
    stacked = recorded("stack_profile")
    assert set(rows) == set(GRIDS)
    perf = (ROOT / "docs" / "performance.md").read_text()
    for grid, r in rows.items():
        assert alone_row(grid, r) in perf, grid
        arith = sum(float(r[f"{p}_s"]) for p in ("compression", "training", "evaluation"))
        assert abs(arith / int(r["runs_profiled"]) - float(r["alone_s"])) <= 0.15 / int(r["runs_profiled"]), grid
        # compared with the grid's last stacked profile, recorded in the same sitting
        s = stacked[grid]
        assert r["stacked_profile"] == s["date"], grid
        per_run = sum(float(s[f"{p}_s"]) for p in ("compression", "training", "evaluation")) / int(s["runs_profiled"])
        assert abs(per_run - float(r["stacked_s"])) <= 0.15 / int(s["runs_profiled"]), grid
        assert abs(float(r["alone_s"]) / float(r["stacked_s"]) / float(r["saved_x"]) - 1) <= 0.01, grid


def filed_row(grid: str, r: dict) -> str:
    same = "byte-identical" if r["rounds_same"] == "True" and r["evals_same"] == "True" else (
        f"clients.csv byte-identical; rounds.csv, evals.csv within {r['largest_diff']}")
    if r["clients_same"] != "True":
        same = "clients.csv differs"
    return (f"| {grid} ({r['runs']}) | {r['filed_jobs2_s']} s | {r['stacked_jobs2_s']} s | {r['x']}x | {same} |")


def test_the_filed_table_holds_the_recorded_rows():
    rows = recorded("compare_filed")
    assert set(rows) == set(GRIDS)
    perf = (ROOT / "docs" / "performance.md").read_text()
    flat = " ".join(perf.split())
    for grid, r in rows.items():
        assert filed_row(grid, r) in perf, grid
        assert r["filed"] == "f9acf61", grid
        assert abs(float(r["filed_jobs2_s"]) / float(r["stacked_jobs2_s"]) / float(r["x"]) - 1) <= 0.01, grid
    s = rows["straggler"]
    # the prose: the straggler grid's speed-up and files, the filed code's time
    assert float(s["x"]) >= 5 and s["rounds_same"] == s["evals_same"] == s["clients_same"] == "True"
    assert f"the same code took {s['filed_jobs2_s']} s here with `--jobs 2`, alone" in flat
    assert f"`--no-stack --jobs 2` took {recorded()['straggler']['jobs2_s']} s for the grid" in flat
    assert all(float(r["x"]) < {"wire": 3, "devices": 3, "hparams": 10}[g] for g, r in rows.items() if g != "straggler")
    readme = " ".join((ROOT / "README.md").read_text().split())
    figures = ", ".join(f"{g} {rows[g]['x']}x" for g in GRIDS)
    assert f"(f9acf61), measured alone in one invocation each: {figures} (`benchmarks/results/compare_filed.md`)" in readme


def test_the_bounds_and_earlier_figures_the_prose_quotes_were_recorded():
    prof = recorded("stack_profile")
    readme = " ".join((ROOT / "README.md").read_text().split())
    bounds = {g: prof[g]["best_x"] for g in GRIDS}
    assert (f"at most {bounds['straggler']}x for the straggler grid, {bounds['wire']}x for wire, "
            f"{bounds['devices']}x for devices and {bounds['hparams']}x for the 500 cells") in readme
    perf = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    assert f"({bounds['straggler']}x for 5x:" in perf
    with open(ROOT / "benchmarks" / "results" / "stack_profile.csv", newline="") as f:
        straggler = [(r["best_x"], r["jobs2_s"]) for r in csv.DictReader(f) if r["grid"] == "straggler"]
    assert ("5.24", "180.1") in straggler and "the straggler bound read 5.24x, against a baseline of 180.1 s" in perf
    assert ("9.42", "403.9") in straggler and "the bound was 9.42x" in perf
    assert ("5.43", "226.5") in straggler and "take 403.9 s instead of 226.5 s" in perf
    alone, stacked = recorded("alone_profile")["straggler"], prof["straggler"]
    assert f"the same 36 runs spent {alone['data_s']} s generating clients against {stacked['data_s']} s stacked" in perf


if __name__ == "__main__":  # print the tables' rows (to paste them after a new benchmark run)
    for grid, r in recorded().items():
        print(readme_row(grid, r))
    for grid, r in recorded().items():
        print(performance_row(grid, r))
    for grid, r in recorded("stack_profile").items():
        print(profile_row(grid, r))
    for grid, r in recorded("alone_profile").items():
        print(alone_row(grid, r))
    for grid, r in recorded("compare_filed").items():
        print(filed_row(grid, r))


def test_a_profile_sample_counts_in_the_first_part_its_stack_passes_through():
    import importlib.util

    spec = importlib.util.spec_from_file_location("profile_shares", ROOT / "benchmarks" / "profile_shares.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lines = [
        "<module> (x.py:1);train_rows (fedsim/engine/train.py:133);SyntheticPopulation.gather (s.py:9) 4\n",
        "<module> (x.py:1);train_rows (fedsim/engine/train.py:133);grad (t.py:2) 4\n",
        "<module> (x.py:1);compress_cohort (c.py:3);train_rows_like (q.py:1) 2\n",
        "<module> (x.py:1);evaluate_together (e.py:1) 1\n",
        "<module> (x.py:1);client_metrics_together (e.py:2) 1\n",
        "<module> (x.py:1);_find_and_load (<frozen>:1) 2\n",
        "<module> (x.py:1);round_loop (l.py:4) 3\n",
        # a run alone: its cohort and its evaluations answered one request at a time
        "<module> (x.py:1);TrainRequests.run (r.py:5);train_cohort (t.py:71) 4\n",
        "<module> (x.py:1);EvalRequest.run (r.py:31);global_objective (e.py:54) 2\n",
        "<module> (x.py:1);ClientEvalRequest.run (r.py:52) 2\n",
        "<module> (x.py:1);ClientEvalRequest.running (r.py:60) 1\n",
    ]
    assert mod.shares(lines, 4.0) == {"data": 1.0, "compression": 0.5, "training": 2.0, "evaluation": 1.5,
                                      "imports": 0.5, "rest": 1.0}
    # 36 of 108 runs profiled, one thread a run: the three arithmetic parts x 3 / 2
    parts = {"data": 9.0, "compression": 1.0, "training": 4.0, "evaluation": 1.0, "imports": 1.0, "rest": 1.0}
    assert mod.floor(parts, 36, 108, 1) == 9.0 and mod.floor(parts, 36, 108, 2) == 18.0
    assert mod.arithmetic_per_run(parts, 4) == 1.5  # (1 + 4 + 1) / 4
    import pytest

    with pytest.raises(ValueError, match="line 2 is not py-spy's raw format"):
        mod.shares(["a (b:1) 3\n", "a (b:1) three\n"], 1.0)


def test_the_parts_of_lines_py_spy_wrote():
    """Seven lines of a real ``py-spy record -f raw`` of stacked comparisons (tests/fixtures), one in
    each part and one of samples without a Python frame (a bare count: left out), read as py-spy
    writes them: frames ``name (file:line)`` joined by ``;``, then the sample count."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("profile_shares", ROOT / "benchmarks" / "profile_shares.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(Path(__file__).with_name("fixtures") / "py-spy-stack.raw") as f:
        got = mod.shares(f, 1.0)
    # the counts at the lines' ends, in the fixture's order: data, compression, training,
    # evaluation, imports, rest (the seventh, " 36", has no frame)
    assert got == {"data": 89.0, "compression": 2.0, "training": 4.0, "evaluation": 1.0, "imports": 1.0, "rest": 4.0}


def _bench(name: str):
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_filed_takes_only_a_commit_of_this_repository_and_never_a_git_option(tmp_path):
    import subprocess

    import pytest

    bench = _bench("bench_compare_grids")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert bench.commit_of("HEAD") == head and len(head) == 40
    planted = tmp_path / "written"
    for bad in (f"--output={planted}", "-o", "no-such-revision", "HEAD:README.md", ""):
        with pytest.raises(SystemExit, match="names no commit of this repository"):
            bench.commit_of(bad)
    assert not planted.exists()


def test_profile_shares_refuses_no_profiled_runs(capsys):
    import pytest

    with pytest.raises(SystemExit) as e:
        _bench("profile_shares").main(["hparams", "x.raw", "--runs-profiled", "0"])
    assert e.value.code == 2 and "--runs-profiled: must be at least 1" in capsys.readouterr().err
