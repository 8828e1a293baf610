"""FedJAX's SQLite layout (github.com/google/fedjax, ``fedjax/core/sqlite_federated_data.py``).

One database per split (FedJAX's EMNIST: ``federated_emnist_train.sqlite``,
``federated_emnist_test.sqlite``) with the table::

    CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL,
                                 num_examples INTEGER NOT NULL);

``data`` is a zlib-compressed msgpack map from feature name to array (FedJAX's
``fedjax/core/serialization.py``: an array is msgpack extension type 1 holding the msgpack of
``(shape, dtype name, row-major bytes)``; FedJAX's EMNIST: ``x`` ``(n, 28, 28)`` float32 and
``y`` ``(n,)`` int32). Opening reads ``client_id`` and ``num_examples`` only; ``client_data(k)``
reads and decodes client k's blob. Needs ``msgpack``.
"""

from __future__ import annotations

import sqlite3
import zlib
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, check_client, labels_array, test_parts

__all__ = ["load_fedjax_sqlite", "decode_examples"]

_NDARRAY, _SCALAR = 1, 3  # FedJAX's msgpack extension codes


def _msgpack():
    try:
        import msgpack
    except ImportError:  # pragma: no cover - a declared dependency; message for a stripped install
        raise DataNotFound("FedJAX SQLite files need the msgpack package: pip install msgpack") from None
    return msgpack


def _ndarray(data: bytes) -> np.ndarray:
    msgpack = _msgpack()
    shape, dtype, buffer = msgpack.unpackb(data, raw=True)
    dt = np.dtype(dtype.decode() if isinstance(dtype, bytes) else dtype)
    return np.frombuffer(buffer, dtype=dt).reshape(shape)


def decode_examples(blob: bytes) -> dict[str, np.ndarray]:
    """A FedJAX ``data`` blob -> ``{feature: array}`` (ValueError with the reason when it is not one)."""
    msgpack = _msgpack()

    def ext(code: int, data: bytes) -> Any:
        if code == _NDARRAY:
            return _ndarray(data)
        if code == _SCALAR:
            return _ndarray(data)[()]
        raise ValueError(f"msgpack extension type {code} is not a numeric array")

    try:
        value = msgpack.unpackb(zlib.decompress(blob), ext_hook=ext, raw=False)
    except zlib.error as err:
        raise ValueError(f"not zlib-compressed ({err})") from None
    except (msgpack.UnpackException, ValueError, TypeError) as err:
        raise ValueError(f"not FedJAX msgpack ({err})") from None
    if not isinstance(value, dict) or not all(isinstance(v, np.ndarray) for v in value.values()):
        raise ValueError("not a map from feature names to arrays")
    return value


class _Database:
    def __init__(self, path: Path):
        self.path = path
        try:
            with closing(self._connect()) as db:
                rows = db.execute("SELECT client_id, num_examples FROM federated_data ORDER BY client_id").fetchall()
        except sqlite3.DatabaseError as err:
            raise DataFormatError(path, f"not a FedJAX SQLite file ({err})") from None
        for cid, n in rows:
            if not isinstance(n, int) or n < 1:
                raise DataFormatError(path, f"client {_name(cid)!r}: no samples")
        self.ids = [cid for cid, _ in rows]
        self.names = tuple(_name(c) for c in self.ids)
        self.sizes = np.array([n for _, n in rows], dtype=np.int64)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)

    def arrays(self, k: int, x_key: str, y_key: str, num_classes: int | None) -> tuple[np.ndarray, np.ndarray]:
        who = f"client {self.names[k]!r}"
        try:
            with closing(self._connect()) as db:
                (blob,) = db.execute("SELECT data FROM federated_data WHERE client_id = ?", (self.ids[k],)).fetchone()
        except sqlite3.DatabaseError as err:
            raise DataFormatError(self.path, f"{who}: cannot read ({err})") from None
        try:
            ex = decode_examples(blob)
        except ValueError as err:
            raise DataFormatError(self.path, f"{who}: data is {err}") from None
        for key in (x_key, y_key):
            if key not in ex:
                raise DataFormatError(self.path, f"{who}: no feature {key!r} (features: {', '.join(ex)})")
        x, y = ex[x_key], ex[y_key]
        check_client(x, y, self.path, who, expected=int(self.sizes[k]))
        if np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
            if x.ndim == 3:  # (n, H, W) grey images
                x = x[:, None]
        elif np.issubdtype(x.dtype, np.integer):
            x = x.astype(np.int64)
        else:
            raise DataFormatError(self.path, f"{who}: feature {x_key!r} has dtype {x.dtype}; expected numbers")
        return x, labels_array(y, self.path, who, num_classes)


def _name(cid: Any) -> str:
    return cid.decode("utf-8", "replace") if isinstance(cid, bytes) else str(cid)


def load_fedjax_sqlite(
    train: str | Path,
    *,
    test: str | Path,
    x_key: str = "x",
    y_key: str = "y",
    num_classes: int | None = None,
    name: str = "fedjax_sqlite",
    source: str = "",
    **kw: Any,
) -> FederatedData:
    """A federated dataset from FedJAX SQLite files (train and test; clients in ``client_id`` order).

    When the test file has every training client, each client is tested on its own part;
    otherwise the test clients form one shared test set.
    """
    paths = [Path(p).expanduser().resolve() for p in (train, test)]
    for p in paths:
        if not p.is_file():
            raise DataNotFound(f"{name}: no file {p}" + (f"; {source}" if source else ""))
    tr, te = (_Database(p) for p in paths)
    if not tr.ids:
        raise DataFormatError(tr.path, "no clients in federated_data")
    if not te.ids:
        raise DataFormatError(te.path, "no clients in federated_data")
    test_part, client_test = test_parts(tr.ids, te.ids, lambda i: te.arrays(i, x_key, y_key, num_classes))

    def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        return tr.arrays(k, x_key, y_key, num_classes)

    return FederatedData(sizes=tr.sizes, client_data=client_data, test=test_part, client_test=client_test,
                         num_classes=num_classes, name=name, client_ids=tr.names, **kw)
