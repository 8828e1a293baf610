"""FedScale's client_data_mapping CSV with image files, written by the test in FedScale's layout
(ROOT/client_data_mapping/{train,test}.csv: client_id,sample_path,label_name,label_id); bad input."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fedsim.data.errors import DataNotFound
from fedsim.data.formats.errors import DataFormatError
from fedsim.data.formats.fedscale_csv import load_fedscale


def _one_line(err, path):
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg


def _png(pixels, mode="L") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), mode=mode).save(buf, format="PNG")
    return buf.getvalue()


def _fedscale(root, rows_train, rows_test, images):
    (root / "client_data_mapping").mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", rows_train), ("test", rows_test)):
        lines = ["client_id,sample_path,label_name,label_id"] + [",".join(map(str, r)) for r in rows]
        (root / "client_data_mapping" / f"{name}.csv").write_text("\n".join(lines) + "\n")
    for rel, data in images.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_fedscale_mapping_clients_images_and_shared_test_set(tmp_path):
    rng = np.random.default_rng(0)
    px = {f"train/img{i}.png": rng.integers(0, 256, (28, 28)) for i in range(4)}
    px["test/t0.png"] = rng.integers(0, 256, (28, 28))
    px["test/t1.png"] = rng.integers(0, 256, (28, 28))
    train = [(7, "train/img0.png", "a", 3), (2, "train/img1.png", "b", 1), (7, "train/img2.png", "c", 0),
             (7, "train/img3.png", "d", 3)]
    test = [(2, "test/t0.png", "b", 1), (7, "test/t1.png", "a", 3)]
    _fedscale(tmp_path, train, test, {k: _png(v) for k, v in px.items()})
    fd = load_fedscale(tmp_path, num_classes=62, name="femnist_fedscale")
    assert fd.client_ids == ("7", "2") and fd.sizes.tolist() == [3, 1]  # FedScale: by first appearance
    x, y = fd.client_data(0)
    assert x.shape == (3, 1, 28, 28) and y.tolist() == [3, 0, 3]
    np.testing.assert_allclose(x[1, 0] * 255, px["train/img2.png"], atol=1e-4)
    assert fd.client_test is None  # test.csv is FedScale's one shared test set, in its row order
    xt, yt = fd.test()  # decoded when a run needs it, not when the folder is opened: 8-bit pixels
    assert fd.pixels and xt.dtype == np.uint8 and np.array_equal(xt[0, 0], px["test/t0.png"])
    assert yt.tolist() == [1, 3]
    assert load_fedscale(tmp_path).num_classes == 4  # default: largest label_id + 1


def test_fedscale_rgb_and_pooled_test(tmp_path):
    rgb = np.random.default_rng(1).integers(0, 256, (4, 5, 3))
    _fedscale(tmp_path, [("a", "x.png", "n", 1)], [("z", "x.png", "n", 0)], {"x.png": _png(rgb, "RGB")})
    fd = load_fedscale(tmp_path)
    assert fd.client_data(0)[0].shape == (1, 3, 4, 5) and fd.test()[1].tolist() == [0]


def test_fedscale_bad_input(tmp_path):
    img = {"i.png": _png(np.zeros((2, 2)))}
    csv = tmp_path / "client_data_mapping" / "train.csv"
    cases = [
        ([("a", "../secret.png", "n", 0)], "line 2: sample_path '../secret.png' leads outside"),
        ([("a", "/etc/passwd", "n", 0)], "sample_path '/etc/passwd' leads outside"),
        ([("a", "sub/../../x.png", "n", 0)], "leads outside"),
        ([("a", "i.png", "n", "zero")], "line 2: label_id 'zero' is not an integer"),
        ([("a", "i.png", "n", -1)], "label_id -1 out of range [0, 5)"),
        ([("a", "i.png", "n")], "line 2: 3 fields, the header has 4"),
        ([], "no rows"),
    ]
    for rows, problem in cases:
        _fedscale(tmp_path, rows, [("a", "i.png", "n", 0)], img)
        with pytest.raises(DataFormatError) as err:
            load_fedscale(tmp_path, num_classes=5)
        assert problem in _one_line(err, csv)
    csv.write_text("client,path,label\na,i.png,0\n")
    with pytest.raises(DataFormatError, match="line 1: no column 'client_id'"):
        load_fedscale(tmp_path)
    # an image that does not decode, and a link pointing outside the folder: found when the client is read
    _fedscale(tmp_path, [("a", "bad.png", "n", 0), ("b", "link.png", "n", 0)], [("a", "i.png", "n", 0)],
              {"bad.png": b"\x89PNG not really", **img})
    (tmp_path / "link.png").symlink_to(tmp_path.parent)
    fd = load_fedscale(tmp_path, num_classes=5)
    with pytest.raises(DataFormatError) as err:
        fd.client_data(0)
    assert "client 'a': image does not decode" in _one_line(err, tmp_path / "bad.png")
    with pytest.raises(DataFormatError) as err:
        fd.client_data(1)
    assert "client 'b': sample_path 'link.png' leads outside" in _one_line(err, csv)


def test_fedscale_test_set_decoded_when_a_run_needs_it(tmp_path):
    """Opening reads the CSVs only: a test image that does not decode is found when the test set is
    built (``fd.test()``, at the run's start), and images of two sizes in one client are refused."""
    img = {"i.png": _png(np.zeros((2, 2))), "j.png": _png(np.zeros((3, 2))), "bad.png": b"\x89PNG not really"}
    _fedscale(tmp_path, [("a", "i.png", "n", 0), ("a", "j.png", "n", 1)], [("a", "i.png", "n", 0), ("b", "bad.png", "n", 0)], img)
    fd = load_fedscale(tmp_path, num_classes=5)
    with pytest.raises(DataFormatError) as err:
        fd.test()
    assert "test set: image does not decode" in _one_line(err, tmp_path / "bad.png")
    with pytest.raises(DataFormatError) as err:
        fd.client_data(0)
    assert "client 'a': images differ in shape ((1, 2, 2) and (1, 3, 2))" in _one_line(err, tmp_path / "client_data_mapping" / "train.csv")


def test_fedscale_missing(tmp_path):
    with pytest.raises(DataNotFound) as err:
        load_fedscale(tmp_path, name="openimage")
    assert str(err.value).startswith(f"openimage: no client_data_mapping/train.csv in {tmp_path}; FedScale")


def test_grey_images_made_rgb_are_the_bytes_of_converting_first():
    """decode_image resizes an L image's one band and repeats it; FedScale converts to RGB first
    and then resizes: the same float32 values, for sizes down and up, and for stored sizes."""
    from PIL import Image

    from fedsim.data.formats.images import FEDSCALE_MNIST, ImageTransform, decode_image

    rng = np.random.default_rng(7)
    for i in range(60):
        h, w = int(rng.integers(9, 140)), int(rng.integers(9, 140))
        px = rng.integers(0, 256, (h, w))
        if i % 2:
            px = np.where(rng.random((h, w)) < 0.8, 255, px)  # NIST-like: mostly white
        data = _png(px)
        for transform in (FEDSCALE_MNIST, ImageTransform(mode="RGB", size=(50, 41)), ImageTransform(mode="RGB")):
            img = Image.open(io.BytesIO(data)).convert("RGB")
            if transform.size is not None:
                img = img.resize(transform.size, Image.BILINEAR)
            want = (np.asarray(img, dtype=np.float32) / 255.0).transpose(2, 0, 1)
            got = decode_image(data, "x", "y", transform)
            assert got.dtype == np.float32 and np.array_equal(got, want), (i, transform)


def test_a_folder_linking_out_of_the_data_folder_is_refused_for_every_sample_in_it(tmp_path):
    """Samples' folders are resolved once each: a folder that is a link out of ROOT refuses its
    samples, a link to a folder inside ROOT is followed, and a file link out is refused too."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "w").mkdir(parents=True)
    (outside / "w" / "a.png").write_bytes(_png(np.zeros((2, 2))))
    img = {"real/a.png": _png(np.full((2, 2), 7)), "real/b.png": _png(np.full((2, 2), 9))}
    rows = [("c", "out/w/a.png", "n", 0), ("d", "inside/a.png", "n", 0), ("d", "real/b.png", "n", 1),
            ("e", "real/link.png", "n", 0)]
    _fedscale(root, rows, [("c", "real/a.png", "n", 0)], img)
    (root / "out").symlink_to(outside)
    (root / "inside").symlink_to(root / "real")
    (root / "real" / "link.png").symlink_to(outside / "w" / "a.png")
    fd = load_fedscale(root, num_classes=2)
    csv = root / "client_data_mapping" / "train.csv"
    with pytest.raises(DataFormatError) as err:
        fd.client_data(0)
    assert "client 'c': sample_path 'out/w/a.png' leads outside" in _one_line(err, csv)
    x, y = fd.client_data(1)
    assert np.allclose(x[:, 0, 0, 0] * 255, [7, 9]) and y.tolist() == [0, 1]
    with pytest.raises(DataFormatError) as err:
        fd.client_data(2)
    assert "client 'e': sample_path 'real/link.png' leads outside" in _one_line(err, csv)
