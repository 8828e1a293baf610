"""Run tables as Parquet (``--format parquet``): a folder of part files per table.

Layout: ``rounds.parquet/`` and ``clients.parquet/`` folders in the run folder, each holding
``part-00000.parquet``, ``part-00001.parquet``, ... The table is its parts read in name order.
Rows are buffered in memory and written as one new part at every ``sync`` (the runner syncs at
each checkpoint and at the end) and whenever ``rows_per_part`` rows are waiting. A part is
written to a temporary file, fsynced and renamed, so a part is on disk whole or not at all.

Durability and resume: a killed run keeps every part written before it died (at least everything
up to its last checkpoint; rows still buffered are lost, where a CSV table keeps every flushed
round). The checkpoint records each table's part count (:meth:`ParquetTableWriter.parts`);
resuming deletes the parts past that count (:func:`cut_parts`) and the rerun rounds write the
same rows again, so a resumed run reads back equal to an uninterrupted one.

Rows are records (each cell read with ``getattr``, as the CSV writer does) or mappings (a missing
key is an empty cell); :meth:`ParquetTableWriter.write_columns` takes whole numpy columns (the
clock-only run's fast path). Column types: the known columns of fedsim's tables have fixed types
(:data:`COLUMN_TYPES`); another column takes the type of its first non-empty value (int, float or
string), float when it has none. Empty cells are nulls; read back, an integer column with nulls
becomes float with NaN, as ``pandas.read_csv`` reads the CSV table.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..atomic import AtomicFile
from ..errors import ScenarioError
from ..limits import MAX_PART_ROWS

if TYPE_CHECKING:
    import pandas as pd


__all__ = [
    "ParquetTableWriter", "read_table", "has_table", "cut_parts", "table_path", "part_columns", "part_rows",
    "COLUMN_TYPES", "PART_NAME", "TMP_NAME", "TableError", "part_files", "check_part_files", "open_part",
]

#: The name of a part file: ``part-`` and its number (at least five digits), ``.parquet``.
#: Only entries with such a name are parts; anything else in a table folder is left alone.
PART_NAME = re.compile(r"part-([0-9]{5,9})\.parquet")
#: fedsim's temporary part files (a part being written; deleted by :func:`cut_parts`).
TMP_NAME = re.compile(r"\.part-[A-Za-z0-9_]+\.tmp")


class TableError(ScenarioError):
    """A table folder or part that fedsim cannot read as its own (exit 2, one line naming it)."""

#: pyarrow type names of the known columns of rounds and clients tables.
COLUMN_TYPES = {
    **dict.fromkeys(["round", "participants", "tau_min", "tau_max", "diverged", "client", "steps", "version",
                     "staleness", "available"], "int64"),  # fmt: skip
    **dict.fromkeys(["sim_time", "tau_mean", "train_loss", "test_loss", "test_acc", "lr", "dist_to_opt", "a_norm",
                     "start", "end", "weight", "download", "upload"], "float64"),  # fmt: skip
    "status": "string",
}


def table_path(folder: str | Path, name: str) -> Path:
    """The folder of the Parquet table ``name`` (``rounds`` or ``clients``) in a run folder."""
    return Path(folder) / f"{name}.parquet"


def has_table(folder: str | Path, name: str) -> bool:
    """Whether a run folder holds table ``name``, as ``name.parquet/`` or ``name.csv``."""
    return table_path(folder, name).is_dir() or (Path(folder) / f"{name}.csv").is_file()


def part_files(path: str | Path) -> list[Path]:
    """The entries of a table folder named like parts (:data:`PART_NAME`), in part-number order
    (whatever they are: :func:`check_part_files` checks them)."""
    path = Path(path)
    found = [(int(m.group(1)), path / e) for e in os.listdir(path) if (m := PART_NAME.fullmatch(e))]
    return [p for _, p in sorted(found)]


_part_files = part_files


def check_part_files(path: str | Path, dense: bool = True) -> list[Path]:
    """The parts of a table folder, each checked to be a regular file (not a symbolic link, not a
    folder) and, with ``dense``, numbered 0, 1, 2, ... without a gap; else :class:`TableError`
    naming the entry."""
    parts = part_files(path)
    for i, p in enumerate(parts):
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise TableError(f"{p}: is {what}; a table part must be a file fedsim wrote")
        if dense and int(PART_NAME.fullmatch(p.name).group(1)) != i:
            raise TableError(f"{p}: parts must be numbered part-00000.parquet, part-00001.parquet, ... "
                             f"without a gap (expected part {i:05d} here); it is not fedsim's")
    return parts


def open_part(p: Path):
    """The ``pyarrow.parquet.ParquetFile`` of part ``p``, its footer checked (readable, at most
    :data:`MAX_PART_ROWS` rows); else :class:`TableError` naming the part."""
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(p)
        rows = f.metadata.num_rows
    except Exception as err:  # noqa: BLE001 - arrow's many errors for a damaged file: one line
        raise TableError(f"{p}: not a readable Parquet part ({type(err).__name__})") from None
    if not 0 <= rows <= MAX_PART_ROWS:
        raise TableError(f"{p}: declares {rows} rows, more than a part holds ({MAX_PART_ROWS:,})")
    return f


def part_columns(path: str | Path) -> list[str] | None:
    """The column names of a table folder (its first part's schema; None when it has no part)."""
    parts = check_part_files(path)
    return open_part(parts[0]).schema_arrow.names if parts else None


def part_rows(path: str | Path) -> list[int]:
    """The row count of each part of a table folder, in order (from the parts' footers)."""
    return [open_part(p).metadata.num_rows for p in check_part_files(path)]


def _array(values: Any, type_):
    import pyarrow as pa

    return values.cast(type_) if isinstance(values, pa.Array) else pa.array(values, type=type_)


def _cell(row: Any, col: str) -> Any:
    return row.get(col) if isinstance(row, Mapping) else getattr(row, col)


def _type_of(column: str, rows: list[dict]):
    import pyarrow as pa

    name = COLUMN_TYPES.get(column)
    if name is None:
        first = next((r[column] for r in rows if r.get(column) is not None), None)
        name = "string" if isinstance(first, str) else "int64" if isinstance(first, int) else "float64"
    return pa.type_for_alias(name)


class ParquetTableWriter:
    """The Parquet counterpart of :class:`fedsim.report.tables.TableWriter`: ``write(rows)``,
    ``sync()``, ``close()`` over a folder of parts (see the module docstring).

    Args:
        path: The table's folder (``table_path(run, "rounds")``); created if missing. Existing
            parts are kept (a resumed run appends after them) and fix the schema.
        columns: Column names, in order.
        rows_per_part: Write a part when this many rows are waiting, without waiting for ``sync``.
    """

    def __init__(self, path: Path, columns: list[str], rows_per_part: int = 1 << 17):
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.columns = list(columns)
        self.rows_per_part = int(rows_per_part)
        self.path.mkdir(parents=True, exist_ok=True)
        existing = _part_files(self.path)
        self._count = len(existing)
        self._schema = pq.read_schema(existing[0]) if existing else None
        self._rows: list[dict] = []
        self._batches: list = []  # pyarrow tables waiting, in order (rows are turned into one first)
        self._waiting = 0
        self._closed = False

    def parts(self) -> int:
        """Parts on disk (after a ``sync``: everything written so far); what a checkpoint records."""
        return self._count

    def write(self, rows: Iterable[Any]) -> None:
        """Append rows: records (cells by ``getattr``) or mappings (a missing key is empty)."""
        self._rows.extend({c: _cell(r, c) for c in self.columns} for r in rows)
        if len(self._rows) + self._waiting >= self.rows_per_part:
            self._write_part()

    def write_columns(self, cols: Mapping[str, Any], n: int) -> None:
        """Append ``n`` rows given as columns (numpy arrays, lists or pyarrow arrays of length
        ``n``; a column not in ``cols`` is empty). Needs the schema, so every column must be in
        :data:`COLUMN_TYPES` unless parts already fix it."""
        import pyarrow as pa

        if n == 0:
            return
        self._batch_rows()
        schema = self._known_schema()
        arrays = [_array(cols[c], f.type) if c in cols else pa.nulls(n, type=f.type)
                  for c, f in zip(self.columns, schema)]  # fmt: skip
        self._batches.append(pa.Table.from_arrays(arrays, schema=schema))
        self._waiting += n
        if self._waiting >= self.rows_per_part:
            self._write_part()

    def sync(self) -> None:
        """Write the waiting rows as one part (nothing when none wait)."""
        self._write_part()

    def close(self) -> None:
        if not self._closed:
            self.sync()
            self._closed = True

    def _known_schema(self):
        import pyarrow as pa

        if self._schema is None:
            self._schema = pa.schema([(c, _type_of(c, self._rows)) for c in self.columns])
        return self._schema

    def _batch_rows(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._batches.append(pa.Table.from_pylist(self._rows, schema=self._known_schema()))
            self._waiting += len(self._rows)
            self._rows = []

    def _write_part(self) -> None:
        self._batch_rows()
        if not self._batches:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables(self._batches)
        final = self.path / f"part-{self._count:05d}.parquet"
        # a new hidden .part-*.tmp (TMP_NAME), mode 0o600 as tempfile.mkstemp made them
        with AtomicFile(final, self.path / f".part-{secrets.token_hex(4)}.tmp", exclusive=True, perm=0o600) as f:
            pq.write_table(table, f)
        self._count += 1
        self._batches, self._waiting = [], 0


def _read_part(p: Path):
    f = open_part(p)
    try:
        table = f.read()
    except Exception as err:  # noqa: BLE001
        raise TableError(f"{p}: not a readable Parquet part ({type(err).__name__})") from None
    if table.num_rows != f.metadata.num_rows:
        raise TableError(f"{p}: holds {table.num_rows} rows where its footer says {f.metadata.num_rows}")
    return table


def cut_parts(path: str | Path, count: int) -> None:
    """Delete the parts of a table folder past the first ``count`` (and stray temporary files)."""
    path = Path(path)
    if not path.is_dir():
        return
    for p in _part_files(path)[count:]:
        p.unlink()
    for e in os.listdir(path):
        if TMP_NAME.fullmatch(e):
            (path / e).unlink()


def read_table(folder: str | Path, name: str) -> pd.DataFrame:
    """Table ``name`` (``rounds`` or ``clients``) of a run folder: ``name.parquet/`` when it is
    there and holds parts or there is no ``name.csv``, else ``name.csv`` (a part folder that
    ``--force`` left because it held other files is not a table)."""
    import pandas as pd

    path = table_path(folder, name)
    files = _part_files(path) if path.is_dir() else []
    if path.is_dir() and (files or not (Path(folder) / f"{name}.csv").is_file()):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not files:
            return pd.DataFrame()
        return pa.concat_tables([_read_part(p) for p in check_part_files(path)]).to_pandas()
    return pd.read_csv(Path(folder) / f"{name}.csv")
