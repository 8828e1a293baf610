"""Round trips through the real on-disk formats, written tiny into tmp_path. Nothing is downloaded.

CIFAR checksums: torchvision's CIFAR10/CIFAR100 compare every file with the md5 of the official
release, which tiny fixture files cannot match. The fixture ``cifar_md5_off`` swaps the classes'
md5 tables for copies with ``None`` in place of each checksum -- torchvision's own
``check_integrity(path, None)`` then only checks that the file exists -- and pytest restores them
afterwards. Loader code is untouched, and one test keeps the real checksums to show that a
mismatch surfaces as ``DataCorrupted``.
"""

import pickle
import struct
from urllib.error import URLError

import numpy as np
import pytest
import torchvision.datasets as tvd
from PIL import Image

from fedsim.data import DataCorrupted, DataNotFound, load_vision
from fedsim.data.vision import VISION


@pytest.fixture
def cifar_md5_off(monkeypatch):
    for cls in (tvd.CIFAR10, tvd.CIFAR100):
        monkeypatch.setattr(cls, "train_list", [[f, None] for f, _ in cls.train_list])
        monkeypatch.setattr(cls, "test_list", [[f, None] for f, _ in cls.test_list])
        monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": None})


def _pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar10(root, rng):
    """cifar-10-batches-py: 5 train batches of 2 images, a test batch of 3, batches.meta."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    batches = []
    for i in range(1, 6):
        data = rng.integers(0, 256, (2, 3072), dtype=np.uint8)  # rows: 1024 R, 1024 G, 1024 B
        labels = [(2 * i) % 10, (2 * i + 1) % 10]
        names = [f"img{i}_{j}.png" for j in range(2)]
        batch = {"batch_label": f"training batch {i} of 5", "labels": labels, "data": data, "filenames": names}
        _pickle(base / f"data_batch_{i}", batch)
        batches.append((data, labels))
    test = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
    _pickle(base / "test_batch", {"batch_label": "testing batch 1 of 1", "labels": [9, 0, 4], "data": test,
                                  "filenames": ["t0.png", "t1.png", "t2.png"]})  # fmt: skip
    _pickle(base / "batches.meta", {"label_names": [f"class{c}" for c in range(10)], "num_cases_per_batch": 2,
                                    "num_vis": 3072})  # fmt: skip
    return batches, test


def test_cifar10_round_trip(tmp_path, cifar_md5_off):
    batches, test = write_cifar10(tmp_path, np.random.default_rng(0))
    x_tr, y_tr, x_te, y_te, classes, mean, std = load_vision("cifar10", str(tmp_path), download=False)
    assert x_tr.shape == (10, 3, 32, 32) and x_te.shape == (3, 3, 32, 32)
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int64
    assert classes == 10 and len(mean) == len(std) == 3
    assert y_tr.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 0, 1] and y_te.tolist() == [9, 0, 4]
    # pixel (channel c, row r, column k) of image j is byte c*1024 + r*32 + k of its row
    for j, (c, r, k) in enumerate([(0, 0, 0), (1, 5, 17), (2, 31, 31), (0, 12, 3)]):
        data = batches[j // 2][0]
        assert x_tr[j, c, r, k] == np.float32(data[j % 2, c * 1024 + r * 32 + k]) / np.float32(255)
    np.testing.assert_array_equal(x_te[2, 1], test[2, 1024:2048].reshape(32, 32).astype(np.float32) / 255)
    assert x_tr.min() >= 0 and x_tr.max() <= 1


def test_cifar10_real_checksums_flag_corrupt_files(tmp_path):
    write_cifar10(tmp_path, np.random.default_rng(0))
    with pytest.raises(DataCorrupted, match="cifar10: files under .* failed torchvision's checks"):
        load_vision("cifar10", str(tmp_path), download=False)


def test_cifar100_round_trip_uses_fine_labels(tmp_path, cifar_md5_off):
    base = tmp_path / "cifar-100-python"
    base.mkdir()
    rng = np.random.default_rng(1)
    train = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
    test = rng.integers(0, 256, (2, 3072), dtype=np.uint8)
    _pickle(base / "train", {"data": train, "fine_labels": [99, 0, 57, 3], "coarse_labels": [1, 1, 1, 1],
                             "filenames": ["a", "b", "c", "d"], "batch_label": "training batch 1 of 1"})  # fmt: skip
    _pickle(base / "test", {"data": test, "fine_labels": [42, 7], "coarse_labels": [2, 2],
                            "filenames": ["e", "f"], "batch_label": "testing batch 1 of 1"})  # fmt: skip
    _pickle(base / "meta", {"fine_label_names": [f"f{c}" for c in range(100)],
                            "coarse_label_names": [f"c{c}" for c in range(20)]})  # fmt: skip
    x_tr, y_tr, x_te, y_te, classes, _, _ = load_vision("cifar100", str(tmp_path), download=False)
    assert classes == 100 and y_tr.tolist() == [99, 0, 57, 3] and y_te.tolist() == [42, 7]
    assert x_tr.shape == (4, 3, 32, 32) and x_te.shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(x_tr[3, 2], train[3, 2048:].reshape(32, 32).astype(np.float32) / 255)


def _write_idx(folder, prefix, images, labels):
    folder.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x0803, n, h, w) + images.tobytes())
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x0801, n) + labels.tobytes())


@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_mnist_family_round_trip_from_idx_files(tmp_path, name, folder):
    rng = np.random.default_rng(2)
    tr = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    te = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    raw = tmp_path / folder / "raw"
    _write_idx(raw, "train", tr, np.array([3, 1, 4, 1, 5], dtype=np.uint8))
    _write_idx(raw, "t10k", te, np.array([9, 2, 6], dtype=np.uint8))
    x_tr, y_tr, x_te, y_te, classes, mean, std = load_vision(name, str(tmp_path), download=False)
    assert x_tr.shape == (5, 1, 28, 28) and x_te.shape == (3, 1, 28, 28) and x_tr.dtype == np.float32
    assert y_tr.tolist() == [3, 1, 4, 1, 5] and y_te.tolist() == [9, 2, 6] and y_tr.dtype == np.int64
    assert x_tr[2, 0, 7, 20] == np.float32(tr[2, 7, 20]) / np.float32(255)
    np.testing.assert_array_equal(x_te[1, 0], te[1].astype(np.float32) / 255)
    assert classes == 10 and len(mean) == 1


def write_tinyimagenet(parent, grayscale_first=False):
    """tiny-imagenet-200 layout with 3 classes x 2 train images and 3 val images (solid colours)."""
    base = parent / "tiny-imagenet-200"
    wnids = ["n02", "n01", "n03"]  # unsorted on purpose, like the real wnids.txt
    colours = {"n01": (200, 30, 30), "n02": (30, 200, 30), "n03": (30, 30, 200)}
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    for w in wnids:
        img_dir = base / "train" / w / "images"
        img_dir.mkdir(parents=True)
        (base / "train" / w / f"{w}_boxes.txt").write_text("")
        for k in range(2):
            Image.new("RGB", (64, 64), colours[w]).save(img_dir / f"{w}_{k}.JPEG", quality=95)
    if grayscale_first:
        Image.new("L", (64, 64), 128).save(base / "train" / "n01" / "images" / "n01_0.JPEG", quality=95)
    ann = []
    for i, w in enumerate(["n03", "n01", "n02"]):
        Image.new("RGB", (64, 64), colours[w]).save(base / "val" / "images" / f"val_{i}.JPEG", quality=95)
        ann.append(f"val_{i}.JPEG\t{w}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(ann) + "\n")
    return base, colours


@pytest.mark.parametrize("point_at_folder", [False, True])
def test_tinyimagenet_round_trip(tmp_path, point_at_folder):
    base, colours = write_tinyimagenet(tmp_path, grayscale_first=True)
    root = base if point_at_folder else tmp_path
    x_tr, y_tr, x_te, y_te, classes, mean, std = load_vision("tinyimagenet", str(root), download=False)
    assert classes == 200 and len(mean) == 3
    assert x_tr.shape == (6, 3, 64, 64) and x_te.shape == (3, 3, 64, 64) and x_tr.dtype == np.float32
    # label = position in the sorted wnid list: n01 -> 0, n02 -> 1, n03 -> 2
    assert y_tr.tolist() == [0, 0, 1, 1, 2, 2] and y_te.tolist() == [2, 0, 1] and y_te.dtype == np.int64
    assert np.allclose(x_tr[0], 128 / 255, atol=2 / 255)  # grayscale JPEG became 3 equal channels
    for x, w in [(x_tr[1], "n01"), (x_tr[3], "n02"), (x_te[0], "n03")]:
        expected = np.array(colours[w], dtype=np.float32)[:, None, None] / 255
        assert np.abs(x - expected).max() <= 4 / 255  # JPEG of a flat colour is near exact


def test_missing_files_raise_data_not_found_naming_the_path(tmp_path):
    for name in VISION:
        with pytest.raises(DataNotFound) as info:
            load_vision(name, str(tmp_path / "nowhere"), download=False)
        message = str(info.value)
        assert isinstance(info.value, FileNotFoundError)
        assert message.startswith(f"{name}: ") and str(tmp_path / "nowhere") in message and "\n" not in message
    with pytest.raises(DataNotFound, match="place cifar-10-batches-py there"):
        load_vision("cifar10", str(tmp_path), download=False)


def test_tinyimagenet_missing_val_annotations(tmp_path):
    base, _ = write_tinyimagenet(tmp_path)
    (base / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DataNotFound, match="val_annotations.txt"):
        load_vision("tinyimagenet", str(tmp_path), download=False)


def test_failed_download_is_data_not_found(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise URLError("network unreachable")

    monkeypatch.setattr(tvd.cifar, "download_and_extract_archive", offline)
    monkeypatch.setattr(tvd.utils, "download_and_extract_archive", offline)
    with pytest.raises(DataNotFound, match="cifar10: no data under .* and download failed .*URLError"):
        load_vision("cifar10", str(tmp_path), download=True)
    with pytest.raises(DataNotFound, match="tinyimagenet: .* download failed"):
        load_vision("tinyimagenet", str(tmp_path), download=True)


def test_build_dataset_on_real_files_subsamples_with_seed(tmp_path, cifar_md5_off):
    from fedsim.data import PartitionSpec, build_dataset

    write_cifar10(tmp_path, np.random.default_rng(0))
    full = load_vision("cifar10", str(tmp_path), download=False)
    kw = dict(clients=2, partition=PartitionSpec("iid"), root=str(tmp_path), n_train=6, n_test=2)
    a, b = build_dataset("cifar10", seed=3, **kw), build_dataset("cifar10", seed=3, **kw)
    assert a.name == "cifar10" and a.augment and a.mean == VISION["cifar10"].mean
    assert a.x_train.shape == (6, 3, 32, 32) and a.x_test.shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    rows = [r.tobytes() for r in full[0]]
    picked = [rows.index(r.tobytes()) for r in a.x_train]
    assert picked == sorted(picked)  # a subset, original order kept
    np.testing.assert_array_equal(a.y_train, full[1][picked])
    assert sorted(np.concatenate(a.client_indices).tolist()) == list(range(6))


@pytest.mark.parametrize("which", ["wnids.txt", "val/val_annotations.txt", "train/n01/images/n01_1.JPEG"])
def test_tinyimagenet_fifo_is_refused_without_blocking(tmp_path, which):
    """Issue 28 item 1: a FIFO where a listing or an image is expected: one line, never a hang."""
    import os

    from fedsim.errors import ScenarioError

    base, _ = write_tinyimagenet(tmp_path)
    (base / which).unlink()
    os.mkfifo(base / which)
    with pytest.raises(ScenarioError) as err:  # listings: not found as files; an image: not a regular file
        load_vision("tinyimagenet", str(tmp_path), download=False)
    assert str(err.value).endswith("not a regular file (a FIFO)") or "tinyimagenet: " in str(err.value)
    if which.endswith(".JPEG"):
        assert str(err.value) == f"{base / which}: not a regular file (a FIFO)"
