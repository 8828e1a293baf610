"""A Parquet or Arrow table with a client-id column: one row per example, clients by natural id.

This is what Flower Datasets' Hugging Face datasets export to (e.g. ``flwrlabs/femnist``:
``image`` (PNG), ``writer_id``, ``character``; ``flwrlabs/shakespeare``: ``x``, ``y``,
``character_id``). Files: ``.parquet`` (row groups), Arrow IPC files (``.arrow``/``.feather``,
random access) or Arrow IPC streams (Hugging Face's cache files, memory-mapped).

Opening reads only the client-id column; ``client_data(k)`` reads the chunks (row groups or
record batches) holding client k's rows, and only its feature and label columns.

Feature columns (``x``):
- one or more numeric columns -> ``float32 (n, columns)``;
- one list column of numbers (fixed or variable size, every row the same length) -> ``(n, d)``,
  reshaped to ``shape`` when given;
- one image column (binary, or a struct with a ``bytes`` field, Hugging Face's ``Image``) ->
  ``float32 (n, C, H, W)`` in [0, 1];
- one string column with ``vocab`` -> ``int64 (n, length)`` character indices.
Labels (``y``): integers in ``[0, num_classes)``, or single characters with ``vocab``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, check_client, labels_array, test_parts
from fedsim.data.formats.images import decode_image, stack_images
from fedsim.rng import stream

__all__ = ["TableSource", "load_table", "split_rows"]

SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")


def split_rows(n: int, fraction: float, seed: int, client: int) -> tuple[np.ndarray, np.ndarray]:
    """Client ``client``'s rows ``0..n-1`` split at random into train and test (``floor(fraction * n
    + 1/2)`` test rows, at least one train row; a client with one row has no test part), from the stream
    ``(seed, "data.split", client)``."""
    rows = stream(seed, "data.split", client).permutation(n)
    n_test = min(int(fraction * n + 0.5), n - 1)
    return np.sort(rows[n_test:]), np.sort(rows[:n_test])


@dataclass
class TableSource:
    """The chunks of one or more table files and where each global row lives."""

    files: tuple[Path, ...]
    chunk_file: np.ndarray  # (chunks,) file number of each chunk
    chunk_local: np.ndarray  # (chunks,) row group / batch number inside its file
    chunk_start: np.ndarray  # (chunks + 1,) first global row of each chunk
    column_names: tuple[str, ...]
    schema: Any
    _handles: dict

    @classmethod
    def open(cls, path: Path) -> "TableSource":
        files = tuple(sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())) if path.is_dir() else (path,)
        if not files:
            raise DataNotFound(f"no {', '.join(SUFFIXES)} files in {path}")
        cf, cl, sizes, handles, schema = [], [], [], {}, None
        for f, p in enumerate(files):
            handle = _open_file(p)
            handles[f] = handle
            s = handle.schema
            if schema is None:
                schema = s
            elif not s.equals(schema):
                raise DataFormatError(p, f"schema differs from {files[0].name}'s")
            for c, n in enumerate(handle.chunk_rows):
                cf.append(f)
                cl.append(c)
                sizes.append(n)
        return cls(files, np.array(cf, dtype=np.int64), np.array(cl, dtype=np.int64),
                   np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]), tuple(schema.names), schema, handles)

    @property
    def num_rows(self) -> int:
        return int(self.chunk_start[-1])

    def column(self, name: str) -> Any:
        """A whole column (used for the client ids) as one Arrow array."""
        import pyarrow as pa

        parts = [self._read(c, [name]).column(0) for c in range(len(self.chunk_file))]
        return pa.chunked_array([a for p in parts for a in p.chunks], type=self.schema.field(name).type)

    def rows(self, rows: np.ndarray, columns: Sequence[str]) -> Any:
        """The given global rows (sorted) of ``columns``, as one Arrow table."""
        import pyarrow as pa

        chunks = np.searchsorted(self.chunk_start, rows, side="right") - 1
        parts = []
        for c in np.unique(chunks):
            local = rows[chunks == c] - self.chunk_start[c]
            parts.append(self._read(int(c), columns).take(pa.array(local)))
        return pa.concat_tables(parts)

    def _read(self, c: int, columns: Sequence[str]) -> Any:
        f = int(self.chunk_file[c])
        try:
            return self._handles[f].read(int(self.chunk_local[c]), list(columns))
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            raise DataFormatError(self.files[f], f"cannot read ({type(err).__name__}: {err})") from None


class _Parquet:
    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.file = pq.ParquetFile(path)
        self.schema = self.file.schema_arrow
        self.chunk_rows = [self.file.metadata.row_group(i).num_rows for i in range(self.file.num_row_groups)]

    def read(self, i: int, columns: list[str]) -> Any:
        return self.file.read_row_group(i, columns=columns)


class _Ipc:
    def __init__(self, path: Path):
        import pyarrow as pa

        source = pa.memory_map(str(path), "r")
        try:
            reader = pa.ipc.open_file(source)
            self.schema = reader.schema
            self.chunk_rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
            self.get = reader.get_batch
        except pa.ArrowInvalid:  # not the file format: an IPC stream (Hugging Face's cache files)
            source.seek(0)
            table = pa.ipc.open_stream(source).read_all()  # zero-copy over the memory map
            batches = table.to_batches()
            self.schema = table.schema
            self.chunk_rows = [b.num_rows for b in batches]
            self.get = batches.__getitem__

    def read(self, i: int, columns: list[str]) -> Any:
        import pyarrow as pa

        return pa.Table.from_batches([self.get(i)]).select(columns)


def _open_file(path: Path) -> Any:
    try:
        return _Parquet(path) if path.suffix == ".parquet" else _Ipc(path)
    except OSError as err:
        raise DataFormatError(path, f"cannot read ({err})") from None
    except Exception as err:  # noqa: BLE001 - ArrowInvalid and friends: not a table file
        kind = "Parquet" if path.suffix == ".parquet" else "Arrow IPC"
        raise DataFormatError(path, f"not a readable {kind} file ({err})") from None


@dataclass(frozen=True)
class _Columns:
    client: str
    x: tuple[str, ...]
    y: str
    shape: tuple[int, ...] | None
    vocab: str | None
    num_classes: int | None


def _features(table: Any, cols: _Columns, where: Path, who: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.types as pt

    if len(cols.x) > 1:
        try:
            return np.stack([table.column(c).to_numpy(zero_copy_only=False) for c in cols.x], axis=1).astype(np.float32)
        except (ValueError, TypeError, pa.ArrowException) as err:
            raise DataFormatError(where, f"{who}: feature columns must be numeric ({err})") from None
    col = table.column(cols.x[0])
    t = col.type
    if pt.is_struct(t) and t.get_field_index("bytes") >= 0:
        col, t = pa.chunked_array([c.field("bytes") for c in col.chunks], type=t.field("bytes").type), t.field("bytes").type
    if pt.is_binary(t) or pt.is_large_binary(t):
        images = []
        for v in col.to_pylist():
            if v is None:
                raise DataFormatError(where, f"{who}: an image is missing")
            images.append(decode_image(v, where, who))
        return stack_images(images, where, who)
    if pt.is_string(t) or pt.is_large_string(t):
        values = col.to_pylist()
        if cols.vocab is None:
            raise DataFormatError(where, f"{who}: column {cols.x[0]!r} holds text; give a vocabulary to index it")
        if len({len(v) for v in values if v is not None}) > 1 or any(v is None for v in values):
            raise DataFormatError(where, f"{who}: text in {cols.x[0]!r} must have one length")
        return _encode("".join(values), cols.vocab, where, who).reshape(len(values), -1)
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t):
        values = col.to_pylist()
        if any(v is None for v in values) or len({len(v) for v in values}) > 1:
            raise DataFormatError(where, f"{who}: lists in {cols.x[0]!r} must be present and of one length")
        try:
            arr = np.asarray(values, dtype=np.float32)
        except (ValueError, TypeError):
            raise DataFormatError(where, f"{who}: lists in {cols.x[0]!r} must hold numbers") from None
    elif pt.is_integer(t) or pt.is_floating(t):
        arr = col.to_numpy(zero_copy_only=False).astype(np.float32)[:, None]
    else:
        raise DataFormatError(where, f"{who}: cannot use column {cols.x[0]!r} of type {t} as features")
    if np.isnan(arr).any():
        raise DataFormatError(where, f"{who}: features hold a missing or NaN value")
    if cols.shape is not None:
        if int(np.prod(cols.shape)) != arr.shape[1]:
            raise DataFormatError(where, f"{who}: {arr.shape[1]} values per row do not fill shape {cols.shape}")
        arr = arr.reshape(len(arr), *cols.shape)
    return arr


def _encode(text: str, vocab: str, where: Path, who: str) -> np.ndarray:
    table = {c: i for i, c in enumerate(vocab)}
    try:
        return np.fromiter((table[c] for c in text), dtype=np.int64, count=len(text))
    except KeyError as err:
        raise DataFormatError(where, f"{who}: character {err.args[0]!r} is not in the vocabulary") from None


def _labels(table: Any, cols: _Columns, where: Path, who: str) -> np.ndarray:
    import pyarrow.types as pt

    col = table.column(cols.y)
    if col.null_count:
        raise DataFormatError(where, f"{who}: a label is missing")
    if pt.is_string(col.type) or pt.is_large_string(col.type):
        values = col.to_pylist()
        if cols.vocab is None or any(len(v) != 1 for v in values):
            raise DataFormatError(where, f"{who}: text labels must be single characters of a given vocabulary")
        return _encode("".join(values), cols.vocab, where, who)
    if pt.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return labels_array(col.to_numpy(zero_copy_only=False), where, who, cols.num_classes)


class _Part:
    """One table file (or folder) indexed by client id."""

    def __init__(self, path: Path, cols: _Columns):
        self.path = path
        self.source = TableSource.open(path)
        missing = [c for c in (cols.client, *cols.x, cols.y) if c not in self.source.column_names]
        if missing:
            raise DataFormatError(path, f"no column {missing[0]!r} (columns: {', '.join(self.source.column_names)})")
        ids = self.source.column(cols.client)
        if ids.null_count:
            raise DataFormatError(path, f"column {cols.client!r} has a missing client id")
        values = np.asarray(ids.to_numpy(zero_copy_only=False)).astype(str)
        self.names, inverse = np.unique(values, return_inverse=True)
        self.order = np.argsort(inverse, kind="stable")
        self.bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(self.names)))])
        self.cols = cols

    def rows(self, k: int) -> np.ndarray:
        return self.order[self.bounds[k]:self.bounds[k + 1]]

    def arrays(self, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows = np.sort(self.rows(k) if rows is None else rows)
        who = f"client {str(self.names[k])!r}"
        table = self.source.rows(rows, [*self.cols.x, self.cols.y])
        x, y = _features(table, self.cols, self.path, who), _labels(table, self.cols, self.path, who)
        check_client(x, y, self.path, who)
        return x, y


def load_table(
    train: str | Path,
    *,
    client_column: str,
    x_column: str | Sequence[str],
    y_column: str,
    test: str | Path | None = None,
    test_fraction: float = 0.1,
    seed: int = 0,
    num_classes: int | None = None,
    shape: Sequence[int] | None = None,
    vocab: str | None = None,
    name: str = "table",
    **kw: Any,
) -> FederatedData:
    """A federated dataset from a table with a client-id column.

    Args:
        train: A table file, or a folder of them (read in name order, one schema).
        client_column: The column naming each row's client (``writer_id``).
        x_column: The feature column, or several numeric columns.
        y_column: The label column.
        test: A test table with the same columns. When every training client has rows there,
            each client is tested on its own rows; otherwise the test rows form one shared test
            set. Without ``test``, each client's rows are split at random (``test_fraction``,
            :func:`split_rows`).
        test_fraction: The per-client test share when ``test`` is not given.
        seed: Seeds that split.
        num_classes: Label classes (checked), or None for any target.
        shape: Reshape list features per example (e.g. ``(1, 28, 28)``).
        vocab: Characters for text features and labels (index = position).
        name: Dataset name.
        **kw: Passed to FederatedData.

    Raises:
        DataNotFound: ``train`` (or ``test``) does not exist.
        DataFormatError: Unreadable file, missing column, bad rows.
    """
    xs = (x_column,) if isinstance(x_column, str) else tuple(x_column)
    cols = _Columns(client_column, xs, y_column, None if shape is None else tuple(int(d) for d in shape), vocab,
                    num_classes)
    train_path = Path(train).expanduser().resolve()
    if not train_path.exists():
        raise DataNotFound(f"{name}: no table at {train_path}")
    tr = _Part(train_path, cols)
    if len(tr.names) == 0:
        raise DataFormatError(train_path, "no rows")
    sizes = np.diff(tr.bounds)
    client_test = test_part = None
    if test is not None:
        test_path = Path(test).expanduser().resolve()
        if not test_path.exists():
            raise DataNotFound(f"{name}: no test table at {test_path}")
        te = _Part(test_path, cols)
        test_part, client_test = test_parts(tr.names, te.names, te.arrays)

        def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
            return tr.arrays(k)
    else:
        if not 0 < test_fraction < 1:
            raise ValueError(f"{name}: test_fraction must be in (0, 1)")
        splits = [split_rows(int(n), test_fraction, seed, k) for k, n in enumerate(sizes)]
        sizes = np.array([len(a) for a, _ in splits], dtype=np.int64)

        def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
            return tr.arrays(k, tr.rows(k)[splits[k][0]])

        def client_test(k: int) -> tuple[np.ndarray, np.ndarray]:
            rows = tr.rows(k)[splits[k][1]]
            if len(rows) == 0:  # a one-row client: an empty test part of the right shapes
                x, y = tr.arrays(k)
                return x[:0], y[:0]
            return tr.arrays(k, rows)
    return FederatedData(sizes=sizes, client_data=client_data, test=test_part, client_test=client_test,
                         num_classes=num_classes, name=name, client_ids=tuple(str(n) for n in tr.names), **kw)
