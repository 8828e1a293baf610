"""Datasets for fedsim: generation, loading, and splitting across clients.

``build_dataset`` returns a frozen ``Dataset`` (arrays plus the clients' index arrays);
``SyntheticPopulation`` generates Synthetic clients on demand (the engine's route for Synthetic).
"""

from __future__ import annotations

from fedsim.data.dataset import Dataset, from_arrays
from fedsim.data.federated import FederatedData
from fedsim.data.digits import digits, digits_arrays
from fedsim.data.errors import DataCorrupted, DataNotFound
from fedsim.data.partition import PARTITIONS, PartitionSpec, class_counts, partition
from fedsim.data.synthetic import SyntheticPopulation, synthetic, synthetic_clients
from fedsim.data.vision import VISION, channel_stats, load_vision, vision_standin

DATASETS = ("synthetic", "digits", *VISION)
DEFAULT_ROOT = "data_cache"
STANDIN_TRAIN = 10_000
STANDIN_TEST = 2_000

__all__ = [
    "DATASETS",
    "PARTITIONS",
    "VISION",
    "DataCorrupted",
    "DataNotFound",
    "Dataset",
    "FederatedData",
    "PartitionSpec",
    "SyntheticPopulation",
    "build_dataset",
    "class_counts",
    "digits",
    "load_vision",
    "partition",
    "synthetic",
    "synthetic_clients",
    "vision_standin",
]


def build_dataset(
    name: str,
    *,
    clients: int,
    partition: PartitionSpec,
    seed: int,
    root: str | None = None,
    download: bool = False,
    standin: bool = False,
    alpha: float = 1.0,
    beta: float = 1.0,
    dim: int = 60,
    iid: bool = False,
    n_train: int | None = None,
    n_test: int | None = None,
    test_fraction: float = 0.2,
) -> Dataset:
    """Build a federated dataset by name.

    Args:
        name: ``synthetic | digits | mnist | fashion_mnist | cifar10 | cifar100 | tinyimagenet``.
        clients: Number of clients.
        partition: Split of the training set (ignored by ``synthetic``, whose clients are natural).
        seed: Scenario seed; all draws derive from it.
        root: Folder of the real image files (default ``data_cache``).
        download: Let torchvision download missing image files into ``root``.
        standin: Use synthetic stand-in images of the dataset's shape and classes (name gets
            ``-standin``); normalization is the stand-in's own per-channel mean/std.
        alpha: Synthetic(alpha, beta) model spread.
        beta: Synthetic(alpha, beta) feature spread.
        dim: Synthetic feature dimension.
        iid: Synthetic-IID instead of Synthetic(alpha, beta).
        n_train: Optional seeded subsample of the training set (digits, images; stand-in default
            10000). Synthetic ignores it.
        n_test: Optional seeded subsample of the test set (stand-in default 2000).
        test_fraction: Digits: share of every class held out for testing.

    Returns:
        The Dataset.

    Raises:
        DataNotFound: Real image files are missing and ``download`` is false or failed.
    """
    if name == "synthetic":
        return synthetic(alpha, beta, clients=clients, dim=dim, seed=seed, iid=iid)
    if name == "digits":
        x_tr, y_tr, x_te, y_te = digits_arrays(seed, test_fraction)
        return from_arrays(
            "digits", x_tr, y_tr, x_te, y_te, 10,
            clients=clients, spec=partition, seed=seed, n_train=n_train, n_test=n_test,
        )  # fmt: skip
    if name == "quadratic":
        raise ValueError("data.name: quadratic has no Dataset; the quadratic problem is built elsewhere")
    if name not in VISION:
        raise ValueError(f"data.name: must be one of quadratic, {', '.join(DATASETS)}, got {name!r}")
    spec = VISION[name]
    if standin:
        x_tr, y_tr, x_te, y_te = vision_standin(
            spec.shape,
            spec.num_classes,
            n_train=STANDIN_TRAIN if n_train is None else n_train,
            n_test=STANDIN_TEST if n_test is None else n_test,
            seed=seed,
        )
        mean, std = channel_stats(x_tr)
        return from_arrays(
            f"{name}-standin", x_tr, y_tr, x_te, y_te, spec.num_classes,
            clients=clients, spec=partition, seed=seed, mean=mean, std=std, augment=spec.augment,
        )  # fmt: skip
    x_tr, y_tr, x_te, y_te, num_classes, mean, std = load_vision(name, root or DEFAULT_ROOT, download)
    return from_arrays(
        name, x_tr, y_tr, x_te, y_te, num_classes,
        clients=clients, spec=partition, seed=seed, mean=mean, std=std, augment=spec.augment,
        n_train=n_train, n_test=n_test,
    )  # fmt: skip
