"""Parquet / Arrow tables with a client-id column (Flower Datasets' Hugging Face layout)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from fedsim.data.errors import DataNotFound
from fedsim.data.formats.errors import DataFormatError
from fedsim.data.formats.table import load_table, split_rows
from fedsim.data.shakespeare import LETTERS


def _png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(buf, format="PNG")
    return buf.getvalue()


def _femnist_table(rng, writers):
    """Flower's flwrlabs/femnist columns: image (HF Image struct), writer_id, hsf_id, character."""
    ids, images, pixels, labels = [], [], [], []
    for w, n in writers.items():
        for _ in range(n):
            p = rng.integers(0, 256, (28, 28))
            ids.append(w)
            pixels.append(p)
            images.append({"bytes": _png(p), "path": None})
            labels.append(int(rng.integers(0, 62)))
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array(images, type=image_type), "writer_id": ids,
                      "hsf_id": [0] * len(ids), "character": pa.array(labels, type=pa.int64())})
    return table, np.stack(pixels), np.array(labels), np.array(ids)


def test_parquet_images_per_writer_with_a_test_table(tmp_path):
    rng = np.random.default_rng(0)
    train, px, lab, ids = _femnist_table(rng, {"f0002_01": 3, "f0001_07": 2})
    test, tpx, tlab, tids = _femnist_table(rng, {"f0001_07": 1, "f0002_01": 2})
    pq.write_table(train, tmp_path / "train.parquet", row_group_size=2)  # a writer spans row groups
    pq.write_table(test, tmp_path / "test.parquet")
    fd = load_table(tmp_path / "train.parquet", test=tmp_path / "test.parquet", client_column="writer_id",
                    x_column="image", y_column="character", num_classes=62, name="femnist_hf")
    assert fd.client_ids == ("f0001_07", "f0002_01") and fd.sizes.tolist() == [2, 3]
    for k, w in enumerate(fd.client_ids):
        x, y = fd.client_data(k)
        assert x.shape == ((ids == w).sum(), 1, 28, 28) and x.dtype == np.float32
        np.testing.assert_allclose(x[:, 0] * 255, px[ids == w], atol=1e-4)
        assert y.tolist() == lab[ids == w].tolist()
        xt, yt = fd.client_test(k)
        np.testing.assert_allclose(xt[:, 0] * 255, tpx[tids == w], atol=1e-4)
        assert yt.tolist() == tlab[tids == w].tolist()


def test_arrow_stream_and_file_and_text_with_a_vocabulary(tmp_path):
    rows = {"x": ["ab" * 40, "ba" * 40, "}a" * 40], "y": ["a", "\n", "}"], "character_id": ["R", "J", "R"]}
    table = pa.table(rows)
    with pa.ipc.new_stream(tmp_path / "s.arrow", table.schema) as w:  # Hugging Face's cache format
        w.write_table(table, max_chunksize=1)
    with pa.ipc.new_file(tmp_path / "f.feather", table.schema) as w:
        w.write_table(table)
    for f in ("s.arrow", "f.feather"):
        fd = load_table(tmp_path / f, test=tmp_path / f, client_column="character_id", x_column="x", y_column="y",
                        vocab=LETTERS, num_classes=80)
        x, y = fd.client_data(1)  # R: rows 0 and 2
        assert x.shape == (2, 80) and x[0, :2].tolist() == [LETTERS.index("a"), LETTERS.index("b")]
        assert y.tolist() == [LETTERS.index("a"), 79]


def test_numeric_columns_a_folder_and_the_random_per_client_split(tmp_path):
    (tmp_path / "t").mkdir()
    pq.write_table(pa.table({"c": [1, 1, 2, 1, 1], "a": [0.0, 1, 2, 3, 4], "b": [5.0, 6, 7, 8, 9], "y": [0, 1, 0, 1, 1]}),
                   tmp_path / "t" / "0.parquet")
    pq.write_table(pa.table({"c": [2, 2, 1], "a": [10.0, 11, 12], "b": [13.0, 14, 15], "y": [1, 1, 0]}),
                   tmp_path / "t" / "1.parquet")
    fd = load_table(tmp_path / "t", client_column="c", x_column=["a", "b"], y_column="y", num_classes=2,
                    test_fraction=0.5, seed=3)
    # client "1": global rows 0, 1, 3, 4, 7 (a = 0, 1, 3, 4, 12); floor(2.5 + 0.5) = 3 test rows
    train, test = split_rows(5, 0.5, 3, 0)
    assert len(train) == 2 and len(test) == 3 and sorted([*train, *test]) == [0, 1, 2, 3, 4]
    a = np.array([0.0, 1, 3, 4, 12])
    x, y = fd.client_data(0)
    assert x[:, 0].tolist() == a[train].tolist() and x[:, 1].tolist() == (a[train] + 5 - (a[train] == 12) * 2).tolist()
    xt, _ = fd.client_test(0)
    assert xt[:, 0].tolist() == a[test].tolist()
    assert fd.sizes.tolist() == [2, 1]  # client "2": 3 rows, floor(1.5 + 0.5) = 2 for test
    assert split_rows(1, 0.5, 3, 1)[1].size == 0  # one row: kept for training


def test_list_features_reshaped(tmp_path):
    pq.write_table(pa.table({"u": ["a", "a"], "px": [[0.0] * 4, [1.0] * 4], "y": [1, 0]}), tmp_path / "t.parquet")
    fd = load_table(tmp_path / "t.parquet", test=tmp_path / "t.parquet", client_column="u", x_column="px",
                    y_column="y", shape=(1, 2, 2), num_classes=2)
    x, _ = fd.client_data(0)
    assert x.shape == (2, 1, 2, 2) and x[1].sum() == 4


def _err(tmp_path, table=None, raw: bytes | None = None, **kw):
    path = tmp_path / "t.parquet"
    if raw is not None:
        path.write_bytes(raw)
    else:
        pq.write_table(table, path)
    args = dict(client_column="u", x_column="x", y_column="y", num_classes=3, test_fraction=0.5)
    args.update(kw)
    with pytest.raises(DataFormatError) as err:
        fd = load_table(path, **args)
        for k in range(fd.num_clients):
            fd.client_data(k)
            fd.client_test(k)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg, msg
    return msg


def test_bad_tables(tmp_path):
    assert "not a readable Parquet file" in _err(tmp_path, raw=b"PAR1 this is not parquet")
    assert "no column 'y' (columns: u, x)" in _err(tmp_path, pa.table({"u": ["a"], "x": [1.0]}))
    assert "label 3 out of range [0, 3)" in _err(tmp_path, pa.table({"u": ["a", "a"], "x": [1.0, 2], "y": [0, 3]}))
    assert "missing client id" in _err(tmp_path, pa.table({"u": ["a", None], "x": [1.0, 2], "y": [0, 1]}))
    assert "a label is missing" in _err(tmp_path, pa.table({"u": ["a", "a"], "x": [1.0, 2], "y": [0, None]}))
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    bad = pa.table({"u": ["a", "a"], "x": pa.array([{"bytes": b"\x89PNG broken", "path": None}] * 2, type=img),
                    "y": [0, 1]})
    assert "client 'a': image does not decode" in _err(tmp_path, bad)
    ragged = pa.table({"u": ["a", "a"], "x": [[1.0], [1.0, 2]], "y": [0, 1]})
    assert "must be present and of one length" in _err(tmp_path, ragged, test_fraction=0.1)
    assert "holds text; give a vocabulary" in _err(tmp_path, pa.table({"u": ["a", "a"], "x": ["ab", "cd"], "y": [0, 1]}))


def test_missing_table(tmp_path):
    with pytest.raises(DataNotFound, match=f"mine: no table at {tmp_path / 'no.parquet'}"):
        load_table(tmp_path / "no.parquet", client_column="u", x_column="x", y_column="y", name="mine")
