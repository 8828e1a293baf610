"""``--format parquet`` end to end: a run, a resumed run and a clock-only run read back (``load_run``,
``load_compare``) equal to the CSV run of the same scenario.

Dtypes: both formats read back alike. Integer columns are int64 (float64 with NaN when a cell is
empty, e.g. ``tau_min`` of a round nobody finished: ``read_csv`` and pyarrow both do this), float
columns float64 (an all-empty column such as a clock-only ``a_norm`` too), ``status`` pandas'
string dtype. Floats are compared exactly: the CSV holds each float's shortest repr, which reads
back to the same double, and Parquet stores the double itself.
"""

import functools
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import fedsim.clock_only
from fedsim import load_compare, load_run
from fedsim.cli import main
from fedsim.report.parquet import ParquetTableWriter, part_rows
from fedsim.report.results import run_complete, summarize

from test_resume import BASE as RESUME_BASE  # the resume tests' scenario: Markov outages, SCAFFOLD, checkpoints

BASE = {**RESUME_BASE, "name": "pq"}
FAULTS = Path(__file__).with_name("_faults.py")


def _equal(a: Path, b: Path) -> None:
    ra, rb = load_run(a), load_run(b)
    pd.testing.assert_frame_equal(ra.rounds, rb.rounds, check_exact=True)
    pd.testing.assert_frame_equal(ra.clients, rb.clients, check_exact=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The scenario run uninterrupted as CSV and as Parquet."""
    tmp = tmp_path_factory.mktemp("pq")
    path = tmp / "pq.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["run", str(path), "--out", str(tmp / "csv"), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(tmp / "parquet"), "--quiet", "--format", "parquet"]) == 0
    return path, tmp / "csv", tmp / "parquet"


def test_parquet_run_reads_back_as_the_csv_run(runs):
    path, csv, pq = runs
    assert not (pq / "rounds.csv").exists() and not (pq / "clients.csv").exists()
    # one part per checkpoint sync (next rounds 2, 4, 6) and one at the end: 2 rounds each
    assert part_rows(pq / "rounds.parquet") == [2, 2, 2, 2]
    _equal(pq, csv)
    assert len(load_run(pq).rounds) == 8
    assert (pq / "model.pt").read_bytes() == (csv / "model.pt").read_bytes()
    assert run_complete(pq)


def test_load_compare_and_summaries_over_parquet_runs(runs):
    """``fedsim compare`` writes CSV; ``load_compare`` over a folder of run folders reads either."""
    _, csv, pq = runs
    for table in ("rounds", "clients"):
        df = load_compare(pq.parent, table=table)
        a = df[df["cell"] == "csv"].drop(columns=["cell", "folder"]).reset_index(drop=True)
        b = df[df["cell"] == "parquet"].drop(columns=["cell", "folder"]).reset_index(drop=True)
        assert len(a) == len(load_run(csv)[0 if table == "rounds" else 1])
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    per_run, _ = summarize(pq.parent, write=False)
    a, b = (per_run[per_run["cell"] == c].drop(columns=["cell", "folder"]).reset_index(drop=True)
            for c in ("csv", "parquet"))  # fmt: skip
    pd.testing.assert_frame_equal(a, b)
    assert per_run["complete"].tolist() == [1, 1]


@pytest.mark.parametrize("fault", ["round:5", "checkpoint:6"])
def test_killed_parquet_run_resumed_equals_uninterrupted(runs, tmp_path, fault):
    """SIGKILL after round 5's rows (its part not yet written: rounds 4-5 are lost and redone) or
    in the middle of the checkpoint for round 6 (the part of rounds 4-5 is on disk but the last
    checkpoint records 2 parts: resume deletes it). Resuming keeps the Parquet format."""
    path, _, pq = runs
    out = tmp_path / "run"
    cmd = [sys.executable, str(FAULTS), fault, "run", str(path), "--quiet", "--out", str(out), "--format", "parquet"]
    assert subprocess.run(cmd, capture_output=True).returncode == -signal.SIGKILL
    assert part_rows(out / "rounds.parquet") == ([2, 2] if fault == "round:5" else [2, 2, 2])
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    assert part_rows(out / "rounds.parquet") == [2, 2, 2, 2]
    assert not (out / "rounds.csv").exists()
    _equal(out, pq)
    assert (out / "model.pt").read_bytes() == (pq / "model.pt").read_bytes()


def _checkpointed_copy(src: Path, dst: Path) -> Path:
    """A copy of a finished Parquet run as a run killed after its last checkpoint (round 6)."""
    import shutil

    shutil.copytree(src, dst)
    (dst / "model.pt").unlink()
    return dst


def test_resume_refuses_tables_that_do_not_match(runs, tmp_path, capsys):
    path, _, pq = runs
    out = _checkpointed_copy(pq, tmp_path / "a")
    assert main(["run", str(path), "--resume", str(out), "--quiet", "--format", "csv"]) == 2
    assert "holds a run with parquet tables; --format csv does not match" in capsys.readouterr().err
    # the checkpoint (next round 6) records 3 parts; one of them is gone
    (out / "clients.parquet" / "part-00002.parquet").unlink()
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 2
    assert "clients.parquet does not match its checkpoint" in capsys.readouterr().err  # a gap: 0, 1, 3
    out = _checkpointed_copy(pq, tmp_path / "b")
    for p in ("part-00001.parquet", "part-00002.parquet", "part-00003.parquet"):
        (out / "rounds.parquet" / p).unlink()
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 2
    assert "rounds.parquet has 1 parts; its checkpoint needs 3" in capsys.readouterr().err
    # rounds parts that hold other rows than the checkpoint's 6 rounds
    out = _checkpointed_copy(pq, tmp_path / "c")
    w = ParquetTableWriter(tmp_path / "one", list(load_run(pq).rounds.columns))
    w.write(load_run(pq).rounds.head(1).to_dict("records"))
    w.close()
    (tmp_path / "one" / "part-00000.parquet").replace(out / "rounds.parquet" / "part-00001.parquet")
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 2
    assert "rounds.parquet does not match its checkpoint" in capsys.readouterr().err
    # nothing was cut by a refused resume
    assert part_rows(out / "rounds.parquet") == [2, 1, 2, 2]


def test_resume_refuses_a_csv_run_as_parquet(runs, tmp_path, capsys):
    path, csv, _ = runs
    out = _checkpointed_copy(csv, tmp_path / "a")
    assert main(["run", str(path), "--resume", str(out), "--quiet", "--format", "parquet"]) == 2
    assert "holds a run with csv tables; --format parquet does not match" in capsys.readouterr().err


def test_force_over_a_parquet_run_deletes_only_fedsims_files(runs, tmp_path):
    path, csv, pq = runs
    out = _checkpointed_copy(pq, tmp_path / "run")
    (out / "notes.txt").write_text("mine")
    (out / "clients.parquet" / "keep.txt").write_text("mine too")
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2  # a run is there: refused
    assert main(["run", str(path), "--out", str(out), "--quiet", "--force"]) == 0
    assert not (out / "rounds.parquet").exists()
    assert sorted(p.name for p in (out / "clients.parquet").iterdir()) == ["keep.txt"]
    assert (out / "notes.txt").read_text() == "mine"
    _equal(out, csv)  # the CSV tables are read, not the emptied part folder
    assert main(["run", str(path), "--out", str(out), "--quiet", "--force", "--format", "parquet"]) == 0
    assert not (out / "rounds.csv").exists() and not (out / "clients.csv").exists()
    _equal(out, pq)


SCHEDULE = {
    "name": "sched", "seed": 5, "rounds": 6,
    "data": {"name": "quadratic", "clients": 12, "dim": 2},
    "system": {"speed": {"dist": "lognormal", "median": 3.0, "sigma": 0.6}, "latency": 0.25},
    "round": {"policy": "deadline", "deadline": 3.0, "local_steps": 6},
}
SCHEDULES = {
    "outages": {"availability": [[[1.0, 2.5]], [], [[0.0, 4.0]]] + [[]] * 9},
    "markov": {"availability": {"model": "markov", "mean_online": 6.0, "mean_offline": 2.0}},
}


@pytest.mark.parametrize("case", sorted(SCHEDULES))
def test_schedule_only_parquet_equals_csv(tmp_path, monkeypatch, case):
    """Clock-only tables: 7-row parts, so rounds' numpy columns are batched across part borders."""
    raw = {**SCHEDULE, "system": {**SCHEDULE["system"], **SCHEDULES[case]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(fedsim.clock_only, "ParquetTableWriter", functools.partial(ParquetTableWriter, rows_per_part=7))
    assert main(["run", str(path), "--out", str(tmp_path / "csv"), "--schedule-only"]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "pq"), "--schedule-only", "--format", "parquet"]) == 0
    rows = part_rows(tmp_path / "pq" / "clients.parquet")
    assert sum(rows) == 6 * 12 and all(r >= 7 for r in rows[:-1]) and len(rows) > 1
    _equal(tmp_path / "pq", tmp_path / "csv")
    clients = load_run(tmp_path / "pq").clients
    assert clients["a_norm"].isna().all() and clients["a_norm"].dtype == "float64"


def test_compare_format_parquet_reads_back_as_csv_compare(tmp_path):
    """``fedsim compare --format parquet``: every run folder holds part folders; ``load_compare``
    and the per-run summary equal the CSV comparison's; ``fedsim plot`` draws the per-cell figures
    (which read a run's tables directly) from them."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "rounds": 4, "checkpoint": {"every": 0}}))
    for fmt in ("csv", "parquet"):
        cmd = ["compare", str(path), "--algorithms", "fedavg,scaffold", "--seeds", "0,1", "--quiet",
               "--out", str(tmp_path / fmt), "--format", fmt]  # fmt: skip
        assert main(cmd) == 0
    folders = sorted(p.parent for p in (tmp_path / "parquet").rglob("model.pt"))
    assert len(folders) == 4
    assert all((f / "rounds.parquet").is_dir() and not (f / "rounds.csv").exists() for f in folders)
    for table in ("rounds", "clients"):
        a, b = (load_compare(tmp_path / fmt, table=table).drop(columns=["folder"]) for fmt in ("csv", "parquet"))
        assert len(a) == (16 if table == "rounds" else len(b)) and len(a) > 0
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    a, b = (pd.read_csv(tmp_path / fmt / "runs.csv").drop(columns=["folder"]) for fmt in ("csv", "parquet"))
    pd.testing.assert_frame_equal(a, b)
    assert b["complete"].tolist() == [1, 1, 1, 1]
    assert main(["plot", str(tmp_path / "parquet"), "--out", str(tmp_path / "fig")]) == 0
    names = {p.name for p in (tmp_path / "fig").iterdir()}
    assert {f"{k}_{a}-window.png" for k in ("tau", "timeline") for a in ("fedavg", "scaffold")} <= names
