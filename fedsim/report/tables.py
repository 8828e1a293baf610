"""Run-folder tables: column lists, crash-safe row writers and ``load_run``.

The columns are the fields of :class:`fedsim.records.RoundRecord` (``rounds.csv``; only
quadratic runs have ``dist_to_opt``) and :class:`fedsim.records.ClientRecord` (``clients.csv``).
Rows are formatted with Python's shortest float repr (so equal runs give byte-identical files),
written whole and flushed as each round finishes: a killed run keeps every finished round.
"""

from __future__ import annotations

import math
import operator
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Sequence

if TYPE_CHECKING:
    import pandas as pd


from ..records import ClientRecord, client_columns, columns

__all__ = ["CLIENT_COLUMNS", "TableWriter", "load_run", "Run", "fmt"]

CLIENT_COLUMNS = client_columns()  # without the levers' columns; rounds.csv's: fedsim.runner.folder.table_columns


def fmt(v) -> str:
    """One CSV cell: '' for None/NaN, repr for floats, str otherwise."""
    t = type(v)
    if t is float:  # the common cells first (the same text as below)
        return "" if v != v else repr(v)
    if t is int or t is str:
        return str(v)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return repr(v)
    return str(v)


class TableWriter:
    """Append-only CSV with a fixed header; each ``write`` is whole lines, flushed to the OS.

    A flushed row survives the process being killed (SIGKILL included); ``sync`` (called at
    every checkpoint and on close) also fsyncs, so what a checkpoint refers to survives a power
    loss too. Per-round fsyncs cost ~3% of a small run's wall time and are not needed for that.

    Rows are records (each cell read with ``getattr``: a column the record lacks raises) or, for
    tables without a record type (clock-only runs), mappings (a missing key is an empty cell).
    """

    def __init__(self, path: Path, columns: Sequence[str]):
        self.path = Path(path)
        self.columns = list(columns)
        attrs = operator.attrgetter(*self.columns) if self.columns else (lambda r: ())
        one = len(self.columns) == 1
        self._get = lambda r: ([r.get(c) for c in self.columns] if isinstance(r, Mapping)
                               else (attrs(r),) if one else attrs(r))
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._f = open(self.path, "a", encoding="utf-8", newline="")
        if fresh:
            self._f.write(",".join(columns) + "\n")
            self.sync()

    def write(self, rows: Iterable[Any]) -> None:
        get = self._get
        text = "".join(",".join(map(fmt, get(r))) + "\n" for r in rows)
        if text:
            self._f.write(text)
            self._f.flush()

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self.sync()
            self._f.close()


class _Tables(NamedTuple):
    rounds: pd.DataFrame
    clients: pd.DataFrame


class Run(_Tables):
    """``(rounds, clients)``; ``client_evals``: the run's ``client_evals.csv`` (``eval.per_client``,
    docs/client-accuracy.md) as a DataFrame, or None when it has none."""

    client_evals: "pd.DataFrame | None" = None


def load_run(path: str | Path) -> Run:
    """The run folder's rounds and clients tables as DataFrames: ``rounds.csv`` and
    ``clients.csv``, or the ``--format parquet`` folders (:func:`fedsim.report.parquet.read_table`);
    ``.client_evals``: ``client_evals.csv`` when the run has one."""
    from .parquet import read_table
    from .results import read_client_evals

    run = Run(read_table(path, "rounds"), read_table(path, "clients"))
    run.client_evals = read_client_evals(path)
    return run
