"""The federated dataset value handed to the engine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsim.rng import stream
from fedsim.data.partition import PartitionSpec, partition


@dataclass(frozen=True, eq=False)
class Dataset:
    """Train/test arrays plus the clients' shares of the training set.

    Attributes:
        name: Dataset name; stand-in data ends with ``-standin``.
        x_train: ``float32 (N, ...)`` features; images ``(N, C, H, W)`` in [0, 1], not normalized.
        y_train: ``int64 (N,)`` labels.
        x_test: ``float32`` test features.
        y_test: ``int64`` test labels.
        num_classes: Number of classes.
        client_indices: Per client, disjoint ``int64`` indices into ``x_train``.
        mean: Per-channel normalization mean for images (applied by the engine), else None.
        std: Per-channel normalization std for images, else None.
        augment: Whether the engine applies random crop (pad 4) + horizontal flip.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    client_indices: tuple[np.ndarray, ...]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    augment: bool = False

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.dtype != np.float32 or y.dtype != np.int64:
                raise TypeError(f"{self.name}: x_{split} must be float32 and y_{split} int64, got {x.dtype}, {y.dtype}")
            if len(x) != len(y) or y.ndim != 1:
                raise ValueError(f"{self.name}: x_{split} and y_{split} disagree: {x.shape} vs {y.shape}")
            if x.shape[1:] != self.x_train.shape[1:]:
                raise ValueError(f"{self.name}: train/test feature shapes differ")
        if not isinstance(self.client_indices, tuple) or not self.client_indices:
            raise TypeError(f"{self.name}: client_indices must be a non-empty tuple of arrays")
        all_idx = np.concatenate(self.client_indices)
        if all_idx.dtype != np.int64:
            raise TypeError(f"{self.name}: client indices must be int64")
        if len(all_idx) and (all_idx.min() < 0 or all_idx.max() >= len(self.y_train)):
            raise ValueError(f"{self.name}: client index out of range")
        if len(np.unique(all_idx)) != len(all_idx):
            raise ValueError(f"{self.name}: client index sets overlap")
        if (self.mean is None) != (self.std is None):
            raise ValueError(f"{self.name}: give both mean and std or neither")

    @property
    def client_sizes(self) -> np.ndarray:
        """``int64 (clients,)``: n_i, the training samples per client."""
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example, e.g. ``(3, 32, 32)`` or ``(60,)``."""
        return tuple(int(d) for d in self.x_train.shape[1:])


def subsample(n_keep: int | None, n_total: int, seed: int, purpose: str) -> np.ndarray:
    """Sorted seeded subset of ``range(n_total)`` of size ``n_keep`` (all when None or larger)."""
    if n_keep is None or n_keep >= n_total:
        return np.arange(n_total, dtype=np.int64)
    if n_keep < 1:
        raise ValueError(f"{purpose}: must be >= 1, got {n_keep}")
    return np.sort(stream(seed, purpose).choice(n_total, size=n_keep, replace=False)).astype(np.int64)


def from_arrays(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    *,
    clients: int,
    spec: PartitionSpec,
    seed: int,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    augment: bool = False,
    n_train: int | None = None,
    n_test: int | None = None,
) -> Dataset:
    """Subsample (seeded, optional), partition the training labels and wrap as a Dataset."""
    tr = subsample(n_train, len(y_train), seed, "n_train")
    te = subsample(n_test, len(y_test), seed, "n_test")
    if len(tr) < len(y_train):
        x_train, y_train = x_train[tr], y_train[tr]
    if len(te) < len(y_test):
        x_test, y_test = x_test[te], y_test[te]
    y_train = np.asarray(y_train, dtype=np.int64)
    return Dataset(
        name=name,
        x_train=np.asarray(x_train, dtype=np.float32),
        y_train=y_train,
        x_test=np.asarray(x_test, dtype=np.float32),
        y_test=np.asarray(y_test, dtype=np.int64),
        num_classes=int(num_classes),
        client_indices=partition(y_train, clients, spec, seed),
        mean=None if mean is None else tuple(float(v) for v in mean),
        std=None if std is None else tuple(float(v) for v in std),
        augment=bool(augment),
    )
