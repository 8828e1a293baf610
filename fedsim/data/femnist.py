"""FEMNIST (LEAF): handwritten digits and letters, one writer per client.

62 classes (10 digits, 26 upper-case, 26 lower-case letters), 28x28 grey images stored by LEAF
as 784 floats per example, ~3,500 writers (Caldas et al. 2018, "LEAF: A Benchmark for Federated
Settings", Table 1; data from Cohen et al. 2017, EMNIST / NIST Special Database 19). Files:
LEAF's ``data/femnist/preprocess.sh`` writes ``data/train`` and ``data/test`` (github.com/TalwalkarLab/leaf).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, labels_array
from fedsim.data.formats.fedscale_csv import load_fedscale
from fedsim.data.formats.images import FEDSCALE_MNIST, ImageTransform
from fedsim.data.formats.leaf import LEAF_EPOCHS, VALIDATE_BYTES, load_leaf
from fedsim.data.options import dataset_options

__all__ = ["FEMNIST_CLASSES", "FEMNIST_SHAPE", "FEMNIST_SOURCE", "FEDSCALE_SOURCE", "femnist", "femnist_fedscale",
           "load_femnist"]

FEMNIST_CLASSES = 62
FEMNIST_SHAPE = (1, 28, 28)
FEMNIST_SOURCE = (
    "get FEMNIST from LEAF (github.com/TalwalkarLab/leaf: data/femnist/preprocess.sh, e.g. "
    "-s niid --sf 1.0 -k 0 -t sample) and set data.root to the folder holding its train/ and test/"
)

FEDSCALE_SOURCE = (
    "get FedScale's FEMNIST (github.com/SymbioticLab/FedScale: benchmark/dataset/download.sh download femnist) "
    "and set data.root to the folder holding client_data_mapping/"
)


def decode_femnist(x: list, y: list, where: Path, who: str) -> tuple[np.ndarray, np.ndarray]:
    """One writer's LEAF lists -> ``float32 (n, 1, 28, 28)`` images and ``int64`` labels in [0, 62)."""
    try:
        with np.errstate(over="ignore"):  # 1e300 becomes inf, refused below without a warning
            images = np.asarray(x, dtype=np.float32) if len(x) else np.zeros((0, 784), dtype=np.float32)
    except (ValueError, TypeError, OverflowError):
        raise DataFormatError(where, f"{who}: x must be lists of 784 numbers") from None
    if images.ndim != 2 or images.shape[1] != 784:
        raise DataFormatError(where, f"{who}: x must be lists of 784 numbers (28x28), got shape {images.shape}")
    if not np.all(np.isfinite(images)):
        raise DataFormatError(where, f"{who}: x holds a non-finite value")
    labels = labels_array(y, where, who, FEMNIST_CLASSES)
    return images.reshape(-1, *FEMNIST_SHAPE), labels


def load_femnist(root: str | Path, *, validate_bytes: int = VALIDATE_BYTES, epoch_rule: str = LEAF_EPOCHS) -> FederatedData:
    """FEMNIST from LEAF's ``train/`` and ``test/`` JSON folders under ``root``, one client per
    writer; ``epoch_rule`` (default LEAF's ``ceil``): :attr:`FederatedData.epoch_rule`."""
    return load_leaf(root, decode_femnist, name="femnist", num_classes=FEMNIST_CLASSES, source=FEMNIST_SOURCE,
                     validate_bytes=validate_bytes, epoch_rule=epoch_rule)


def femnist(config: Any, seed: int) -> FederatedData:
    """Dataset factory (``data: {name: femnist, root: DIR, options: {epoch_rule: ceil | floor}}``);
    the partition is the writers', so ``seed`` is unused."""
    del seed
    opts = dataset_options(config, "femnist", {"epoch_rule": (LEAF_EPOCHS, "floor")})
    return load_femnist(getattr(config, "root", "data"), epoch_rule=opts["epoch_rule"])


#: ``data.options.transform`` of ``femnist_fedscale``.
FEDSCALE_TRANSFORMS = {"fedscale": FEDSCALE_MNIST, "none": ImageTransform()}


def femnist_fedscale(config: Any, seed: int) -> FederatedData:
    """Dataset factory (``data: {name: femnist_fedscale, root: DIR, options: {transform: fedscale |
    none}}``): FedScale's FEMNIST, its ``client_data_mapping/{train,test}.csv`` and image files
    (FedScale's 2,800 clients). ``transform: fedscale`` (default): FedScale's own
    (:data:`~fedsim.data.formats.images.FEDSCALE_MNIST`: RGB, 32 x 32, normalized); ``none``: the
    stored images as they are (grey: 1 channel)."""
    del seed
    opts = dataset_options(config, "femnist_fedscale", {"transform": tuple(FEDSCALE_TRANSFORMS)})
    return load_fedscale(getattr(config, "root", "data"), num_classes=FEMNIST_CLASSES, name="femnist_fedscale",
                         source=FEDSCALE_SOURCE, transform=FEDSCALE_TRANSFORMS[opts["transform"]])
