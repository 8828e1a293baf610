"""Image datasets: torchvision-format loaders, TinyImageNet from its folder layout, and stand-ins.

All loaders return ``float32 (N, C, H, W)`` arrays in [0, 1] (not normalized) and ``int64`` labels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedsim.rng import stream
from fedsim.data.errors import DataCorrupted, DataNotFound

TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
STANDIN_MODES = 3


@dataclass(frozen=True)
class VisionSpec:
    """Shape, classes and standard normalization of an image dataset."""

    shape: tuple[int, int, int]
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: bool


VISION: dict[str, VisionSpec] = {
    # CIFAR-10 constants as in FedNova's code (JYWa/FedNova util_v4.py); the std is the widely copied
    # per-image value, the per-pixel population std is (0.2470, 0.2435, 0.2616).
    "cifar10": VisionSpec((3, 32, 32), 10, (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010), True),
    "cifar100": VisionSpec((3, 32, 32), 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), True),
    "mnist": VisionSpec((1, 28, 28), 10, (0.1307,), (0.3081,), False),
    "fashion_mnist": VisionSpec((1, 28, 28), 10, (0.2860,), (0.3530,), False),
    "tinyimagenet": VisionSpec((3, 64, 64), 200, (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821), True),
}

VisionArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, tuple[float, ...], tuple[float, ...]]


def load_vision(name: str, root: str, download: bool) -> VisionArrays:
    """Load a real image dataset.

    ``cifar10``, ``cifar100``, ``mnist`` and ``fashion_mnist`` go through ``torchvision.datasets``
    (its on-disk formats, checksums and downloader); ``tinyimagenet`` is read from
    ``<root>/tiny-imagenet-200`` (or ``root`` itself) with PIL.

    Args:
        name: Dataset name (a key of ``VISION``).
        root: Folder holding the data (as torchvision's ``root``).
        download: Download into ``root`` when missing.

    Returns:
        ``x_train, y_train, x_test, y_test, num_classes, mean, std``.

    Raises:
        DataNotFound: Files missing (and not downloaded).
        DataCorrupted: Files present but unreadable or failing torchvision's checks.
    """
    if name not in VISION:
        raise ValueError(f"unknown image dataset {name!r}; expected one of {', '.join(VISION)}")
    spec = VISION[name]
    root = os.path.abspath(os.path.expanduser(str(root)))
    if name == "tinyimagenet":
        x_tr, y_tr, x_te, y_te = _load_tinyimagenet(root, download)
    else:
        x_tr, y_tr, x_te, y_te = _load_torchvision(name, root, download)
    return x_tr, y_tr, x_te, y_te, spec.num_classes, spec.mean, spec.std


def _torchvision_class(name: str):
    from torchvision import datasets

    return {
        "cifar10": datasets.CIFAR10,
        "cifar100": datasets.CIFAR100,
        "mnist": datasets.MNIST,
        "fashion_mnist": datasets.FashionMNIST,
    }[name]


def _expected_files(name: str, cls, root: str) -> tuple[str, list[str]]:
    """(what to tell the user to place, files torchvision will read)."""
    if name.startswith("cifar"):
        names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
        return cls.base_folder, [os.path.join(root, cls.base_folder, f) for f in names]
    raw = os.path.join(root, cls.__name__, "raw")
    names = [os.path.splitext(os.path.basename(f))[0] for f, _ in cls.resources]
    legacy = [os.path.join(root, cls.__name__, "processed", f) for f in (cls.training_file, cls.test_file)]
    if all(os.path.isfile(p) for p in legacy):
        return f"{cls.__name__}/raw", legacy
    return f"{cls.__name__}/raw/*-ubyte", [os.path.join(raw, f) for f in names]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def _load_torchvision(name: str, root: str, download: bool) -> tuple[np.ndarray, ...]:
    cls = _torchvision_class(name)
    what, files = _expected_files(name, cls, root)
    present = all(os.path.isfile(f) for f in files)
    if not present and not download:
        raise DataNotFound(f"{name}: no data under {root}; set data.download: true or place {what} there")
    try:
        train = cls(root=root, train=True, download=download)
        test = cls(root=root, train=False, download=False)
    except Exception as err:  # torchvision reports missing/corrupt files and network errors alike
        if present:
            raise DataCorrupted(f"{name}: files under {root} failed torchvision's checks ({_first_line(err)})") from err
        raise DataNotFound(f"{name}: no data under {root} and download failed ({_first_line(err)})") from err
    return _images(train.data), _labels(train.targets), _images(test.data), _labels(test.targets)


def _images(data) -> np.ndarray:
    """uint8 ``(N, H, W, C)`` / ``(N, H, W)`` (numpy or torch) -> float32 ``(N, C, H, W)`` in [0, 1]."""
    arr = data.numpy() if hasattr(data, "numpy") else np.asarray(data)
    arr = arr[:, None] if arr.ndim == 3 else arr.transpose(0, 3, 1, 2)
    out = np.ascontiguousarray(arr).astype(np.float32)
    out /= 255.0
    return out


def _labels(targets) -> np.ndarray:
    arr = targets.numpy() if hasattr(targets, "numpy") else np.asarray(targets)
    return arr.astype(np.int64)


def tinyimagenet_base(root: str) -> Path | None:
    """The ``tiny-imagenet-200`` folder under ``root`` (or ``root`` itself), None when absent."""
    for base in (Path(root) / "tiny-imagenet-200", Path(root)):
        if (base / "wnids.txt").is_file() and (base / "train").is_dir():
            return base
    return None


def _load_tinyimagenet(root: str, download: bool) -> tuple[np.ndarray, ...]:
    """TinyImageNet-200: train = ``train/<wnid>/images/*.JPEG``, test = labelled ``val`` split.

    Labels are positions in the sorted wnid list (torchvision ImageFolder's convention).
    """
    base = tinyimagenet_base(root)
    if base is None and download:
        from torchvision.datasets.utils import download_and_extract_archive

        try:
            download_and_extract_archive(TINY_URL, download_root=root, md5=TINY_MD5)
        except Exception as err:
            raise DataNotFound(
                f"tinyimagenet: no tiny-imagenet-200 under {root} and download failed ({_first_line(err)})"
            ) from err
        base = tinyimagenet_base(root)
    if base is None:
        raise DataNotFound(
            f"tinyimagenet: no tiny-imagenet-200 under {root}; set data.download: true or unzip {TINY_URL} there"
        )
    wnids = sorted({w.strip() for w in _read_text(base / "wnids.txt").split() if w.strip()})
    label_of = {w: i for i, w in enumerate(wnids)}
    train_files, train_labels = [], []
    for w in wnids:
        files = sorted((base / "train" / w / "images").glob("*.JPEG"))
        if not files:
            raise DataNotFound(f"tinyimagenet: no images in {base / 'train' / w / 'images'}; re-extract {TINY_URL}")
        train_files += files
        train_labels += [label_of[w]] * len(files)
    ann = base / "val" / "val_annotations.txt"
    if not ann.is_file():
        raise DataNotFound(f"tinyimagenet: missing {ann}; re-extract {TINY_URL} under {base.parent}")
    test_files, test_labels = [], []
    for line in _read_text(ann).splitlines():
        fields = line.split("\t")
        if len(fields) < 2:
            continue
        if fields[1] not in label_of:
            raise DataCorrupted(f"tinyimagenet: {ann} names wnid {fields[1]!r} absent from wnids.txt")
        test_files.append(base / "val" / "images" / fields[0])
        test_labels.append(label_of[fields[1]])
    return (
        _read_jpegs(train_files),
        np.asarray(train_labels, dtype=np.int64),
        _read_jpegs(test_files),
        np.asarray(test_labels, dtype=np.int64),
    )


def _read_text(path: Path) -> str:
    """A listing file of the dataset (a regular file of at most MAX_MAPPING_BYTES, UTF-8)."""
    from fedsim.data.formats.files import open_regular
    from fedsim.limits import MAX_MAPPING_BYTES

    with open_regular(path, MAX_MAPPING_BYTES) as fh:
        data = fh.read(MAX_MAPPING_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataCorrupted(f"tinyimagenet: {path} is not UTF-8 text ({err.reason})") from None


def _read_jpegs(files: list[Path]) -> np.ndarray:
    """Decode images to float32 ``(N, 3, H, W)`` in [0, 1] (grayscale ones converted to RGB).

    Each must be a regular file (a FIFO or a device is refused before it is read) of at most
    ``MAX_SAMPLE_BYTES``, and declare at most ``MAX_IMAGE_PIXELS`` pixels in its header."""
    import io
    import warnings

    from PIL import Image

    from fedsim.data.formats.files import open_regular
    from fedsim.limits import MAX_IMAGE_PIXELS, MAX_SAMPLE_BYTES

    out: np.ndarray | None = None
    for i, path in enumerate(files):
        if not path.exists() and not path.is_symlink():
            raise DataNotFound(f"tinyimagenet: missing image {path}")
        with open_regular(path, MAX_SAMPLE_BYTES) as fh:
            data = fh.read(MAX_SAMPLE_BYTES + 1)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(data)) as im:
                    if im.size[0] * im.size[1] > MAX_IMAGE_PIXELS:
                        raise DataCorrupted(f"tinyimagenet: {path} declares {im.size[0]} x {im.size[1]} pixels, "
                                            f"more than {MAX_IMAGE_PIXELS:,}")
                    arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
            raise DataCorrupted(f"tinyimagenet: cannot decode {path} ({_first_line(err)})") from None
        if out is None:
            out = np.empty((len(files), 3, *arr.shape[:2]), dtype=np.float32)
        if arr.shape[:2] != out.shape[2:]:
            raise DataCorrupted(f"tinyimagenet: {path} is {arr.shape[:2]}, expected {out.shape[2:]}")
        out[i] = arr.transpose(2, 0, 1)
        out[i] /= 255.0
    return out if out is not None else np.zeros((0, 3, 64, 64), dtype=np.float32)


def vision_standin(
    shape: tuple[int, int, int] = (3, 32, 32),
    num_classes: int = 10,
    n_train: int = 10_000,
    n_test: int = 2_000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic images with learnable class structure, for runs without the real files.

    Smooth random fields (low-frequency cosines, mirror-symmetric so a horizontal flip keeps the
    class; unit pixel std): ``STANDIN_MODES`` templates per class and 8 class-free nuisance fields.
    An image of class ``y`` is ``0.5 + 0.08 * template[y, mode] + sum_k z_k * nuisance_k``
    (``z_k ~ N(0, 0.05^2)``), circularly shifted by up to 3 pixels each way, plus pixel noise
    ``N(0, 0.3^2)``, clipped to [0, 1]. Labels are balanced (round robin, then shuffled). The task
    is far from trivial: a linear model reaches ~50% (10 classes) after a few hundred SGD steps.

    Returns:
        ``x_train, y_train, x_test, y_test`` (float32 ``(N, C, H, W)`` in [0, 1] / int64).
    """
    c, h, w = shape
    rng = stream(seed, "standin")
    fy = np.arange(4)
    fx = np.arange(0, 6, 2)  # even cosines are symmetric about the image centre
    basis_y = np.cos(np.pi * np.outer(np.arange(h) + 0.5, fy) / h)  # (h, 4)
    basis_x = np.cos(np.pi * np.outer(np.arange(w) + 0.5, fx) / w)  # (w, 3)

    def fields(k: int) -> np.ndarray:
        coef = rng.normal(size=(k, c, len(fy), len(fx))) / (1.0 + fy[:, None] + fx[None, :])
        f = np.einsum("hp,kcpq,wq->kchw", basis_y, coef, basis_x)
        return (f / (f.reshape(k, -1).std(axis=1)[:, None, None, None] + 1e-12)).astype(np.float32)

    templates = fields(num_classes * STANDIN_MODES).reshape(num_classes, STANDIN_MODES, c, h, w)
    nuisance = fields(8)

    def draw(n: int, purpose: str) -> tuple[np.ndarray, np.ndarray]:
        r = stream(seed, purpose)
        y = r.permutation(np.arange(n) % num_classes).astype(np.int64)
        mode = r.integers(0, STANDIN_MODES, n)
        shift = r.integers(-3, 4, (n, 2))
        x = templates[y, mode] * np.float32(0.08) + np.float32(0.5)
        x += np.einsum("nk,kchw->nchw", r.normal(0.0, 0.05, (n, len(nuisance))).astype(np.float32), nuisance)
        for dy in range(-3, 4):
            for dx in range(-3, 4):
                sel = np.flatnonzero((shift[:, 0] == dy) & (shift[:, 1] == dx))
                if len(sel) and (dy or dx):
                    x[sel] = np.roll(x[sel], (dy, dx), axis=(2, 3))
        x += r.normal(0.0, 0.3, x.shape).astype(np.float32)
        np.clip(x, 0.0, 1.0, out=x)
        return x, y

    x_tr, y_tr = draw(n_train, "standin-train")
    x_te, y_te = draw(n_test, "standin-test")
    return x_tr, y_tr, x_te, y_te


def channel_stats(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of ``(N, C, H, W)`` images."""
    mean = x.mean(axis=(0, 2, 3), dtype=np.float64)
    std = x.std(axis=(0, 2, 3), dtype=np.float64)
    return tuple(float(v) for v in mean), tuple(float(max(v, 1e-6)) for v in std)
