"""Hostile dataset files (issue 28 items 1, 3, 4, 5, 11, 12, 13, 14), under the fuzz contract of
tests/test_fuzz_scenario.py: each case reads the files with fedsim's reader in a fresh process
limited to MEMORY_BYTES of data memory and TIMEOUT_S seconds, and must exit 0 or 2 with one line
(tests/_read_dataset.py reads every client and test part, as a run would; a few cases go through
``fedsim run --schedule-only`` itself).

FIFOs, device nodes (made with ``mknod`` when this user may, else skipped), links to devices,
decompression bombs (PNG pixels, HDF5 gzip, SQLite zlib, Parquet dictionary pages, compressed
Arrow batches), deep nesting and huge numbers, oversized files, and random damage.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_fuzz_scenario import MEMORY_BYTES, TIMEOUT_S, _assert_0_or_2, _cli, _limit_memory

ROOT = Path(__file__).resolve().parents[1]
READ = Path(__file__).resolve().parent / "_read_dataset.py"
PIX = [0.5] * 784


def _read(kind: str, folder: Path) -> tuple[int, str]:
    """(exit code, stderr) of reading ``folder`` with reader ``kind`` under the fuzz bounds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, str(READ), kind, str(folder)], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT_S, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {kind} {folder}: no exit within {TIMEOUT_S} s (a FIFO blocking, a bomb)")
    assert time.perf_counter() - t0 < TIMEOUT_S
    return r.returncode, r.stderr


def _refused(kind: str, folder: Path, *expected: str) -> str:
    code, err = _read(kind, folder)
    assert code == 2, err[-2000:]
    _assert_0_or_2(code, err)
    for text in expected:
        assert text in err, err
    return err.strip()


# ---------------------------------------------------------------- writers of small valid folders
def _leaf(root: Path, train: dict | None = None, raw: str | None = None) -> Path:
    users = train or {"u": {"x": [PIX], "y": [1]}}
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
        doc = {"users": list(users), "num_samples": [len(v["y"]) for v in users.values()], "user_data": users}
        (root / split / "a.json").write_text(json.dumps(doc))
    if raw is not None:
        (root / "train" / "a.json").write_text(raw)
    return root


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _fedscale(root: Path, sample: str = "img/a.png", label: str = "3") -> Path:
    (root / "client_data_mapping").mkdir(parents=True, exist_ok=True)
    (root / "img").mkdir(exist_ok=True)
    (root / "img" / "a.png").write_bytes(_png(np.zeros((28, 28))))
    head = "client_id,sample_path,label_name,label_id\n"
    (root / "client_data_mapping" / "train.csv").write_text(head + f"0,{sample},c,{label}\n")
    (root / "client_data_mapping" / "test.csv").write_text(head + "0,img/a.png,c,3\n")
    return root


def _h5(path: Path, make=None) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        g = f.create_group("examples").create_group("u")
        if make is None:
            g["pixels"] = np.zeros((1, 28, 28), np.float32)
            g["label"] = np.array([1])
        else:
            make(f, g)


def _hdf5(root: Path, make=None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _h5(root / "train.h5", make)
    _h5(root / "test.h5")
    return root


def _blob(examples: dict) -> bytes:
    import msgpack

    def pack(a):
        return msgpack.ExtType(1, msgpack.packb((a.shape, a.dtype.name, a.tobytes("C")), use_bin_type=True))

    return zlib.compress(msgpack.packb(examples, default=pack, strict_types=True))


def _db(path: Path, rows: list) -> None:
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL, "
               "num_examples INTEGER NOT NULL)")
    db.executemany("INSERT INTO federated_data VALUES (?, ?, ?)", rows)
    db.commit()
    db.close()


def _sqlite(root: Path, rows: list | None = None, schema_null: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    good = [(b"a", _blob({"pixels": np.zeros((1, 28, 28), np.float32), "label": np.array([1], np.int32)}), 1)]
    _db(root / "test.sqlite", good)
    if schema_null:
        import sqlite3

        db = sqlite3.connect(root / "train.sqlite")
        db.execute("CREATE TABLE federated_data (client_id BLOB, data BLOB, num_examples INTEGER)")
        db.execute("INSERT INTO federated_data VALUES (NULL, ?, 1)", (good[0][1],))
        db.commit()
        db.close()
    else:
        _db(root / "train.sqlite", rows if rows is not None else good)
    return root


def _table(root: Path, kind: str, table=None, *, compression: str | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    table = table if table is not None else pa.table({"c": ["a", "b"], "x": [1.0, 2.0], "y": [1, 2]})
    path = root / f"t.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        opts = pa.ipc.IpcWriteOptions(compression=compression)
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema, options=opts) as w:
            w.write_table(table)
    return root


# ---------------------------------------------------------------- the valid folders read (a baseline)
@pytest.mark.parametrize("kind", ["femnist", "fedscale", "hdf5", "sqlite", "parquet", "arrow"])
def test_the_small_valid_folders_read(kind, tmp_path):
    make = {"femnist": _leaf, "fedscale": _fedscale, "hdf5": _hdf5, "sqlite": _sqlite,
            "parquet": lambda r: _table(r, "parquet"), "arrow": lambda r: _table(r, "arrow")}[kind]
    code, err = _read(kind, make(tmp_path / "d"))
    assert code == 0, err


# ---------------------------------------------------------------- special files (item 1): never block
def _special(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except (PermissionError, OSError) as err:
            pytest.skip(f"this user cannot make a device node ({err})")
    else:  # a link to a device
        path.symlink_to("/dev/zero")


SPECIAL_PLACES = [
    ("femnist", lambda r: _leaf(r), "train/a.json"),
    ("fedscale", lambda r: _fedscale(r), "client_data_mapping/train.csv"),
    ("fedscale", lambda r: _fedscale(r), "img/a.png"),  # a mapping row naming a FIFO
    ("hdf5", lambda r: _hdf5(r), "train.h5"),
    ("sqlite", lambda r: _sqlite(r), "train.sqlite"),
    ("parquet", lambda r: _table(r, "parquet"), "t.parquet"),
    ("arrow", lambda r: _table(r, "arrow"), "t.arrow"),
]


# a FIFO in every place a reader opens; a device node and a link to /dev/zero in two of them each
SPECIAL_CASES = [(*case, "fifo") for case in SPECIAL_PLACES] + [
    (*SPECIAL_PLACES[i], special) for special in ("device", "link") for i in (0, 2)]


@pytest.mark.parametrize("kind, make, place, special", SPECIAL_CASES, ids=[f"{k}:{p}:{s}" for k, _, p, s in SPECIAL_CASES])
def test_special_files_are_not_regular_files(kind, make, place, special, tmp_path):
    root = make(tmp_path / "d")
    _special(root / place, special)
    # a sample path linking out of the data folder (to /dev/zero) is refused for that first
    outside = special == "link" and place.startswith("img/")
    _refused(kind, root, "leads outside" if outside else "not a regular file")


def test_hdf5_external_link_to_a_fifo_is_refused_unopened(tmp_path):
    def make(f, g):
        g["pixels"] = np.zeros((1, 28, 28), np.float32)
        g["label"] = __import__("h5py").ExternalLink(str(tmp_path / "fifo"), "/x")

    os.mkfifo(tmp_path / "fifo")
    _refused("hdf5", _hdf5(tmp_path / "d", make), "user 'u': 'label' is an external link to", "fedsim reads only "
                                                                                              "this file's own data")


def test_fedscale_run_with_a_fifo_sample_exits_2_without_a_folder(tmp_path):
    root = _fedscale(tmp_path / "d")
    _special(root / "img" / "a.png", "fifo")
    sc = {"name": "f", "rounds": 1, "data": {"name": "femnist_fedscale", "root": str(root)},
          "model": {"name": "leaf_cnn"}, "round": {"policy": "wait", "clients_per_round": 1, "local_steps": 1},
          "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 2}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    code, err = _cli("run", "s.yaml", "--out", "out", cwd=tmp_path)
    assert code == 2 and "a.png: not a regular file (a FIFO)" in err, err
    _assert_0_or_2(code, err)
    assert not (tmp_path / "out").exists()
    # the clock alone never opens an image (the FIFO would block a reader that did)
    code, err = _cli("run", "s.yaml", "--schedule-only", "--out", "sched", cwd=tmp_path)
    assert code == 0, err


# ---------------------------------------------------------------- bombs (item 4)
def test_png_of_9000_by_9000_pixels_is_refused_from_its_header(tmp_path):
    from PIL import Image

    root = _fedscale(tmp_path / "d")
    Image.new("L", (9000, 9000)).save(root / "img" / "a.png", optimize=True)
    assert (root / "img" / "a.png").stat().st_size < 300_000
    _refused("fedscale", root, "image of 9000 x 9000 pixels is larger than 16,777,216 pixels")


def test_table_image_bombs_are_the_format_error(tmp_path):
    """load_table's images: a 9000 x 9000 PNG (our bound), and one past Pillow's own bound
    (``DecompressionBombError``, a traceback before): one line each."""
    import pyarrow as pa
    from PIL import Image

    for side, problem in ((9000, "image of 9000 x 9000 pixels is larger than 16,777,216 pixels"),
                          (14000, "image refused (Image size (196000000 pixels) exceeds limit")):
        buf = io.BytesIO()
        Image.new("L", (side, side)).save(buf, format="PNG", optimize=True)
        table = pa.table({"c": ["a"], "x": pa.array([buf.getvalue()], pa.binary()), "y": [1]})
        _refused("parquet", _table(tmp_path / f"d{side}", "parquet", table), f"client 'a': {problem}")


def test_hdf5_gzip_bomb_is_refused_from_its_shape(tmp_path):
    def make(f, g):  # 5.6 GB declared, nothing written: the file stays small
        g.create_dataset("pixels", shape=(1_800_000, 28, 28), dtype=np.float32, chunks=(1000, 28, 28),
                         compression="gzip")
        g.create_dataset("label", shape=(1_800_000,), dtype=np.int64, chunks=(100_000,), compression="gzip")

    root = _hdf5(tmp_path / "d", make)
    assert (root / "train.h5").stat().st_size < 1_000_000
    _refused("hdf5", root, "user 'u': datasets decode to 5,659,200,000 bytes, more than 536,870,912")


def test_sqlite_zlib_bomb_stops_at_the_bound(tmp_path):
    import msgpack

    c = zlib.compressobj(9)
    head = msgpack.packb({"pixels": msgpack.ExtType(1, b"")}, use_bin_type=True)[:-1]
    parts = [c.compress(head)]
    zeros = bytes(2**24)
    for _ in range(64):  # 1 GiB of zeros after a msgpack prefix: about 1 MB compressed
        parts.append(c.compress(zeros))
    parts.append(c.flush())
    blob = b"".join(parts)
    assert len(blob) < 2_000_000
    _refused("sqlite", _sqlite(tmp_path / "d", [(b"a", blob, 1)]),
             "client 'a': data is larger than 536,870,912 bytes once decompressed")


def test_parquet_dictionary_bomb_is_bounded(tmp_path):
    import pyarrow as pa

    value = bytes(2**20)  # one 1 MiB value, stored once in the dictionary page, repeated 5,000 times
    x = pa.DictionaryArray.from_arrays(pa.array(np.zeros(5000, np.int32)), pa.array([value], pa.binary()))
    table = pa.table({"c": pa.array(["a"] * 5000), "x": x, "y": pa.array(np.ones(5000, np.int64))})
    root = _table(tmp_path / "d", "parquet", table)
    assert (root / "t.parquet").stat().st_size < 1_000_000
    _refused("parquet", root, "decodes to more than 536,870,912 bytes")


def test_arrow_stream_whose_batch_declares_gigabytes_is_refused_from_its_header(tmp_path):
    import pyarrow as pa

    table = pa.table({"c": ["a"] * 64, "x": np.zeros(64), "y": np.ones(64, np.int64)})
    root = _table(tmp_path / "d", "arrow", table, compression="zstd")
    data = bytearray((root / "t.arrow").read_bytes())
    # each compressed buffer starts with its uncompressed length: declare 5 GB for the x values
    marker = (64 * 8).to_bytes(8, "little", signed=True)
    at = data.index(marker)
    data[at:at + 8] = (5 * 10**9).to_bytes(8, "little", signed=True)
    (root / "t.arrow").write_bytes(bytes(data))
    _refused("arrow", root, "record batch 0 decompresses to 5,00")


def test_compressed_arrow_batches_within_the_bound_are_read(tmp_path):
    import pyarrow as pa

    table = pa.table({"c": ["a", "b"] * 50, "x": np.arange(100.0), "y": np.arange(100) % 62})
    code, err = _read("arrow", _table(tmp_path / "d", "arrow", table, compression="lz4"))
    assert code == 0, err


# ---------------------------------------------------------------- nesting and numbers (item 5), exceptions (12)
NESTED = "[" * 100_000 + "]" * 100_000
HOSTILE_LEAF = [
    ('{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": ' + NESTED + ', "y": [1]}}}',
     "JSON nested deeper than 32 levels"),
    ('{"users": ' + NESTED + ', "num_samples": [1], "user_data": {}}', "JSON nested deeper than 32 levels"),
    ('{"users": ["u"], "num_samples": ' + NESTED + ', "user_data": {}}', "JSON nested deeper than 32 levels"),
    ('{"users": ["u"], "num_samples": [1180591620717411303424], "user_data": {"u": {"x": [[0.5]], "y": [1]}}}',
     "'num_samples': 1180591620717411303424 is not a count"),
    (json.dumps({"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [PIX], "y": [1e30]}}}),
     "user 'u': label 1e+30 out of range [0, 62)"),
    ('{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [[1e999' + ", 0.5" * 783 + ']], "y": [1]}}}',
     "user 'u': x holds a non-finite value"),
    ('{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [[0.5]], "y": [' + "9" * 5000 + "]}}}",
     "malformed JSON"),
    (json.dumps({"users": ["w" * 2_000_000], "num_samples": [1],
                 "user_data": {"w" * 2_000_000: {"x": [PIX], "y": [99]}}}),
     "user 'wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww'... (2,000,000 characters): label 99"),
]


@pytest.mark.parametrize("text, problem", HOSTILE_LEAF, ids=range(len(HOSTILE_LEAF)))
def test_hostile_leaf_json_is_one_line_naming_the_file(text, problem, tmp_path):
    root = _leaf(tmp_path / "d", raw=text)
    err = _refused("femnist", root, problem)
    assert err.startswith(str(root / "train" / "a.json") + ": ") and len(err) < 600 and "Warning" not in err


@pytest.mark.parametrize("label, problem", [("99999999999999999999", "label_id 99999999999999999999 is out of range"),
                                            ("9" * 5000, "is not an integer"), ("1e3", "is not an integer")])
def test_fedscale_huge_label_id_is_one_line(label, problem, tmp_path):
    err = _refused("fedscale", _fedscale(tmp_path / "d", label=label), problem)
    assert len(err) < 600


def test_reader_exception_types_are_the_format_error(tmp_path):
    import h5py

    def scalar(f, g):
        g["pixels"] = np.zeros((1, 28, 28), np.float32)
        g["label"] = 3  # a scalar dataset

    _refused("hdf5", _hdf5(tmp_path / "a", scalar), "user 'u': 'label' is a scalar")

    def dangling(f, g):
        g["pixels"] = np.zeros((1, 28, 28), np.float32)
        g["label"] = h5py.ExternalLink(str(tmp_path / "missing.h5"), "/nothing")

    _refused("hdf5", _hdf5(tmp_path / "b", dangling), "is an external link to")

    def loop(f, g):
        g["pixels"] = np.zeros((1, 28, 28), np.float32)
        g["label"] = h5py.SoftLink("/examples/u/label")

    _refused("hdf5", _hdf5(tmp_path / "c", loop), "user 'u': 'label' is a soft link")

    def virtual(f, g):
        g["pixels"] = np.zeros((1, 28, 28), np.float32)
        layout = h5py.VirtualLayout(shape=(1,), dtype=np.int64)
        layout[0] = h5py.VirtualSource(str(tmp_path / "other.h5"), "x", shape=(1,))[0]
        g.create_virtual_dataset("label", layout)

    _refused("hdf5", _hdf5(tmp_path / "e", virtual), "'label' is a virtual dataset")
    _refused("sqlite", _sqlite(tmp_path / "f", schema_null=True), "a client_id is NULL, not a byte string")


# ---------------------------------------------------------------- non-finite features (item 14)
def test_non_finite_features_are_refused_in_every_format(tmp_path):
    import pyarrow as pa

    nan = {"pixels": np.full((1, 28, 28), np.nan, np.float32), "label": np.array([1], np.int32)}
    _refused("sqlite", _sqlite(tmp_path / "s", [(b"a", _blob(nan), 1)]), "client 'a': feature 'pixels' holds a "
                                                                        "non-finite value")
    for v in (np.inf, -np.inf):
        table = pa.table({"c": ["a"], "x": [v], "y": [1]})
        _refused("parquet", _table(tmp_path / f"p{v}", "parquet", table), "client 'a': features hold an infinite value")


# ---------------------------------------------------------------- sizes (item 11)
def test_oversized_files_are_refused_before_reading(tmp_path):
    root = _fedscale(tmp_path / "d")
    with open(root / "client_data_mapping" / "train.csv", "r+b") as f:
        f.truncate(2**30 + 1)  # sparse: 1 GiB and a byte
    _refused("fedscale", root, "train.csv: larger than 1,073,741,824 bytes")
    root = _fedscale(tmp_path / "e")
    with open(root / "client_data_mapping" / "train.csv", "r+b") as f:
        f.seek(100)
        f.truncate(2**29)  # sparse NULs: no line end
    _refused("fedscale", root, "longer than 65,536 bytes")
    root = _leaf(tmp_path / "f")
    with open(root / "train" / "a.json", "r+b") as f:
        f.truncate(2**30)  # LEAF's 1 GiB sparse file: mapped, never read into memory
    _refused("femnist", root, "a.json: malformed JSON")


# ---------------------------------------------------------------- random damage
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["femnist", "hdf5", "sqlite", "parquet", "arrow"]), cut=st.integers(0, 3000),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6))
def test_damaged_dataset_files_exit_0_or_2(kind, cut, flips, tmp_path):
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    make = {"femnist": _leaf, "hdf5": _hdf5, "sqlite": _sqlite, "parquet": lambda r: _table(r, "parquet"),
            "arrow": lambda r: _table(r, "arrow", compression="lz4")}[kind]
    make(root)
    target = {"femnist": root / "train" / "a.json", "hdf5": root / "train.h5", "sqlite": root / "train.sqlite",
              "parquet": root / "t.parquet", "arrow": root / "t.arrow"}[kind]
    data = bytearray(target.read_bytes())
    for pos, byte in flips:
        data[pos % len(data)] = byte
    target.write_bytes(bytes(data[: max(len(data) - cut, 1)]))
    code, err = _read(kind, root)
    _assert_0_or_2(code, err)
