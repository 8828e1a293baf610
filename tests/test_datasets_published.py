"""The publishers' own files (tests/fixtures/published, a copy of ../shared/fixtures/published,
written by LEAF, FedScale's layout, FedJAX, TFF/pfl and Hugging Face code; its README says how),
read by fedsim and compared exactly with what each publisher's own reader returns (issue 27).

The expected values come from the publishers' readers, not from fedsim: the ``*_read.npz`` files
the fixtures ship (FedJAX, pfl, Flower), LEAF's reader and encoding re-stated from its source
(``models/utils/model_utils.py`` ``read_dir``, ``language_utils.py`` ``word_to_indices``), and
FedScale's transform run through torchvision itself (``fedscale/dataloaders/utils_data.py``
``get_data_transform('mnist')`` after ``femnist.py``'s ``convert('RGB')``).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedsim.data.formats.errors import DataFormatError

ROOT = Path(__file__).resolve().parents[1]
# a copy of ../shared/fixtures/published is kept in the repository, so a clean clone compares too
PUBLISHED = next((p for p in (ROOT / "tests" / "fixtures" / "published", ROOT.parent / "shared" / "fixtures" / "published")
                  if p.is_dir()), None)
pytestmark = pytest.mark.skipif(PUBLISHED is None, reason="tests/fixtures/published is not here")


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """A copy of the fixtures (read-only originals: nothing may write next to them)."""
    dst = tmp_path_factory.mktemp("published") / "published"
    shutil.copytree(PUBLISHED, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


# ---------------------------------------------------------------- LEAF Shakespeare, -t sample (item 1)
# LEAF's models/utils/language_utils.py
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"


def _leaf_read_dir(folder: Path) -> dict:
    """LEAF's ``read_dir``: every file's ``user_data`` merged; clients are its keys, sorted."""
    data = {}
    for f in folder.glob("*.json"):
        data.update(json.loads(f.read_text())["user_data"])
    return data


def test_leaf_shakespeare_sample_split_is_read_as_leafs_reader_reads_it(published):
    from fedsim.data.shakespeare import load_shakespeare

    root = published / "leaf-shakespeare-sample"
    fd = load_shakespeare(root)  # today's code: "user ...: 116 examples, the file declares 195"
    train, test = _leaf_read_dir(root / "train"), _leaf_read_dir(root / "test")
    users = sorted(train)
    assert fd.client_ids == tuple(users) and len(users) == 15 and sorted(test) == users
    assert fd.sizes.tolist() == [len(train[u]["y"]) for u in users] and int(fd.sizes.sum()) == 24_411
    held = 0
    for k, u in enumerate(users):
        for (x, y), part in ((fd.client_data(k), train[u]), (fd.client_test(k), test[u])):
            assert x.tolist() == [[ALL_LETTERS.find(c) for c in s] for s in part["x"]]  # word_to_indices
            assert y.tolist() == [ALL_LETTERS.find(c) for c in part["y"]]  # letter_to_vec's index
        held += len(test[u]["y"])
    assert held == 4_926
    declared = sum(json.loads(f.read_text())["num_samples"][i] for f in (root / "test").glob("*.json")
                   for i in range(15))
    assert declared == 6_111
    (note,) = fd.notes  # the train counts agree; the test file's do not
    assert note.startswith(f"{root.resolve() / 'test'}: 15 of 15 users hold other counts than num_samples declares "
                           "(6,111 declared, 4,926 found;")


def test_leaf_shakespeare_run_records_the_counts_in_info_yaml(published, tmp_path):
    import yaml

    from fedsim.cli import main

    out = tmp_path / "run"
    args = ["run", str(ROOT / "scenarios" / "shakespeare_leaf.yaml"), "--out", str(out), "--quiet"]
    for s in (f"data.root={published / 'leaf-shakespeare-sample'}", "variants=null", "rounds=1",
              "round.clients_per_round=1", "round.local_epochs=null", "round.local_steps=1", "engine.threads=1",
              "eval.train_loss=false", "eval.clients=1", "model.options={units: 8, layers: 1}"):
        args += ["--set", s]
    assert main(args) == 0
    info = yaml.safe_load((out / "info.yaml").read_text())
    assert len(info["data_notes"]) == 1 and "(6,111 declared, 4,926 found;" in info["data_notes"][0]


# ---------------------------------------------------------------- FedScale FEMNIST (items 2, 3)
FEDSCALE_SIZES = [6, 7, 8, 8, 5, 9, 8, 12, 3, 2, 1, 12, 3, 10, 7]  # the README's reading


def _fedscale_reference(root: Path, csv_name: str):
    """FedScale's reading: ``trace_partition`` numbers client ids by first appearance; ``FEMNIST``
    opens ROOT/sample_path, converts to RGB and applies get_data_transform('mnist') less its
    random flip; the label is the row's last field."""
    import torch
    from PIL import Image
    from torchvision import transforms

    tf = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor(),
                             transforms.Normalize((0.1307,), (0.3081,))])
    with open(root / "client_data_mapping" / csv_name) as fh:
        rows = list(csv.reader(fh))[1:]
    ids: dict[str, int] = {}
    parts: list[list] = []
    for row in rows:
        k = ids.setdefault(row[0], len(ids))
        if k == len(parts):
            parts.append([])
        img = Image.open(root / row[1])
        img = img.convert("RGB") if img.mode != "RGB" else img
        parts[k].append((tf(img), int(row[-1])))
    as_arrays = [(torch.stack([x for x, _ in p]).numpy(), np.array([y for _, y in p])) for p in parts]
    return list(ids), as_arrays


def _normalized(x: np.ndarray, fd) -> np.ndarray:
    """What the engine feeds the model: (x - mean) / std per channel, in float32 torch."""
    import torch

    mean = torch.tensor(fd.mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(fd.std, dtype=torch.float32).view(1, -1, 1, 1)
    return ((torch.as_tensor(x) - mean) / std).numpy()


def test_fedscale_femnist_clients_in_fedscales_order_with_fedscales_transform(published):
    from fedsim.data.femnist import femnist_fedscale

    root = published / "fedscale-femnist"
    fd = femnist_fedscale(SimpleNamespace(root=str(root), options={}), 0)
    ids, parts = _fedscale_reference(root, "train.csv")
    assert fd.client_ids == tuple(ids) == tuple(str(i) for i in range(15))  # today's: 0, 1, 10, 11, ..., 2
    assert fd.sizes.tolist() == [len(y) for _, y in parts] == FEDSCALE_SIZES
    for k, (xr, yr) in enumerate(parts):
        x, y = fd.client_data(k)
        assert x.shape == (len(yr), 3, 32, 32) and x.dtype == np.float32  # today's: (n, 1, 28, 28)
        np.testing.assert_array_equal(_normalized(x, fd), xr)
        np.testing.assert_array_equal(y, yr)
    _, test_parts = _fedscale_reference(root, "test.csv")  # one shared test set (FedScale's executors)
    assert fd.client_test is None
    xt, yt = fd.test()  # 8-bit pixels (fd.pixels): the run sees float32 k / 255, client_data's values
    assert fd.pixels and xt.dtype == np.uint8
    np.testing.assert_array_equal(_normalized(xt.astype(np.float32) / np.float32(255), fd),
                                  np.concatenate([x for x, _ in test_parts]))
    np.testing.assert_array_equal(yt, np.concatenate([y for _, y in test_parts]))


def test_fedscale_transform_none_keeps_the_stored_images(published):
    from PIL import Image

    from fedsim.data.femnist import femnist_fedscale

    root = published / "fedscale-femnist"
    fd = femnist_fedscale(SimpleNamespace(root=str(root), options={"transform": "none"}), 0)
    x, _ = fd.client_data(0)
    with open(root / "client_data_mapping" / "train.csv") as fh:
        first = list(csv.reader(fh))[1]
    assert fd.mean is None and x.shape[1:] == (1, 28, 28)
    np.testing.assert_array_equal(x[0, 0], np.asarray(Image.open(root / first[1]), dtype=np.float32) / 255.0)
    from fedsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"^data.options.transform: must be 'fedscale' or 'none', got 'x'$"):
        femnist_fedscale(SimpleNamespace(root=str(root), options={"transform": "x"}), 0)


# ---------------------------------------------------------------- FedJAX SQLite (item 4)
def test_fedjax_emnist_with_fedjaxs_keys_order_and_preprocessing(published):
    from fedsim.data.formats.fedjax_sqlite import load_fedjax_sqlite

    root = published / "fedjax-sqlite"
    ref = np.load(root / "fedjax_read.npz")
    fd = load_fedjax_sqlite(root / "federated_emnist_train.sqlite", test=root / "federated_emnist_test.sqlite",
                            num_classes=62)  # today's defaults: "no feature 'x'"
    assert fd.client_ids == tuple(ref["train_ids"].tolist())  # FedJAX's rowid order
    assert fd.sizes.tolist() == ref["train_sizes"].tolist()
    for k, c in enumerate(fd.client_ids):
        x, y = fd.client_data(k)
        # emnist.preprocess_batch: x = 1 - pixels[..., None] (fedsim: channel first), y = label
        np.testing.assert_array_equal(x, 1 - ref[f"train/{c}/pixels"][:, None])
        assert x.dtype == np.float32 and y.dtype == np.int64
        np.testing.assert_array_equal(y, ref[f"train/{c}/label"])
    k = fd.client_ids.index(str(ref["test/pre/c"]))
    np.testing.assert_array_equal(fd.client_test(k)[0], ref["test/pre/x"].transpose(0, 3, 1, 2))


def test_fedjax_text_dataset_is_refused_saying_what_it_is(published):
    from fedsim.data.formats.fedjax_sqlite import load_fedjax_sqlite

    path = published / "fedjax-sqlite" / "shakes.sqlite"
    fd = load_fedjax_sqlite(path, test=path, preprocess=None, x_key="snippets", y_key="snippets")
    with pytest.raises(DataFormatError) as err:
        fd.client_data(0)
    assert str(err.value) == (
        f"{path}: client 'KING_LEAR': feature 'snippets' holds text (2 byte strings: FedJAX's text datasets, "
        "Shakespeare and Stack Overflow, store snippets that FedJAX's own preprocess_client turns into token "
        "ids); fedsim reads numeric features: tokenize them in Python and hand fedsim.data.FederatedData"
        ".from_clients the arrays")


@pytest.mark.parametrize("name", ["d#x.sqlite", "e.sqlite?mode=rwc&x=", "f%41.sqlite"])
def test_fedjax_path_is_that_file_opened_read_only(published, tmp_path, name):
    """Issue 28 item 3: a path is never read as a URI (``#``, ``?``, ``%`` are characters)."""
    from fedsim.data.formats.fedjax_sqlite import load_fedjax_sqlite

    src = published / "fedjax-sqlite" / "federated_emnist_train.sqlite"
    path = tmp_path / name
    shutil.copy(src, path)
    path.chmod(0o444)
    before = sorted(p.name for p in tmp_path.iterdir())
    fd = load_fedjax_sqlite(path, test=path, x_key="pixels", y_key="label", num_classes=62)
    assert fd.num_clients == 40 and len(fd.client_data(3)[1]) == int(fd.sizes[3])
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created beside it
    if name.startswith("d#"):
        (tmp_path / "d").write_bytes(b"")  # the file a URI cut at '#' would open
        assert load_fedjax_sqlite(path, test=path, num_classes=62).num_clients == 40


# ---------------------------------------------------------------- TFF / pfl HDF5 (item 5)
def test_tff_layout_hdf5_equals_pfls_reader(published):
    from fedsim.data.formats.pfl_hdf5 import load_pfl_hdf5

    root = published / "pfl-hdf5"
    ref = np.load(root / "pfl_read.npz")
    fd = load_pfl_hdf5(root / "fed_emnist_train.h5", test=root / "fed_emnist_test.h5", num_classes=62)
    assert fd.client_ids == tuple(ref["train_users"].tolist())
    for k, u in enumerate(fd.client_ids):
        x, y = fd.client_data(k)
        np.testing.assert_array_equal(x, ref[f"train/{u}/x"].transpose(0, 3, 1, 2))  # pfl: (n, 28, 28, 1)
        np.testing.assert_array_equal(y, ref[f"train/{u}/y"])
        xt, yt = fd.client_test(k)
        np.testing.assert_array_equal(xt, ref[f"test/{u}/x"].transpose(0, 3, 1, 2))
        np.testing.assert_array_equal(yt, ref[f"test/{u}/y"])


def test_pfls_own_layout_is_read(published):
    """pfl-research's stackoverflow/download_preprocess.py writes /<partition>/<user>/{inputs,targets}
    (one file for train, val and test); its numpy.py reads h5[f'{partition}/{user_id}/inputs']."""
    import h5py

    from fedsim.data.formats.pfl_hdf5 import load_pfl_hdf5

    path = published / "pfl-hdf5" / "so.h5"
    fd = load_pfl_hdf5(path, partition="train", test_partition="test")  # today's: refused
    with h5py.File(path, "r") as f:
        assert fd.client_ids == tuple(f["train"]) == ("u1",)
        x, y = fd.client_data(0)
        np.testing.assert_array_equal(x, f["train/u1/inputs"][()])
        np.testing.assert_array_equal(y, f["train/u1/targets"][()])
        np.testing.assert_array_equal(fd.client_test(0)[0], f["test/u1/inputs"][()])
    assert x.dtype == np.int64 and fd.num_classes is None


def test_each_hdf5_layout_is_named_by_its_writer(published, tmp_path):
    from fedsim.data.formats.pfl_hdf5 import load_pfl_hdf5

    so = published / "pfl-hdf5" / "so.h5"
    with pytest.raises(DataFormatError) as err:
        load_pfl_hdf5(so, test=so)
    msg = str(err.value)
    assert msg.startswith(f"{so}: no group 'examples' (TensorFlow Federated's layout examples/<user>/<feature>, "
                          "read by pfl-research's femnist.py)")
    assert "groups test, train: pfl-research's own layout /<partition>/<user>/<feature> " in msg
    assert "give partition='train'" in msg


# ---------------------------------------------------------------- Hugging Face Parquet (Flower)
def test_hugging_face_parquet_equals_flowers_natural_id_partitioner(published):
    from fedsim.data.formats.table import load_table

    path = published / "hf-parquet" / "train.parquet"
    ref = np.load(published / "hf-parquet" / "flower_read.npz")
    # test= the same table: each client's test part is its rows, client_data(k) all of its rows
    fd = load_table(path, client_column="writer_id", x_column="image", y_column="character", test=path,
                    num_classes=62)
    assert fd.client_ids == tuple(ref["ids"].tolist())
    for k in range(len(fd.client_ids)):
        x, y = fd.client_data(k)
        np.testing.assert_array_equal(x, ref[f"{k}/x"])
        np.testing.assert_array_equal(y, ref[f"{k}/y"])
