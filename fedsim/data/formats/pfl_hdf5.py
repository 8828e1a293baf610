"""pfl-research's HDF5 layout (github.com/apple/pfl-research, ``benchmarks/dataset/femnist.py``).

One file per split (pfl's FEMNIST: ``fed_emnist_train.h5`` and ``fed_emnist_test.h5``, TensorFlow
Federated's EMNIST converted to HDF5), holding a group ``examples`` with one group per user and
one dataset per feature: ``examples/<user>/pixels`` ``(n, 28, 28)`` and ``examples/<user>/label``
``(n,)``. Opening reads the user names and the label datasets' lengths (metadata only);
``client_data(k)`` reads user k's two datasets. Needs ``h5py``.

Arrays: float features become ``float32`` (``(n, H, W)`` images gain a channel axis:
``(n, 1, H, W)``), integer features (token ids) ``int64``; labels are checked against
``num_classes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, check_client, labels_array, test_parts

__all__ = ["load_pfl_hdf5"]


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - a declared dependency; message for a stripped install
        raise DataNotFound("HDF5 files need the h5py package: pip install h5py") from None
    return h5py


class _File:
    """One pfl HDF5 file: its users and their sizes."""

    def __init__(self, path: Path, x_key: str, y_key: str):
        h5py = _h5py()
        self.path, self.x_key, self.y_key = path, x_key, y_key
        try:
            with h5py.File(path, "r") as f:
                if "examples" not in f or not isinstance(f["examples"], h5py.Group):
                    raise DataFormatError(path, "no group 'examples' (pfl-research's layout: examples/<user>/<feature>)")
                users, sizes = [], []
                for user, group in f["examples"].items():
                    for key in (x_key, y_key):
                        if not isinstance(group, h5py.Group) or key not in group:
                            raise DataFormatError(path, f"user {user!r}: no dataset {key!r}")
                    n_x, n_y = len(group[x_key]), len(group[y_key])
                    if n_x != n_y:
                        raise DataFormatError(path, f"user {user!r}: {x_key} has {n_x} examples, {y_key} {n_y}")
                    if n_y == 0:
                        raise DataFormatError(path, f"user {user!r}: no samples")
                    users.append(user)
                    sizes.append(n_y)
        except OSError as err:
            raise DataFormatError(path, f"not a readable HDF5 file ({err})") from None
        order = np.argsort(np.array(users, dtype=object), kind="stable") if users else np.array([], dtype=np.int64)
        self.users = tuple(users[i] for i in order)
        self.sizes = np.array([sizes[i] for i in order], dtype=np.int64)

    def arrays(self, k: int, num_classes: int | None) -> tuple[np.ndarray, np.ndarray]:
        h5py = _h5py()
        user = self.users[k]
        who = f"user {user!r}"
        try:
            with h5py.File(self.path, "r") as f:
                group = f["examples"][user]
                x, y = group[self.x_key][()], group[self.y_key][()]
        except (OSError, KeyError) as err:
            raise DataFormatError(self.path, f"{who}: cannot read ({err})") from None
        check_client(x, y, self.path, who)
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32, copy=False)
            if x.ndim == 3:
                x = x[:, None]
            if not np.all(np.isfinite(x)):
                raise DataFormatError(self.path, f"{who}: {self.x_key} holds a non-finite value")
        elif np.issubdtype(x.dtype, np.integer):
            x = x.astype(np.int64, copy=False)
        else:
            raise DataFormatError(self.path, f"{who}: {self.x_key} has dtype {x.dtype}; expected numbers")
        return x, labels_array(y, self.path, who, num_classes)


def load_pfl_hdf5(
    train: str | Path,
    *,
    test: str | Path | None = None,
    x_key: str = "pixels",
    y_key: str = "label",
    num_classes: int | None = None,
    name: str = "pfl_hdf5",
    source: str = "",
    **kw: Any,
) -> FederatedData:
    """A federated dataset from pfl-research HDF5 files.

    Args:
        train: The training file (``examples/<user>/{x_key, y_key}``).
        test: The test file. When it has every training user, each client is tested on its own
            part; otherwise its users form one shared test set. Required.
        x_key, y_key: The feature and label dataset names (pfl's FEMNIST: ``pixels``, ``label``).
        num_classes: Label classes (checked), or None for any target.
        name: Dataset name.
        source: Where to get the files (appended to the missing-file message).
        **kw: Passed to FederatedData.
    """
    paths: Sequence[Path] = [Path(p).expanduser().resolve() for p in (train, test) if p is not None]
    if test is None:
        raise ValueError(f"{name}: give the test file")
    for p in paths:
        if not p.is_file():
            raise DataNotFound(f"{name}: no file {p}" + (f"; {source}" if source else ""))
    tr, te = (_File(p, x_key, y_key) for p in paths)
    if not tr.users:
        raise DataFormatError(tr.path, "no users under 'examples'")
    if not te.users:
        raise DataFormatError(te.path, "no users under 'examples'")
    test_part, client_test = test_parts(tr.users, te.users, lambda i: te.arrays(i, num_classes))

    def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        return tr.arrays(k, num_classes)

    return FederatedData(sizes=tr.sizes, client_data=client_data, test=test_part, client_test=client_test,
                         num_classes=num_classes, name=name, client_ids=tr.users, **kw)
