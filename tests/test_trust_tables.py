"""Issue 21, Parquet parts and diurnal availability: a part fedsim cannot read as its own is exit 2
naming it (plot, resume); diurnal bounds are validated and peak == trough == 1 is always online."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main

from _tiny_runs import QUAD, exit_2 as _exit2

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def parquet_run(write_yaml, tmp_path):
    sc = write_yaml(QUAD, name="quad.yaml")
    out = tmp_path / "r"
    assert main(["run", str(sc), "--out", str(out), "--quiet", "--format", "parquet"]) == 0
    return sc, out


# --------------------------------------------------------------------------- 7: parts checked
@pytest.mark.parametrize("content", [b"garbage, not parquet", b""])
def test_a_damaged_part_is_exit_2_naming_it(parquet_run, capsys, content, tmp_path):
    sc, out = parquet_run
    part = out / "rounds.parquet" / "part-00000.parquet"
    part.write_bytes(content)
    _exit2(capsys, ["plot", str(out), "--out", str(tmp_path / "fig")], "part-00000.parquet")
    _exit2(capsys, ["run", str(sc), "--resume", str(out), "--quiet"], "part-00000.parquet")


def test_a_strangers_part_past_a_gap_is_exit_2(parquet_run, capsys, tmp_path):
    sc, out = parquet_run
    import shutil

    shutil.copy(out / "rounds.parquet" / "part-00000.parquet", out / "rounds.parquet" / "part-99999.parquet")
    _exit2(capsys, ["plot", str(out), "--out", str(tmp_path / "fig")], "part-99999.parquet", "gap")


def test_a_part_declaring_more_rows_than_a_part_holds_is_refused(parquet_run, monkeypatch):
    from fedsim.report import parquet

    _, out = parquet_run
    monkeypatch.setattr(parquet, "MAX_PART_ROWS", 2)  # fedsim's parts of this run hold more
    with pytest.raises(parquet.TableError, match="declares .* rows, more than a part holds"):
        parquet.read_table(out, "clients")


def test_a_part_that_is_a_link_is_refused_when_read(parquet_run, tmp_path):
    from fedsim.report import parquet

    _, out = parquet_run
    part = out / "rounds.parquet" / "part-00000.parquet"
    moved = tmp_path / "moved.parquet"
    part.rename(moved)
    os.symlink(moved, part)
    with pytest.raises(parquet.TableError, match="symbolic link"):
        parquet.read_table(out, "rounds")


# --------------------------------------------------------------------------- 8: diurnal bounds
@pytest.mark.parametrize(
    "diurnal, key",
    [
        ({"peak": 1e-12, "trough": 0}, "system.availability.peak"),
        ({"peak": 1, "trough": 1 - 1e-12}, "system.availability.trough"),
        ({"period": 1e-320}, "system.availability.period"),
        ({"phase": 1e308}, "system.availability.phase"),
        ({"phase": -1e308}, "system.availability.phase"),
        ({"phase": {"dist": "uniform", "low": 0, "high": 1e300}}, "system.availability.phase"),
    ],
)
def test_diurnal_bounds_are_validated(write_yaml, capsys, diurnal, key):
    sc = write_yaml({**QUAD, "system": {"availability": {"model": "diurnal", **diurnal}}})
    _exit2(capsys, ["validate", str(sc)], key)


def test_peak_equal_trough_one_is_always_online(write_yaml, tmp_path):
    """Today this loops forever; now every client is online at every round: with policy wait and
    no latency, a round lasts exactly local_steps / speed = 2 s (speed 1)."""
    sc = write_yaml({**QUAD, "system": {"availability": {"model": "diurnal", "peak": 1, "trough": 1}}})
    out = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "fedsim", "run", str(sc), "--out", str(out), "--quiet"], env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert time.perf_counter() - t < 120
    import pandas as pd

    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["participants"].tolist() == [2] * 6
    assert rounds["sim_time"].tolist() == [2.0 * (r + 1) for r in range(6)]


def test_always_online_diurnal_timeline_has_no_toggle():
    from fedsim.availability.diurnal import Diurnal, DiurnalStates, DiurnalTimeline
    import numpy as np

    d = Diurnal(86400.0, 1.0, 1.0, 0.0, 3600.0)
    tl = DiurnalTimeline(d, 0, 3, 0.0)
    assert tl.initial and not tl.changes and list(tl.toggles()) == []
    st = DiurnalStates(d, 0, np.arange(5), np.zeros(5))
    st.advance(1e9)
    assert st.online.all() and np.isinf(st.next).all()


def test_peak_equal_trough_below_one_still_toggles():
    from fedsim.availability.diurnal import Diurnal, DiurnalStates
    import numpy as np

    st = DiurnalStates(Diurnal(86400.0, 0.5, 0.5, 0.0, 60.0), 0, np.arange(200), np.zeros(200))
    st.advance(1e5)
    assert 0.3 < st.online.mean() < 0.7 and np.isfinite(st.next).all()


# --------------------------------------------------------------------------- also noticed: swapped parts
def test_resume_refuses_parts_swapped_with_equal_row_counts(tmp_path, capsys):
    """Two parts of 2 rounds each swapped by hand: row counts and names match the checkpoint, the
    rounds inside do not run forward."""
    from test_parquet_run import BASE, _checkpointed_copy

    sc = tmp_path / "pq.yaml"
    sc.write_text(yaml.safe_dump(BASE))
    assert main(["run", str(sc), "--out", str(tmp_path / "ref"), "--quiet", "--format", "parquet"]) == 0
    for table in ("rounds.parquet", "clients.parquet"):
        out = _checkpointed_copy(tmp_path / "ref", tmp_path / f"swap-{table}")
        a, b = out / table / "part-00000.parquet", out / table / "part-00001.parquet"
        a.rename(tmp_path / "x")
        b.rename(a)
        (tmp_path / "x").rename(b)
        if table == "clients.parquet":
            from fedsim.report.parquet import part_rows

            if part_rows(out / table)[:2] != part_rows(tmp_path / "ref" / table)[1::-1]:
                continue
        _exit2(capsys, ["run", str(sc), "--resume", str(out), "--quiet"], table, "out of order")
