"""FedJAX's SQLite layout (github.com/google/fedjax, ``fedjax/core/sqlite_federated_data.py``).

One database per split (FedJAX's EMNIST: ``federated_emnist_train.sqlite``,
``federated_emnist_test.sqlite``, written by ``SQLiteFederatedDataBuilder``) with the table::

    CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL,
                                 num_examples INTEGER NOT NULL);

``data`` is a zlib-compressed msgpack map from feature name to array (FedJAX's
``fedjax/core/serialization.py``: a numeric array is msgpack extension type 1 holding the msgpack
of ``(shape, dtype name, row-major bytes)``, an array of byte strings (text) extension type 4).

What is read is what FedJAX reads: clients in ``rowid`` order (``SQLiteFederatedData.client_ids``),
and by default FedJAX's EMNIST features and preprocessing (``fedjax/datasets/emnist.py``,
``preprocess_batch``): ``x = 1 - pixels`` (flipped: ink is 1) and ``y = label``; images ``(n, 28,
28)`` gain a channel axis, ``(n, 1, 28, 28)`` (FedJAX: ``(n, 28, 28, 1)``). ``preprocess=None``
reads the features as stored. FedJAX's text datasets (Shakespeare, Stack Overflow: snippets as
byte strings, which FedJAX tokenizes in its own ``preprocess_client``) are refused with a message
that says so.

Opening reads ``client_id`` and ``num_examples`` only; ``client_data(k)`` reads and decodes client
k's blob. The path is opened as exactly that file, read-only (an ``file:`` URI built with every
special character quoted: ``#``, ``?`` and ``%`` in a name are characters of the name). A blob
decompresses to at most ``MAX_DECODED_BYTES``. Needs ``msgpack``.
"""

from __future__ import annotations

import sqlite3
import zlib
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import (DataFormatError, check_client, check_finite, labels_array, short, test_parts,
                                        who)
from fedsim.data.formats.files import check_regular
from fedsim.limits import MAX_CLIENTS, MAX_DECODED_BYTES, MAX_INT

__all__ = ["load_fedjax_sqlite", "decode_examples", "connect_read_only"]

_NDARRAY, _SCALAR, _BYTES_NDARRAY = 1, 3, 4  # FedJAX's msgpack extension codes
_NUMERIC = "biuf"  # numpy dtype kinds fedsim reads: bool, signed, unsigned, float


def _msgpack():
    try:
        import msgpack
    except ImportError:  # pragma: no cover - a declared dependency; message for a stripped install
        raise DataNotFound("FedJAX SQLite files need the msgpack package: pip install msgpack") from None
    return msgpack


def _count(shape: Any) -> int:
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and 0 <= d <= MAX_INT for d in shape):
        raise ValueError(f"array shape {short(shape, 40)} is not a shape")
    n = 1
    for d in shape:
        n *= d
    return n


def _ndarray(data: bytes) -> np.ndarray:
    shape, dtype, buffer = _msgpack().unpackb(data, raw=True)
    try:
        dt = np.dtype(dtype.decode() if isinstance(dtype, bytes) else dtype)
    except (TypeError, ValueError, UnicodeDecodeError):
        raise ValueError(f"dtype {short(dtype, 40)!r} is not a numpy dtype") from None
    if dt.kind not in _NUMERIC:
        raise ValueError(f"dtype {dt} is not numeric")
    if not isinstance(buffer, bytes) or _count(shape) * dt.itemsize != len(buffer):
        raise ValueError(f"an array of shape {short(shape, 40)} and dtype {dt} does not fit its bytes")
    return np.frombuffer(buffer, dtype=dt).reshape(shape)


def _bytes_ndarray(data: bytes) -> np.ndarray:
    shape, flat = _msgpack().unpackb(data, raw=True)
    if not isinstance(flat, list) or _count(shape) != len(flat) or not all(isinstance(b, bytes) for b in flat):
        raise ValueError("a byte-string array does not fit its shape")
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def decode_examples(blob: bytes, limit: int = MAX_DECODED_BYTES) -> dict[str, np.ndarray]:
    """A FedJAX ``data`` blob -> ``{feature: array}`` (ValueError with the reason when it is not one).

    Decompressed to at most ``limit`` bytes (a zlib bomb stops there); numeric arrays are views
    of the decompressed bytes, text arrays (extension type 4) object arrays of ``bytes``.
    """
    msgpack = _msgpack()
    if not isinstance(blob, bytes):
        raise ValueError(f"a {type(blob).__name__}, not a blob")
    d = zlib.decompressobj()
    raw = bytearray()
    tail = blob
    try:  # in steps of 16 MiB into one buffer: never more than ``limit`` (and a step) held
        while tail and not d.eof:
            raw += d.decompress(tail, 2**24)
            tail = d.unconsumed_tail
            if len(raw) > limit:
                raise ValueError(f"larger than {limit:,} bytes once decompressed")
        raw += d.flush()
    except zlib.error as err:
        raise ValueError(f"not zlib-compressed ({err})") from None
    if len(raw) > limit:
        raise ValueError(f"larger than {limit:,} bytes once decompressed")
    if not d.eof:
        raise ValueError("not zlib-compressed (the stream ends early)")

    def ext(code: int, data: bytes) -> Any:
        if code == _NDARRAY:
            return _ndarray(data)
        if code == _SCALAR:
            return _ndarray(data)[()]
        if code == _BYTES_NDARRAY:
            return _bytes_ndarray(data)
        raise ValueError(f"msgpack extension type {code} is not an array")

    try:
        value = msgpack.unpackb(raw, ext_hook=ext, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError, RecursionError) as err:
        raise ValueError(f"not FedJAX msgpack ({short(err)})") from None
    if not isinstance(value, dict) or not all(isinstance(v, np.ndarray) for v in value.values()):
        raise ValueError("not a map from feature names to arrays")
    return value


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to exactly the file ``path`` (absolute): a ``file:`` URI with the path
    percent-quoted (``Path.as_uri``), so ``#``, ``?`` and ``%`` in the name are never URI syntax."""
    return sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)


class _Database:
    def __init__(self, path: Path):
        self.path = path
        check_regular(path, MAX_INT)
        try:
            with closing(connect_read_only(path)) as db:
                rows = db.execute("SELECT client_id, num_examples FROM federated_data ORDER BY rowid LIMIT ?",
                                  (MAX_CLIENTS + 1,)).fetchall()
        except sqlite3.Error as err:
            raise DataFormatError(path, f"not a FedJAX SQLite file ({short(err)})") from None
        if len(rows) > MAX_CLIENTS:
            raise DataFormatError(path, f"more than {MAX_CLIENTS:,} clients")
        for cid, n in rows:
            if not isinstance(cid, (bytes, str)):
                raise DataFormatError(path, f"a client_id is {'NULL' if cid is None else type(cid).__name__}, "
                                            "not a byte string")
            if not isinstance(n, int) or n < 1:
                raise DataFormatError(path, f"{who('client', _name(cid))}: no samples")
        self.ids = [cid for cid, _ in rows]
        self.names = tuple(_name(c) for c in self.ids)
        if len(set(self.names)) != len(self.names):
            raise DataFormatError(path, "a client_id appears twice")
        self.sizes = np.array([n for _, n in rows], dtype=np.int64)

    def arrays(self, k: int, x_key: str, y_key: str, preprocess: str | None,
               num_classes: int | None) -> tuple[np.ndarray, np.ndarray]:
        name = who("client", self.names[k])
        try:
            with closing(connect_read_only(self.path)) as db:
                row = db.execute("SELECT data FROM federated_data WHERE client_id = ?", (self.ids[k],)).fetchone()
        except sqlite3.Error as err:
            raise DataFormatError(self.path, f"{name}: cannot read ({short(err)})") from None
        if row is None:
            raise DataFormatError(self.path, f"{name}: no longer in the file")
        try:
            ex = decode_examples(row[0])
        except ValueError as err:
            raise DataFormatError(self.path, f"{name}: data is {err}") from None
        for key in (x_key, y_key):
            if key not in ex:
                hint = " (FedJAX's EMNIST: pixels, label; give x_key, y_key for another dataset)" \
                    if preprocess == "emnist" else ""
                raise DataFormatError(self.path, f"{name}: no feature {short(key)!r} (features: "
                                                 f"{short(', '.join(ex))}){hint}")
        x, y = ex[x_key], ex[y_key]
        for key, arr in ((x_key, x), (y_key, y)):
            if arr.dtype == object:
                raise DataFormatError(self.path, (
                    f"{name}: feature {short(key)!r} holds text ({arr.size} byte strings: FedJAX's text datasets, "
                    "Shakespeare and Stack Overflow, store snippets that FedJAX's own preprocess_client turns into "
                    "token ids); fedsim reads numeric features: tokenize them in Python and hand "
                    "fedsim.data.FederatedData.from_clients the arrays"))
            if arr.ndim == 0:
                raise DataFormatError(self.path, f"{name}: feature {short(key)!r} is a scalar, not one value per example")
        check_client(x, y, self.path, name, expected=int(self.sizes[k]))
        if np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
            check_finite(x, self.path, name, f"feature {short(x_key)!r}")
            if preprocess == "emnist":
                x = 1 - x  # FedJAX's emnist.preprocess_batch: 1 - pixels
            if x.ndim == 3:  # (n, H, W) grey images
                x = x[:, None]
        elif np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
            x = x.astype(np.int64)
        else:  # pragma: no cover - decode_examples admits numeric kinds only
            raise DataFormatError(self.path, f"{name}: feature {short(x_key)!r} has dtype {x.dtype}; expected numbers")
        return x, labels_array(y, self.path, name, num_classes)


def _name(cid: Any) -> str:
    return cid.decode("utf-8", "replace") if isinstance(cid, bytes) else str(cid)


def load_fedjax_sqlite(
    train: str | Path,
    *,
    test: str | Path,
    x_key: str = "pixels",
    y_key: str = "label",
    preprocess: Literal["emnist"] | None = "emnist",
    num_classes: int | None = None,
    name: str = "fedjax_sqlite",
    source: str = "",
    **kw: Any,
) -> FederatedData:
    """A federated dataset from FedJAX SQLite files (train and test), clients in FedJAX's order.

    When the test file has every training client, each client is tested on its own part;
    otherwise the test clients form one shared test set.

    Args:
        train, test: The two database files (FedJAX's ``federated_emnist_{train,test}.sqlite``).
        x_key, y_key: The feature and label names (FedJAX's EMNIST: ``pixels``, ``label``).
        preprocess: ``"emnist"`` (default): FedJAX's EMNIST preprocessing, ``x = 1 - pixels``;
            None: the features as stored.
        num_classes: Label classes (checked; FedJAX's EMNIST: 62), or None for any target.
        name: Dataset name.
        source: Where to get the files (appended to the missing-file message).
        **kw: Passed to FederatedData.
    """
    if preprocess not in ("emnist", None):
        raise ValueError(f"{name}: preprocess must be 'emnist' or None, got {preprocess!r}")
    paths = [Path(p).expanduser().resolve() for p in (train, test)]
    for p in paths:
        if not p.exists():
            raise DataNotFound(f"{name}: no file {p}" + (f"; {source}" if source else ""))
    tr, te = (_Database(p) for p in paths)
    if not tr.ids:
        raise DataFormatError(tr.path, "no clients in federated_data")
    if not te.ids:
        raise DataFormatError(te.path, "no clients in federated_data")
    test_part, client_test = test_parts(tr.names, te.names, lambda i: te.arrays(i, x_key, y_key, preprocess, num_classes),
                                        te.path)

    def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        return tr.arrays(k, x_key, y_key, preprocess, num_classes)

    return FederatedData(sizes=tr.sizes, client_data=client_data, test=test_part, client_test=client_test,
                         num_classes=num_classes, name=name, client_ids=tr.names, **kw)
