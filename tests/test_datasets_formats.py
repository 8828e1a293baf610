"""pfl-research HDF5 and FedJAX SQLite, each written by the test in exactly the published layout;
missing and bad files. (h5py and msgpack are the formats' dependencies.)"""

from __future__ import annotations

import sqlite3
import zlib

import numpy as np
import pytest

from fedsim.data.errors import DataNotFound
from fedsim.data.formats.errors import DataFormatError
from fedsim.data.formats.fedjax_sqlite import load_fedjax_sqlite
from fedsim.data.formats.pfl_hdf5 import load_pfl_hdf5

h5py = pytest.importorskip("h5py")
msgpack = pytest.importorskip("msgpack")


def _one_line(err, path):
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg


# ---------------------------------------------------------------- pfl-research HDF5
def _h5(path, users: dict, x_key="pixels", y_key="label"):
    with h5py.File(path, "w") as f:
        ex = f.create_group("examples")
        for u, (x, y) in users.items():
            g = ex.create_group(u)
            g[x_key] = x
            g[y_key] = y


def test_pfl_hdf5_users_and_their_test_parts(tmp_path):
    rng = np.random.default_rng(0)
    tr = {u: (rng.random((n, 28, 28), dtype=np.float32), rng.integers(0, 62, n)) for u, n in (("w2", 3), ("w1", 2))}
    te = {u: (rng.random((1, 28, 28), dtype=np.float32), rng.integers(0, 62, 1)) for u in ("w1", "w2")}
    _h5(tmp_path / "fed_emnist_train.h5", tr)
    _h5(tmp_path / "fed_emnist_test.h5", te)
    fd = load_pfl_hdf5(tmp_path / "fed_emnist_train.h5", test=tmp_path / "fed_emnist_test.h5", num_classes=62)
    assert fd.client_ids == ("w1", "w2") and fd.sizes.tolist() == [2, 3]
    x, y = fd.client_data(1)
    assert x.shape == (3, 1, 28, 28) and x.dtype == np.float32
    np.testing.assert_array_equal(x[:, 0], tr["w2"][0])
    assert y.tolist() == tr["w2"][1].tolist()
    xt, yt = fd.client_test(0)
    np.testing.assert_array_equal(xt[:, 0], te["w1"][0])


def test_pfl_hdf5_token_features_and_pooled_test_users(tmp_path):
    _h5(tmp_path / "a.h5", {"u": (np.arange(6).reshape(2, 3), np.array([1, 0]))}, "tokens", "target")
    _h5(tmp_path / "b.h5", {"v": (np.ones((1, 3), dtype=np.int32), np.array([1]))}, "tokens", "target")
    fd = load_pfl_hdf5(tmp_path / "a.h5", test=tmp_path / "b.h5", x_key="tokens", y_key="target", num_classes=2)
    assert fd.client_data(0)[0].dtype == np.int64 and fd.test[0].tolist() == [[1, 1, 1]]


def test_pfl_hdf5_bad_files(tmp_path):
    good = tmp_path / "good.h5"
    _h5(good, {"u": (np.zeros((1, 28, 28)), np.array([0]))})
    bad = tmp_path / "bad.h5"
    cases = [
        (lambda: bad.write_bytes(b"not hdf5"), "not a readable HDF5 file"),
        (lambda: h5py.File(bad, "w").close(), "no group 'examples'"),
        (lambda: _h5(bad, {"u": (np.zeros((2, 28, 28)), np.array([0]))}), "user 'u': pixels has 2 examples, label 1"),
        (lambda: _h5(bad, {"u": (np.zeros((0, 28, 28)), np.array([], dtype=int))}), "user 'u': no samples"),
        (lambda: _h5(bad, {"u": (np.zeros((1, 28, 28)), np.array([62]))}), "user 'u': label 62 out of range [0, 62)"),
        (lambda: _h5(bad, {"u": (np.zeros((1, 28, 28)), np.array([0]))}, y_key="labels"), "user 'u': no dataset 'label'"),
    ]
    for write, problem in cases:
        bad.unlink(missing_ok=True)
        write()
        with pytest.raises(DataFormatError) as err:
            fd = load_pfl_hdf5(bad, test=good, num_classes=62)
            fd.client_data(0)
        assert problem in _one_line(err, bad)
    with pytest.raises(DataNotFound, match="femnist: no file .*nope.h5; get it"):
        load_pfl_hdf5(tmp_path / "nope.h5", test=good, name="femnist", source="get it")


# ---------------------------------------------------------------- FedJAX SQLite
def _pack_array(a: np.ndarray) -> msgpack.ExtType:
    # fedjax/core/serialization.py: ExtType(1, packb((shape, dtype name, C-order bytes)))
    return msgpack.ExtType(1, msgpack.packb((a.shape, a.dtype.name, a.tobytes("C")), use_bin_type=True))


def _blob(examples: dict) -> bytes:
    return zlib.compress(msgpack.packb(examples, default=_pack_array, strict_types=True))


def _sqlite(path, clients: dict, raw: dict | None = None):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL, "
               "num_examples INTEGER NOT NULL);")
    for cid, ex in clients.items():
        db.execute("INSERT INTO federated_data VALUES (?, ?, ?)", (cid, _blob(ex), len(ex["y"])))
    for cid, (blob, n) in (raw or {}).items():
        db.execute("INSERT INTO federated_data VALUES (?, ?, ?)", (cid, blob, n))
    db.commit()
    db.close()


def test_fedjax_sqlite_clients(tmp_path):
    rng = np.random.default_rng(0)
    tr = {b"f2": {"x": rng.random((3, 28, 28), dtype=np.float32), "y": rng.integers(0, 62, 3).astype(np.int32)},
          b"f1": {"x": rng.random((2, 28, 28), dtype=np.float32), "y": rng.integers(0, 62, 2).astype(np.int32)}}
    te = {c: {"x": rng.random((1, 28, 28), dtype=np.float32), "y": np.array([5], dtype=np.int32)} for c in tr}
    _sqlite(tmp_path / "federated_emnist_train.sqlite", tr)
    _sqlite(tmp_path / "federated_emnist_test.sqlite", te)
    fd = load_fedjax_sqlite(tmp_path / "federated_emnist_train.sqlite", test=tmp_path / "federated_emnist_test.sqlite",
                            x_key="x", y_key="y", preprocess=None, num_classes=62)
    assert fd.client_ids == ("f2", "f1") and fd.sizes.tolist() == [3, 2]  # FedJAX's rowid order
    x, y = fd.client_data(0)
    np.testing.assert_array_equal(x[:, 0], tr[b"f2"]["x"])
    assert x.shape == (3, 1, 28, 28) and y.dtype == np.int64 and y.tolist() == tr[b"f2"]["y"].tolist()
    assert fd.client_test(1)[1].tolist() == [5]


def test_fedjax_sqlite_bad_input(tmp_path):
    good = tmp_path / "good.sqlite"
    _sqlite(good, {b"a": {"x": np.zeros((1, 2), np.float32), "y": np.zeros(1, np.int32)}})
    bad = tmp_path / "bad.sqlite"
    ok = {"x": np.zeros((1, 2), np.float32), "y": np.zeros(1, np.int32)}
    cases = [
        (lambda: bad.write_bytes(b"SQLite format 3\x00 but not really" * 10), "not a FedJAX SQLite file"),
        (lambda: sqlite3.connect(bad).execute("CREATE TABLE other (a)").connection.commit(), "no such table: federated_data"),
        (lambda: _sqlite(bad, {}, {b"a": (b"not zlib", 1)}), "client 'a': data is not zlib-compressed"),
        (lambda: _sqlite(bad, {}, {b"a": (zlib.compress(b"\xc1"), 1)}), "client 'a': data is not FedJAX msgpack"),
        (lambda: _sqlite(bad, {}, {b"a": (_blob(ok), 0)}), "client 'a': no samples"),
        (lambda: _sqlite(bad, {}, {b"a": (_blob(ok), 2)}), "client 'a': 1 examples, the file declares 2"),
        (lambda: _sqlite(bad, {b"a": {"x": np.zeros((2, 2), np.float32), "y": np.zeros(1, np.int32)}}),
         "client 'a': x has 2 examples, y 1"),
        (lambda: _sqlite(bad, {b"a": {"x": np.zeros((1, 2), np.float32), "y": np.array([9], np.int32)}}),
         "client 'a': label 9 out of range [0, 3)"),
        (lambda: _sqlite(bad, {b"a": {"pixels": np.zeros((1, 2), np.float32), "y": np.zeros(1, np.int32)}}),
         "client 'a': no feature 'x' (features: pixels, y)"),
    ]
    for write, problem in cases:
        bad.unlink(missing_ok=True)
        write()
        with pytest.raises(DataFormatError) as err:
            load_fedjax_sqlite(bad, test=good, x_key="x", y_key="y", preprocess=None, num_classes=3).client_data(0)
        assert problem in _one_line(err, bad)
    with pytest.raises(DataNotFound, match="emnist: no file"):
        load_fedjax_sqlite(tmp_path / "none.sqlite", test=good, name="emnist")
