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

Bounds (:mod:`fedsim.limits`): a table file must be a regular file; its row groups or batches
declare at most ``MAX_DATA_ROWS`` rows in all; what one read decodes (a Parquet row group's
columns, read in batches sized so that one batch stays within the bound; a compressed Arrow
batch, from its header) is at most ``MAX_DECODED_BYTES``. Floating features must be finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.arrow_ipc import scan_ipc
from fedsim.data.formats.errors import DataFormatError, check_client, labels_array, short, test_parts, who
from fedsim.data.formats.files import check_regular
from fedsim.data.formats.images import ImageBudget, decode_image, stack_images
from fedsim.limits import MAX_CLIENTS, MAX_DATA_ROWS, MAX_DECODED_BYTES, MAX_INT
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
                if sum(sizes) > MAX_DATA_ROWS:
                    raise DataFormatError(p, f"more than {MAX_DATA_ROWS:,} rows")
        return cls(files, np.array(cf, dtype=np.int64), np.array(cl, dtype=np.int64),
                   np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]), tuple(schema.names), schema, handles)

    @property
    def num_rows(self) -> int:
        return int(self.chunk_start[-1])

    def column(self, name: str) -> Any:
        """A whole column (used for the client ids) as one Arrow array (at most
        ``MAX_DECODED_BYTES`` decoded in all)."""
        import pyarrow as pa

        budget = _Budget(self.files[0] if len(self.files) == 1 else self.files[0].parent)
        parts = [self._read(c, [name], budget).column(0) for c in range(len(self.chunk_file))]
        return pa.chunked_array([a for p in parts for a in p.chunks], type=self.schema.field(name).type)

    def rows(self, rows: np.ndarray, columns: Sequence[str]) -> Any:
        """The given global rows (sorted) of ``columns``, as one Arrow table (at most
        ``MAX_DECODED_BYTES`` decoded in all, the chunks' other rows included)."""
        import pyarrow as pa

        chunks = np.searchsorted(self.chunk_start, rows, side="right") - 1
        parts = []
        budget = _Budget(self.files[int(self.chunk_file[int(chunks[0])])] if len(rows) else self.files[0])
        for c in np.unique(chunks):
            local = rows[chunks == c] - self.chunk_start[c]
            parts.append(self._read(int(c), columns, budget, local))
        return pa.concat_tables(parts)

    def _read(self, c: int, columns: Sequence[str], budget: "_Budget", take: np.ndarray | None = None) -> Any:
        f = int(self.chunk_file[c])
        try:
            return self._handles[f].read(int(self.chunk_local[c]), list(columns), budget, take)
        except DataFormatError:
            raise
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            raise DataFormatError(self.files[f], f"cannot read ({type(err).__name__}: {short(err, 200)})") from None


class _Budget:
    """Decoded bytes of one read, refused past MAX_DECODED_BYTES."""

    def __init__(self, where: Path):
        self.where, self.used = where, 0

    def take(self, nbytes: int) -> None:
        self.used += int(nbytes)
        if self.used > MAX_DECODED_BYTES:
            raise DataFormatError(self.where, f"decodes to more than {MAX_DECODED_BYTES:,} bytes in one read")


def _take(table: Any, take: np.ndarray | None) -> Any:
    import pyarrow as pa

    return table if take is None else table.take(pa.array(take, type=pa.int64()))


class _Parquet:
    """A Parquet file: row groups read in batches of at most MAX_DECODED_BYTES.

    A value is stored somewhere in its column chunk, so none decodes to more than the chunk's
    uncompressed size S; batches of ``MAX_DECODED_BYTES // S`` rows keep each batch within the
    bound however the values repeat (dictionary and run-length encodings expand on reading)."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.path = path
        self.file = pq.ParquetFile(path)
        self.schema = self.file.schema_arrow
        meta = self.file.metadata
        self.chunk_rows = []
        for i in range(self.file.num_row_groups):
            rg = meta.row_group(i)
            if not 0 <= rg.num_rows <= MAX_DATA_ROWS:
                raise DataFormatError(path, f"row group {i} declares {rg.num_rows:,} rows (at most {MAX_DATA_ROWS:,})")
            self.chunk_rows.append(rg.num_rows)

    def _batch_rows(self, i: int, columns: list[str]) -> int:
        rg = self.file.metadata.row_group(i)
        size = 1
        for j in range(rg.num_columns):
            col = rg.column(j)
            if col.path_in_schema.split(".")[0] in columns:
                size += max(int(col.total_uncompressed_size), 0)
                if col.physical_type not in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"):
                    width = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}.get(col.physical_type, 8)
                    if col.num_values * width > MAX_DECODED_BYTES:
                        raise DataFormatError(self.path, f"row group {i}: column {short(col.path_in_schema)!r} declares "
                                                         f"{col.num_values:,} values, more than {MAX_DECODED_BYTES:,} bytes")
        return int(max(1, min(65536, MAX_DECODED_BYTES // size)))

    def read(self, i: int, columns: list[str], budget: _Budget, take: np.ndarray | None = None) -> Any:
        import pyarrow as pa

        rows = self._batch_rows(i, columns)
        parts, start = [], 0
        for batch in self.file.iter_batches(batch_size=rows, row_groups=[i], columns=columns, use_threads=False):
            budget.take(batch.nbytes)
            if take is None:
                parts.append(batch)
            else:
                mine = take[(take >= start) & (take < start + batch.num_rows)] - start
                if len(mine):
                    parts.append(batch.take(pa.array(mine, type=pa.int64())))
            start += batch.num_rows
        schema = self.schema
        fields = [schema.field(c) for c in columns]
        return pa.Table.from_batches(parts, schema=pa.schema(fields)) if parts else pa.Table.from_pylist([], schema=pa.schema(fields))


class _Ipc:
    """An Arrow IPC file or stream through a memory map: uncompressed batches are views of it; a
    compressed batch may decode to at most MAX_DECODED_BYTES (read from its header)."""

    def __init__(self, path: Path):
        import pyarrow as pa

        self.path = path
        source = pa.memory_map(str(path), "r")
        declared = scan_ipc(path, source)
        for k, (rows, decoded) in enumerate(declared):
            if decoded > MAX_DECODED_BYTES:
                raise DataFormatError(path, f"record batch {k} decompresses to {decoded:,} bytes (at most "
                                            f"{MAX_DECODED_BYTES:,})")
            if not 0 <= rows <= MAX_DATA_ROWS:
                raise DataFormatError(path, f"record batch {k} declares {rows:,} rows (at most {MAX_DATA_ROWS:,})")
        self.decoded = [d for _, d in declared]
        source.seek(0)
        try:
            reader = pa.ipc.open_file(source)
            self.schema = reader.schema
            self.chunk_rows = [rows for rows, _ in declared][:reader.num_record_batches]
            self.get = reader.get_batch
        except pa.ArrowInvalid:  # not the file format: an IPC stream (Hugging Face's cache files)
            if sum(self.decoded) > MAX_DECODED_BYTES:
                raise DataFormatError(path, f"an Arrow stream whose compressed batches decompress to more than "
                                            f"{MAX_DECODED_BYTES:,} bytes (read as a whole)") from None
            source.seek(0)
            table = pa.ipc.open_stream(source).read_all()  # zero-copy over the memory map when uncompressed
            batches = table.to_batches()
            self.schema = table.schema
            self.chunk_rows = [b.num_rows for b in batches]
            self.decoded = [0] * len(batches)  # already decoded, counted above
            self.get = batches.__getitem__

    def read(self, i: int, columns: list[str], budget: _Budget, take: np.ndarray | None = None) -> Any:
        import pyarrow as pa

        budget.take(self.decoded[i] if i < len(self.decoded) else 0)
        return _take(pa.Table.from_batches([self.get(i)]).select(columns), take)


def _open_file(path: Path) -> Any:
    check_regular(path, MAX_INT)
    try:
        return _Parquet(path) if path.suffix == ".parquet" else _Ipc(path)
    except DataFormatError:
        raise
    except OSError as err:
        raise DataFormatError(path, f"cannot read ({short(err, 200)})") from None
    except Exception as err:  # noqa: BLE001 - ArrowInvalid and friends: not a table file
        kind = "Parquet" if path.suffix == ".parquet" else "Arrow IPC"
        raise DataFormatError(path, f"not a readable {kind} file ({short(err, 200)})") from None


@dataclass(frozen=True)
class _Columns:
    client: str
    x: tuple[str, ...]
    y: str
    shape: tuple[int, ...] | None
    vocab: str | None
    num_classes: int | None


def pa_is_dictionary(t: Any) -> bool:
    import pyarrow.types as pt

    return pt.is_dictionary(t)


def _features(table: Any, cols: _Columns, where: Path, who: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.types as pt

    if len(cols.x) > 1:
        try:
            with np.errstate(over="ignore"):
                arr = np.stack([table.column(c).to_numpy(zero_copy_only=False) for c in cols.x], axis=1).astype(np.float32)
        except (ValueError, TypeError, pa.ArrowException) as err:
            raise DataFormatError(where, f"{who}: feature columns must be numeric ({short(err)})") from None
        if not np.isfinite(arr).all():
            raise DataFormatError(where, f"{who}: features hold a missing, NaN or infinite value")
        return arr
    col = table.column(cols.x[0])
    if pt.is_dictionary(col.type):
        col = _undictionary(col, where, who)
    t = col.type
    if pt.is_struct(t) and t.get_field_index("bytes") >= 0:
        col, t = pa.chunked_array([c.field("bytes") for c in col.chunks], type=t.field("bytes").type), t.field("bytes").type
    if pt.is_binary(t) or pt.is_large_binary(t):
        budget = ImageBudget(where)

        def decoded(values):
            for v in values:
                if v is None:
                    raise DataFormatError(where, f"{who}: an image is missing")
                yield decode_image(v, where, who, budget=budget)

        return stack_images(decoded(col.to_pylist()), len(col), where, who)
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
            raise DataFormatError(where, f"{who}: lists in {short(cols.x[0])!r} must be present and of one length")
        try:
            with np.errstate(over="ignore"):
                arr = np.asarray(values, dtype=np.float32)
        except (ValueError, TypeError):
            raise DataFormatError(where, f"{who}: lists in {cols.x[0]!r} must hold numbers") from None
    elif pt.is_integer(t) or pt.is_floating(t):
        with np.errstate(over="ignore"):
            arr = col.to_numpy(zero_copy_only=False).astype(np.float32)[:, None]
    else:
        raise DataFormatError(where, f"{who}: cannot use column {short(cols.x[0])!r} of type {short(t)} as features")
    if np.isnan(arr).any():
        raise DataFormatError(where, f"{who}: features hold a missing or NaN value")
    if not np.isfinite(arr).all():
        raise DataFormatError(where, f"{who}: features hold an infinite value (or one beyond float32)")
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
        col = _undictionary(col, where, who)
    return labels_array(col.to_numpy(zero_copy_only=False), where, who, cols.num_classes)


def _undictionary(col: Any, where: Path, who: str) -> Any:
    """A dictionary-encoded column as its values, refused when they would decode to more than
    MAX_DECODED_BYTES (each row repeats its value: the bound is rows x the longest value)."""
    import pyarrow as pa

    longest = 8
    for chunk in col.chunks:
        d = chunk.dictionary
        if len(d) and (pa.types.is_binary(d.type) or pa.types.is_string(d.type)
                       or pa.types.is_large_binary(d.type) or pa.types.is_large_string(d.type)):
            longest = max(longest, max(len(v) for v in d.to_pylist() if v is not None) if d.null_count < len(d) else 0)
    if len(col) * longest > MAX_DECODED_BYTES:
        raise DataFormatError(where, f"{who}: a dictionary column decodes to more than {MAX_DECODED_BYTES:,} bytes")
    return col.cast(col.type.value_type)


class _Part:
    """One table file (or folder) indexed by client id."""

    def __init__(self, path: Path, cols: _Columns):
        self.path = path
        self.source = TableSource.open(path)
        missing = [c for c in (cols.client, *cols.x, cols.y) if c not in self.source.column_names]
        if missing:
            raise DataFormatError(path, f"no column {short(missing[0])!r} (columns: "
                                        f"{short(', '.join(self.source.column_names), 200)})")
        ids = self.source.column(cols.client)
        if ids.null_count:
            raise DataFormatError(path, f"column {short(cols.client)!r} has a missing client id")
        if pa_is_dictionary(ids.type):
            ids = _undictionary(ids, path, f"column {short(cols.client)!r}")
        values = np.asarray(ids.to_numpy(zero_copy_only=False)).astype(str)
        self.names, inverse = np.unique(values, return_inverse=True)
        if len(self.names) > MAX_CLIENTS:
            raise DataFormatError(path, f"more than {MAX_CLIENTS:,} clients")
        self.order = np.argsort(inverse, kind="stable")
        self.bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(self.names)))])
        self.cols = cols

    def rows(self, k: int) -> np.ndarray:
        return self.order[self.bounds[k]:self.bounds[k + 1]]

    def arrays(self, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows = np.sort(self.rows(k) if rows is None else rows)
        name = who("client", self.names[k])
        table = self.source.rows(rows, [*self.cols.x, self.cols.y])
        x, y = _features(table, self.cols, self.path, name), _labels(table, self.cols, self.path, name)
        check_client(x, y, self.path, name)
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
        test_part, client_test = test_parts(tr.names, te.names, te.arrays, test_path)

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
