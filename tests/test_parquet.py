"""Parquet run tables: same DataFrame as the CSV table, parts, cut-back on resume."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fedsim.report.parquet import ParquetTableWriter, cut_parts, read_table, table_path
from fedsim.report.tables import CLIENT_COLUMNS, TableWriter
from fedsim.runner.folder import table_columns

ROUND_COLUMNS = table_columns(quadratic=False)["rounds.csv"]


def _round(r: int) -> dict:
    evald = r % 2 == 1
    return dict(round=r, sim_time=2.5 * (r + 1) + 0.1, participants=3, tau_mean=10 / 3, tau_min=None if r == 0 else 1,
                tau_max=7, train_loss=0.5 / (r + 1) if evald else None, test_loss=math.nan if not evald else 1.25,
                test_acc=0.1 * r if evald else None, lr=0.05, diverged=0)  # fmt: skip


def _clients(r: int) -> list[dict]:
    return [dict(round=r, client=c, status=("completed", "dropped", "offline")[c], steps=3 - c, a_norm=0.3 * c,
                 start=0.5, end=1e-7 * c, version=r, staleness=0, weight=1 / 3) for c in range(3)]  # fmt: skip


def _write(folder, rounds, fmt, checkpoint_every=None, parquet_writers=None):
    folder.mkdir(exist_ok=True)
    if fmt == "csv":
        w = TableWriter(folder / "rounds.csv", ROUND_COLUMNS), TableWriter(folder / "clients.csv", CLIENT_COLUMNS)
    else:
        w = parquet_writers or (ParquetTableWriter(table_path(folder, "rounds"), ROUND_COLUMNS),
                                ParquetTableWriter(table_path(folder, "clients"), CLIENT_COLUMNS))  # fmt: skip
    for r in rounds:
        w[0].write([_round(r)])
        w[1].write(_clients(r))
        if checkpoint_every and (r + 1) % checkpoint_every == 0:
            w[0].sync()
            w[1].sync()
    return w


@pytest.mark.parametrize("name", ["rounds", "clients"])
def test_parquet_reads_back_as_the_csv_table(tmp_path, name):
    for fmt in ("csv", "parquet"):
        for w in _write(tmp_path / fmt, range(5), fmt, checkpoint_every=2):
            w.close()
    csv, pq = read_table(tmp_path / "csv", name), read_table(tmp_path / "parquet", name)
    pd.testing.assert_frame_equal(pq, csv)
    assert len(csv) == (5 if name == "rounds" else 15)
    # sync at rounds 2 and 4, close writes the rest: three parts
    assert sorted(p.name for p in table_path(tmp_path / "parquet", name).iterdir()) == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]  # fmt: skip


def test_rows_per_part_and_empty_sync(tmp_path):
    w = ParquetTableWriter(tmp_path / "t.parquet", ["round", "x"], rows_per_part=4)
    w.sync()
    assert w.parts() == 0  # nothing waiting: no part
    w.write([{"round": i, "x": i / 2} for i in range(9)])  # 9 waiting >= 4: one part of 9
    assert w.parts() == 1
    w.write([{"round": 9}])
    w.close()
    df = read_table(tmp_path, "t")
    assert w.parts() == 2 and df["round"].tolist() == list(range(10))
    assert df["x"].tolist()[:9] == [i / 2 for i in range(9)] and math.isnan(df["x"].iloc[9])


def test_resume_cuts_back_to_the_checkpoint_and_ends_equal(tmp_path):
    whole = tmp_path / "whole"
    for w in _write(whole, range(6), "parquet", checkpoint_every=2):
        w.close()
    # a run that checkpointed after round 3 (parts: 2), wrote a part at round 5's checkpoint and died
    run = tmp_path / "run"
    ws = _write(run, range(6), "parquet", checkpoint_every=2)
    recorded = {"rounds": 2, "clients": 2}  # parts() at the checkpoint after round 3
    (table_path(run, "rounds") / ".part-x.tmp").write_bytes(b"half")  # a part being written when killed
    del ws  # killed: nothing closed
    for name, n in recorded.items():
        cut_parts(table_path(run, name), n)
    assert sorted(p.name for p in table_path(run, "rounds").iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    for w in _write(run, range(4, 6), "parquet", checkpoint_every=2):
        w.close()
    for name in ("rounds", "clients"):
        pd.testing.assert_frame_equal(read_table(run, name), read_table(whole, name))


def test_read_table_falls_back_to_csv(tmp_path):
    (tmp_path / "rounds.csv").write_text("round,sim_time\n0,1.5\n")
    assert read_table(tmp_path, "rounds").to_dict("list") == {"round": [0], "sim_time": [1.5]}


def test_other_columns_take_their_first_values_type(tmp_path):
    w = ParquetTableWriter(tmp_path / "t.parquet", ["round", "note", "count", "share", "empty"])
    w.write([{"round": 0, "note": None, "count": None, "share": None},
             {"round": 1, "note": "a", "count": 3, "share": 0.5}])  # fmt: skip
    w.close()
    df = read_table(tmp_path, "t")
    assert df["note"].isna().tolist() == [True, False] and df["note"].iloc[1] == "a"
    assert df["count"].isna().tolist() == [True, False] and df["count"].iloc[1] == 3  # int with a null: float
    assert str(df["empty"].dtype) == "float64" and df["empty"].isna().all()
    w2 = ParquetTableWriter(tmp_path / "t.parquet", ["round", "note", "count", "share", "empty"])  # reopened
    w2.write([{"round": 2, "note": "b", "count": 4, "share": 1.0, "empty": 2.5}])
    w2.close()
    assert read_table(tmp_path, "t")["empty"].tolist()[2] == 2.5
