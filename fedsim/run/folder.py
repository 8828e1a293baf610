"""The run folder (``--out``): checks, lock, preparation, resume, tables and the small files.

Every check here only reads; nothing is written before the run's workload and clock are built
(:mod:`fedsim.run.build`), so a scenario that fails to build leaves the folder as it was.
Which folders are accepted:

- a new or empty folder (a left-over lock file and fedsim's ``*.tmp`` files count as empty);
- a fedsim run (``scenario.yaml`` and ``rounds.csv`` or ``rounds.parquet/``) only with ``--force``
  (which deletes only fedsim's own files) or ``--resume`` (same scenario, tables at least as long
  as the checkpoint records);
- any other non-empty folder only with ``--force``, which again deletes only fedsim's own files
  and leaves everything else in place.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Collection, Iterator

import torch

from ..checkpoint import CHECKPOINT, PARQUET_TABLES, TABLES, load_checkpoint
from ..records import ClientRecord, RoundRecord, columns
from ..report.parquet import ParquetTableWriter, cut_parts, part_columns, part_rows
from ..report.tables import TableWriter
from ..scenario import Scenario, dump_scenario
from .files import FolderError, safe_component, write_atomic

__all__ = [
    "FILES", "TABLE_FOLDERS", "LOCK", "stored_format", "default_out", "variant_folder", "check_folder",
    "check_unlocked", "locked", "prepare_folder", "open_for_resume", "table_columns", "Tables", "write_partition", "save_model", "info_text",
]

#: Every file fedsim writes into a run folder (``--force`` deletes these and nothing else).
FILES = ("scenario.yaml", "rounds.csv", "clients.csv", "model.pt", "partition.csv", "info.yaml", CHECKPOINT,
         "evals.csv")
#: The table folders of a ``--format parquet`` run (``--force`` deletes their part files, then the
#: folders when nothing else is left in them).
TABLE_FOLDERS = PARQUET_TABLES
#: The lock file held (``flock``) while a run uses the folder; the kernel releases it when the
#: process ends, however it ends, so a killed run leaves no stale lock.
LOCK = "run.lock"
#: What a folder may hold and still count as empty: leftovers of a run killed before it wrote
#: its scenario (the lock file, half-written ``*.tmp`` files).
_LEFTOVERS = frozenset((LOCK,) + tuple(f + ".tmp" for f in FILES))


def default_out(sc: Scenario) -> Path:
    """``runs/<name>``."""
    return Path("runs") / safe_component(sc.name, "name")


def variant_folder(base: Path, variant: str) -> Path:
    """The folder of variant ``variant`` directly inside ``base``."""
    return Path(base) / safe_component(variant, f"variants.{variant}")


def check_folder(sc: Scenario, out: Path, *, force: bool = False, resume: bool = False) -> None:
    """Refuse (:class:`FolderError`) a folder this run may not use; reads only."""
    flag = "--resume" if resume else "--out"
    if out.exists() and not out.is_dir():
        raise FolderError(f"{flag} {out}: exists and is not a folder")
    if resume:
        stored = out / "scenario.yaml"
        if not stored.is_file():
            raise FolderError(f"--resume {out}: no run there (no scenario.yaml)")
        if stored.read_text() != dump_scenario(sc):
            raise FolderError(f"--resume {out}: holds a different scenario's run")
        return
    if force or not out.exists():
        return
    if not (out / "scenario.yaml").is_file() or not _has_rounds(out):
        if any(p.name not in _LEFTOVERS for p in out.iterdir()):
            raise FolderError(f"--out {out}: not empty and not a fedsim run folder; use --force to write fedsim's files into it")
        return
    if (out / "scenario.yaml").read_text() != dump_scenario(sc):
        raise FolderError(f"--out {out}: holds a different scenario's run; use --force to replace it")
    raise FolderError(f"--out {out}: already holds this scenario's run; use --resume to continue or --force")


def _has_rounds(out: Path) -> bool:
    return (out / "rounds.csv").is_file() or (out / "rounds.parquet").is_dir()


def stored_format(out: Path, ck: dict | None) -> str | None:
    """The table format of the run in ``out``: its checkpoint's (the tables it records), else
    ``csv`` when ``rounds.csv`` is there, ``parquet`` when ``rounds.parquet/`` is, else None."""
    if ck is not None:
        return "parquet" if set(ck["table_sizes"]) == set(PARQUET_TABLES) else "csv"
    if (out / "rounds.csv").is_file():
        return "csv"
    return "parquet" if (out / "rounds.parquet").is_dir() else None


def check_unlocked(out: Path) -> None:
    """Refuse a folder another process holds the lock of (a left-over lock file is fine)."""
    if (out / LOCK).is_file():
        with locked(out):
            pass


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold the folder's lock (creating the folder if needed) for the ``with`` block."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise FolderError(f"--out {out}: cannot use this folder ({err.strerror or type(err).__name__})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderError(f"--out {out}: another fedsim run is using this folder") from None
        yield
    finally:
        os.close(fd)


def prepare_folder(sc: Scenario, out: Path, *, force: bool) -> None:
    """Check ``out``, delete fedsim's files (and their ``*.tmp``) from an earlier run and write
    ``scenario.yaml``."""
    out = Path(out)
    check_folder(sc, out, force=force)
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES + tuple(f + ".tmp" for f in FILES):
        (out / name).unlink(missing_ok=True)
    for name in TABLE_FOLDERS:
        if (out / name).is_dir():
            cut_parts(out / name, 0)
            try:
                (out / name).rmdir()
            except OSError:  # something not fedsim's is in it: leave it
                pass
    write_atomic(out / "scenario.yaml", dump_scenario(sc).encode())


def open_for_resume(
    sc: Scenario, out: Path, params: Collection[str], *, quadratic: bool, table_format: str | None = None
) -> tuple[dict | None, str]:
    """Check ``out`` for ``--resume`` and cut its tables back to its checkpoint; the checkpoint
    (None: none, the run restarts from round 0) and the run's table format (:func:`stored_format`;
    ``table_format`` or ``csv`` when the folder holds no table yet).

    Refused, before anything is cut: a ``table_format`` other than the run's; a table shorter
    than the checkpoint records, missing, not ending in a whole line there, or with other columns
    than this version writes; a ``rounds.csv`` whose row count there is not the checkpoint's
    round (Parquet: fewer parts than recorded, a gap in their numbers, other columns, or another
    row count of rounds in those parts); a checkpoint that is not a fedsim checkpoint
    (:func:`fedsim.checkpoint.load_checkpoint`), is past the run's end or holds other parameters
    than ``params`` (the model's names).
    """
    check_folder(sc, out, resume=True)
    ck = load_checkpoint(out)
    fmt = stored_format(out, ck) or table_format or "csv"
    if table_format is not None and table_format != fmt:
        raise FolderError(f"--resume {out}: holds a run with {fmt} tables; --format {table_format} does not match")
    names = PARQUET_TABLES if fmt == "parquet" else TABLES
    sizes = ck["table_sizes"] if ck else dict.fromkeys(names, 0)
    if ck is not None:
        if set(ck["sim"]["params"]) != set(params):
            raise FolderError(f"--resume {out}: {CHECKPOINT} holds another model's parameters")
        if ck["next_round"] >= sc.rounds:
            raise FolderError(f"--resume {out}: {CHECKPOINT} is for round {ck['next_round']} of a {sc.rounds}-round run")
        head = table_columns(quadratic)
        for name, size in sizes.items():
            cols = head[name.replace(".parquet", ".csv")]
            if fmt == "parquet":
                _check_parts(out, name, size, cols, ck["next_round"] if name == "rounds.parquet" else None)
            else:
                _check_table(out, name, size, cols, ck["next_round"] + 1 if name == "rounds.csv" else None)
    for name, size in sizes.items():
        if fmt == "parquet":
            cut_parts(out / name, size)
        elif (out / name).exists():
            with open(out / name, "r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
    return ck, fmt


def _check_parts(out: Path, name: str, count: int, cols: list[str], rows: int | None) -> None:
    path = out / name
    have = part_rows(path) if path.is_dir() else None
    if have is None or len(have) < count:
        what = "is missing" if have is None else f"has {len(have)} parts"
        raise FolderError(f"--resume {out}: {name} {what}; its checkpoint needs {count}, cannot resume exactly")
    if count and part_columns(path) != cols:
        raise FolderError(f"--resume {out}: {name} has other columns than this fedsim writes, cannot resume exactly")
    names = sorted(p.name for p in path.glob("part-*.parquet"))[:count]
    if names != [f"part-{i:05d}.parquet" for i in range(count)] or (rows is not None and sum(have[:count]) != rows):
        raise FolderError(f"--resume {out}: {name} does not match its checkpoint, cannot resume exactly")


def _check_table(out: Path, name: str, size: int, cols: list[str], lines: int | None) -> None:
    path = out / name
    have = path.stat().st_size if path.is_file() else None
    if have is None or have < size:
        what = "is missing" if have is None else f"has {have} bytes"
        raise FolderError(f"--resume {out}: {name} {what}; its checkpoint needs {size}, cannot resume exactly")
    with open(path, "rb") as f:
        if f.readline() != (",".join(cols) + "\n").encode():
            raise FolderError(f"--resume {out}: {name} has other columns than this fedsim writes, cannot resume exactly")
        f.seek(0)
        if lines is None:
            f.seek(size - 1)
            whole = f.read(1) == b"\n"
        else:
            head = f.read(size)
            whole = head.endswith(b"\n") and head.count(b"\n") == lines
    if not whole:
        raise FolderError(f"--resume {out}: {name} does not match its checkpoint, cannot resume exactly")


def table_columns(quadratic: bool) -> dict[str, list[str]]:
    """The columns of ``rounds.csv`` and ``clients.csv``: the record types' fields
    (``dist_to_opt`` only for quadratic runs)."""
    omit = () if quadratic else ("dist_to_opt",)
    return {"rounds.csv": columns(RoundRecord, omit=omit), "clients.csv": columns(ClientRecord)}


class Tables:
    """``rounds.csv`` and ``clients.csv`` of an open run folder (:func:`table_columns`),
    appended to by :meth:`write`; with ``table_format="parquet"`` the folders
    ``rounds.parquet/`` and ``clients.parquet/`` (:class:`fedsim.report.parquet.ParquetTableWriter`)."""

    def __init__(self, out: Path, *, quadratic: bool, table_format: str = "csv"):
        self.out = Path(out)
        self.parquet = table_format == "parquet"
        cols = table_columns(quadratic)
        if self.parquet:
            self.rounds = ParquetTableWriter(self.out / "rounds.parquet", cols["rounds.csv"])
            self.clients = ParquetTableWriter(self.out / "clients.parquet", cols["clients.csv"])
        else:
            self.rounds = TableWriter(self.out / "rounds.csv", cols["rounds.csv"])
            self.clients = TableWriter(self.out / "clients.csv", cols["clients.csv"])

    def write(self, record: RoundRecord, clients: list[ClientRecord]) -> None:
        """One round's rows (client rows first, as before)."""
        self.clients.write(clients)
        self.rounds.write([record])

    def synced_sizes(self) -> dict[str, int]:
        """Byte lengths of the tables (Parquet: part counts) once everything written is on disk
        (for a checkpoint)."""
        self.rounds.sync()
        self.clients.sync()
        if self.parquet:
            return dict(zip(PARQUET_TABLES, (self.rounds.parts(), self.clients.parts())))
        return {n: (self.out / n).stat().st_size for n in TABLES}

    def close(self) -> None:
        self.rounds.close()
        self.clients.close()


def write_partition(path: Path, counts) -> None:
    """``partition.csv``: ``client,class,count`` for every nonzero count."""
    rows = ["client,class,count\n"]
    for i, row in enumerate(counts):
        rows.extend(f"{i},{c},{int(n)}\n" for c, n in enumerate(row) if n)
    write_atomic(path, "".join(rows).encode())


def save_model(path: Path, params: dict, quadratic: bool) -> None:
    """``model.pt``: the state_dict (quadratic: the point x as one tensor), written atomically."""
    import io

    buf = io.BytesIO()
    obj = params["x"].detach().cpu().clone() if quadratic else {k: v.detach().cpu().clone() for k, v in params.items()}
    torch.save(obj, buf)
    write_atomic(path, buf.getvalue())


def info_text(sc: Scenario, engine, cost=None) -> str:
    """``info.yaml``: what actually ran (dataset, e.g. ``cifar10-standin``; model size; device;
    evaluation sample; ``step_flops``, ``model_bytes``, ``upload_bytes`` when there is a model)."""
    import yaml

    from ..devices.cost import cost_info
    from ..engine.threads import threads_info
    from ..engine.workload import eval_info

    from .. import __version__

    work = engine.work
    info = {
        "data": work.name,
        "standin": work.name.endswith("-standin"),
        "model": sc.model_name,
        "parameters": int(sum(v.numel() for v in work.init_params.values())),
        "clients": work.num_clients,
        "test_samples": 0 if work.x_test is None else int(work.x_test.shape[0]),
        "device": str(work.x_train.device),
        "dtype": str(work.x_train.dtype).replace("torch.", ""),
        "clients_per_batch": engine.chunk,
        **eval_info(work),
        **(cost_info(cost) if cost is not None else {}),
        "threads": threads_info(),
        "fedsim": __version__,
        "torch": str(torch.__version__),
    }
    return yaml.safe_dump(info, sort_keys=False)
