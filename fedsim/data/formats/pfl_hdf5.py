"""HDF5 federated datasets in the two layouts the field publishes (needs ``h5py``).

- **TensorFlow Federated's layout** (``examples/<user>/<feature>``): TFF's EMNIST files
  (``fed_emnist_train.h5``, ``fed_emnist_test.h5``; written as TFF's ``create_fake_hdf5``
  writes them), which pfl-research's FEMNIST reader reads (``benchmarks/dataset/femnist.py``:
  ``f['examples'].items()``, ``pixels`` and ``label``). One file per split; users in the file's
  order (h5py lists a group's members by name).
- **pfl-research's own layout** (``/<partition>/<user>/<feature>``): written by pfl-research's
  ``benchmarks/dataset/stackoverflow/download_preprocess.py`` (``/train``, ``/val``, ``/test`` in one
  file, features ``inputs`` and ``targets``: token ids, the targets the inputs shifted by one) and
  read by its ``stackoverflow/numpy.py`` (``h5[f'{partition}/{user_id}/inputs']``). Give
  ``partition`` (and ``test_partition``); users in the order of ``/metadata/num_tokens/<partition>``
  when the file has it (pfl's ``get_fraction_of_users``), else the group's order.

Opening reads the user names and the datasets' shapes (metadata only); ``client_data(k)`` reads
user k's two datasets. Arrays: float features become ``float32`` (``(n, H, W)`` images gain a
channel axis: ``(n, 1, H, W)``; pfl's reader gives ``(n, H, W, 1)``), integer features (token ids)
``int64``; labels are checked against ``num_classes`` (None: any target, e.g. pfl's target
sequences).

Only the file's own data are read: a user or feature that is a soft or external link, a virtual
dataset or a dataset stored in external files is refused (an external link could name a FIFO or
another user's file), and so is a scalar or a non-numeric dataset. A user's datasets decode to at
most ``MAX_DECODED_BYTES`` (checked from their shapes before reading: a 300 KB gzip-compressed file
can declare gigabytes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, check_client, check_finite, labels_array, short, test_parts, who
from fedsim.data.formats.files import check_regular
from fedsim.limits import MAX_CLIENTS, MAX_DECODED_BYTES, MAX_INT

__all__ = ["load_pfl_hdf5", "TFF_KEYS", "PFL_KEYS"]

TFF_KEYS = ("pixels", "label")  # TFF's EMNIST features
PFL_KEYS = ("inputs", "targets")  # pfl-research's Stack Overflow features
_NUMERIC = "biuf"


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - a declared dependency; message for a stripped install
        raise DataNotFound("HDF5 files need the h5py package: pip install h5py") from None
    return h5py


def _member(group: Any, key: str, path: Path, what: str) -> Any:
    """``group[key]`` when it is a hard link (the file's own object), else DataFormatError."""
    h5py = _h5py()
    try:
        link = group.get(key, getlink=True)
    except (KeyError, RuntimeError, OSError, TypeError, ValueError) as err:
        raise DataFormatError(path, f"{what}: cannot read ({short(err)})") from None
    if link is None:
        return None
    if isinstance(link, h5py.ExternalLink):
        raise DataFormatError(path, f"{what} is an external link to {short(link.filename)!r}; fedsim reads only "
                                    "this file's own data")
    if isinstance(link, h5py.SoftLink):
        raise DataFormatError(path, f"{what} is a soft link to {short(link.path)!r}; fedsim reads only hard links")
    try:
        return group[key]
    except (KeyError, RuntimeError, OSError, TypeError, ValueError) as err:
        raise DataFormatError(path, f"{what}: cannot read ({short(err)})") from None


def _dataset_rows(ds: Any, path: Path, what: str) -> int:
    """Rows of a dataset that is the file's own, numeric and not a scalar (metadata only)."""
    h5py = _h5py()
    if not isinstance(ds, h5py.Dataset):
        raise DataFormatError(path, f"{what} is not a dataset")
    if ds.is_virtual:
        raise DataFormatError(path, f"{what} is a virtual dataset (it maps other files); fedsim reads only this file's own data")
    if ds.external:
        raise DataFormatError(path, f"{what} is stored in external files; fedsim reads only this file's own data")
    if ds.shape is None or ds.shape == ():
        raise DataFormatError(path, f"{what} is a scalar, not one value per example")
    if ds.dtype.kind not in _NUMERIC:
        kind = "text" if ds.dtype.kind in "OSUa" or h5py.check_string_dtype(ds.dtype) else f"dtype {ds.dtype}"
        raise DataFormatError(path, f"{what} holds {kind}; fedsim reads numeric features")
    return int(ds.shape[0])


class _File:
    """One HDF5 file's users (under ``examples`` or ``partition``) and their sizes."""

    def __init__(self, path: Path, group: str | None, x_key: str, y_key: str):
        h5py = _h5py()
        self.path, self.group, self.x_key, self.y_key = path, group or "examples", x_key, y_key
        check_regular(path, MAX_INT)
        users, sizes = [], []
        try:
            with h5py.File(path, "r") as f:
                top = _member(f, self.group, path, f"group {short(self.group)!r}")
                if not isinstance(top, h5py.Group):
                    raise DataFormatError(path, self._layout_problem(f, group))
                names = list(top.keys())
                if len(names) > MAX_CLIENTS:
                    raise DataFormatError(path, f"more than {MAX_CLIENTS:,} users")
                for user in self._order(f, names):
                    name = who("user", user)
                    g = _member(top, user, path, name)
                    if not isinstance(g, h5py.Group):
                        raise DataFormatError(path, f"{name} is not a group of datasets")
                    n = []
                    for key in (x_key, y_key):
                        ds = _member(g, key, path, f"{name}: {short(key)!r}")
                        if ds is None:
                            raise DataFormatError(path, f"{name}: no dataset {short(key)!r}")
                        n.append(_dataset_rows(ds, path, f"{name}: {short(key)!r}"))
                    self._check_bytes(g, name)
                    if n[0] != n[1]:
                        raise DataFormatError(path, f"{name}: {short(x_key)} has {n[0]} examples, {short(y_key)} {n[1]}")
                    if n[1] == 0:
                        raise DataFormatError(path, f"{name}: no samples")
                    users.append(user)
                    sizes.append(n[1])
        except OSError as err:
            raise DataFormatError(path, f"not a readable HDF5 file ({short(err)})") from None
        self.users = tuple(users)
        self.sizes = np.array(sizes, dtype=np.int64)

    def _check_bytes(self, g: Any, name: str) -> None:
        nbytes = sum(int(np.prod(g[k].shape, dtype=object)) * g[k].dtype.itemsize for k in (self.x_key, self.y_key)
                     if k in g and g[k].shape)
        if nbytes > MAX_DECODED_BYTES:
            raise DataFormatError(self.path, f"{name}: datasets decode to {nbytes:,} bytes, more than "
                                             f"{MAX_DECODED_BYTES:,}")

    def _order(self, f: Any, names: list[str]) -> list[str]:
        """pfl's layout: the order of ``/metadata/num_tokens/<partition>`` when present and naming
        exactly the group's users; otherwise (and for TFF's layout) the group's own order."""
        if self.group == "examples":
            return names
        try:
            meta = f.get(f"metadata/num_tokens/{self.group}", getlink=True)
            if meta is None or not isinstance(meta, _h5py().HardLink):
                return names
            ds = f[f"metadata/num_tokens/{self.group}"]
            if ds.shape != () or ds.nbytes > MAX_DECODED_BYTES:
                return names
            value = ds[()]
            order = list(json.loads(value.decode() if isinstance(value, bytes) else value))
        except (KeyError, ValueError, TypeError, RuntimeError, OSError, AttributeError, RecursionError):
            return names
        return order if sorted(order) == sorted(names) else names

    def _layout_problem(self, f: Any, partition: str | None) -> str:
        groups = [k for k in f.keys() if k != "metadata"]
        if partition is not None:
            return (f"no group {short(partition)!r} (pfl-research's layout /<partition>/<user>/<feature>; "
                    f"groups here: {short(', '.join(groups)) or 'none'})")
        msg = ("no group 'examples' (TensorFlow Federated's layout examples/<user>/<feature>, read by pfl-research's "
               "femnist.py)")
        if groups:
            pick = "train" if "train" in groups else groups[0]
            msg += (f"; groups {short(', '.join(groups))}: pfl-research's own layout /<partition>/<user>/<feature> "
                    f"(written by its stackoverflow/download_preprocess.py): give partition={pick!r}")
        return msg

    def arrays(self, k: int, num_classes: int | None) -> tuple[np.ndarray, np.ndarray]:
        h5py = _h5py()
        user = self.users[k]
        name = who("user", user)
        check_regular(self.path, MAX_INT)
        try:
            with h5py.File(self.path, "r") as f:
                g = _member(_member(f, self.group, self.path, f"group {self.group!r}"), user, self.path, name)
                if not isinstance(g, h5py.Group):
                    raise DataFormatError(self.path, f"{name} is not a group of datasets")
                arrays = []
                for key in (self.x_key, self.y_key):
                    ds = _member(g, key, self.path, f"{name}: {short(key)!r}")
                    if ds is None:
                        raise DataFormatError(self.path, f"{name}: no dataset {short(key)!r}")
                    _dataset_rows(ds, self.path, f"{name}: {short(key)!r}")
                self._check_bytes(g, name)
                for key in (self.x_key, self.y_key):
                    arrays.append(g[key][()])
                x, y = arrays
        except DataFormatError:
            raise
        except (OSError, KeyError, RuntimeError, TypeError, ValueError) as err:
            raise DataFormatError(self.path, f"{name}: cannot read ({short(err)})") from None
        check_client(x, y, self.path, name)
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32, copy=False)
            if x.ndim == 3:
                x = x[:, None]
            check_finite(x, self.path, name, short(self.x_key))
        else:
            x = x.astype(np.int64, copy=False)
        return x, labels_array(y, self.path, name, num_classes)


def load_pfl_hdf5(
    train: str | Path,
    *,
    test: str | Path | None = None,
    partition: str | None = None,
    test_partition: str | None = None,
    x_key: str | None = None,
    y_key: str | None = None,
    num_classes: int | None = None,
    name: str = "pfl_hdf5",
    source: str = "",
    **kw: Any,
) -> FederatedData:
    """A federated dataset from HDF5 files in TFF's layout or pfl-research's own.

    Args:
        train: The training file.
        test: The test file. TFF's layout: required. pfl's layout: default the training file.
            When it has every training user, each client is tested on its own part; otherwise its
            users form one shared test set.
        partition: None: TFF's layout (``examples/<user>/...``). A name: pfl's layout, the
            training users are ``/<partition>/<user>/...`` (pfl's Stack Overflow: ``train``).
        test_partition: pfl's layout: the test users' partition (pfl: ``val`` or ``test``);
            required with ``partition``.
        x_key, y_key: The feature and label dataset names; default TFF's ``pixels``, ``label`` or
            pfl's ``inputs``, ``targets``.
        num_classes: Label classes (checked), or None for any target.
        name: Dataset name.
        source: Where to get the files (appended to the missing-file message).
        **kw: Passed to FederatedData.
    """
    default = TFF_KEYS if partition is None else PFL_KEYS
    x_key, y_key = x_key or default[0], y_key or default[1]
    if partition is None:
        if test is None:
            raise ValueError(f"{name}: give the test file")
        if test_partition is not None:
            raise ValueError(f"{name}: test_partition is for pfl's layout; give partition too")
    else:
        test = train if test is None else test
        if test_partition is None:
            raise ValueError(f"{name}: give test_partition (pfl's layout: 'val' or 'test')")
    paths = [Path(p).expanduser().resolve() for p in (train, test)]
    for p in paths:
        if not p.exists():
            raise DataNotFound(f"{name}: no file {p}" + (f"; {source}" if source else ""))
    tr = _File(paths[0], partition, x_key, y_key)
    te = _File(paths[1], test_partition, x_key, y_key)
    if not tr.users:
        raise DataFormatError(tr.path, f"no users under {tr.group!r}")
    if not te.users:
        raise DataFormatError(te.path, f"no users under {te.group!r}")
    test_part, client_test = test_parts(tr.users, te.users, lambda i: te.arrays(i, num_classes), te.path)

    def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        return tr.arrays(k, num_classes)

    return FederatedData(sizes=tr.sizes, client_data=client_data, test=test_part, client_test=client_test,
                         num_classes=num_classes, name=name, client_ids=tr.users, **kw)
