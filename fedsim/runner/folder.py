"""The run folder (``--out``): checks, lock, preparation, resume, tables and the small files.

Every check here only reads; nothing is written before the run's workload and clock are built
(:mod:`fedsim.runner.build`), so a scenario that fails to build leaves the folder as it was.
Which folders are accepted:

- a new or empty folder (a left-over lock file and fedsim's ``*.tmp`` files count as empty);
- a fedsim run (``scenario.yaml`` and ``rounds.csv`` or ``rounds.parquet/``) only with ``--force``
  (which deletes only fedsim's own files) or ``--resume`` (same scenario, tables at least as long
  as the checkpoint records);
- any other non-empty folder only with ``--force``, which again deletes only fedsim's own files
  and leaves everything else in place.

Every check runs before anything is deleted or written, and a folder where one of fedsim's names
(its files, ``run.lock``, the table folders and the parts in them) is a symbolic link or not the
kind of entry fedsim writes there is refused whatever the flags (:func:`check_entries`): a run
never follows a link out of its folder and never half-deletes before it fails.
"""

from __future__ import annotations

import fcntl
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Collection, Iterator

import torch

from .checkpoint import CHECKPOINT, PARQUET_TABLES, TABLES, check_fingerprint, check_observed, load_checkpoint
from ..records import ClientRecord, RoundRecord, client_columns, columns
from ..limits import MAX_SCENARIO_BYTES
from ..report.parquet import (TMP_NAME, ParquetTableWriter, TableError, check_part_files, cut_parts, open_part,
                              part_columns, part_files, part_rows)
from ..report.tables import TableWriter
from ..scenario import Scenario, dump_scenario
from .evals import check_evals
from .files import FolderError, safe_component, write_atomic

__all__ = [
    "FILES", "TABLE_FOLDERS", "LOCK", "check_entries", "stored_format", "default_out", "variant_folder", "check_folder",
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


def _kind(path: Path, flag: str, out: Path, is_kind, what: str) -> bool:
    """Whether ``path`` exists (not following a link); FolderError when it is a symbolic link or
    not ``what``."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as err:
        raise FolderError(f"{flag} {out}: cannot read {path.name} ({err.strerror})") from None
    if stat.S_ISLNK(mode):
        raise FolderError(f"{flag} {out}: {path.relative_to(out)} is a symbolic link; fedsim never follows a "
                          "link out of its folder (remove it)")
    if not is_kind(mode):
        raise FolderError(f"{flag} {out}: {path.relative_to(out)} is not {what}; fedsim writes {what} there (move it away)")
    return True


def check_entries(out: Path, flag: str = "--out") -> None:
    """Refuse (:class:`FolderError`) a folder where one of fedsim's names is a symbolic link or
    not what fedsim writes there: its files, their ``*.tmp``, ``run.lock`` (regular files), the
    table folders (folders) and the parts and temporary parts in them (regular files, numbered
    without a gap). Reads only; every run, ``--force`` and ``--resume`` included, checks this
    before it deletes or writes anything."""
    if not out.is_dir():
        return
    for name in FILES + tuple(f + ".tmp" for f in FILES) + (LOCK,):
        _kind(out / name, flag, out, stat.S_ISREG, "a regular file")
    for name in TABLE_FOLDERS:
        if _kind(out / name, flag, out, stat.S_ISDIR, "a folder"):
            try:
                check_part_files(out / name, dense=False)  # gaps: --resume names them; --force deletes
            except TableError as err:
                raise FolderError(f"{flag} {out}: {err}") from None
            for e in os.listdir(out / name):
                if TMP_NAME.fullmatch(e):
                    _kind(out / name / e, flag, out, stat.S_ISREG, "a regular file")


def _stored_scenario(out: Path) -> str | None:
    """The text of ``out/scenario.yaml`` (None when it is too large to be fedsim's)."""
    path = out / "scenario.yaml"
    if path.stat().st_size > MAX_SCENARIO_BYTES:
        return None
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def check_folder(sc: Scenario, out: Path, *, force: bool = False, resume: bool = False) -> None:
    """Refuse (:class:`FolderError`) a folder this run may not use; reads only."""
    flag = "--resume" if resume else "--out"
    if out.exists() and not out.is_dir():
        raise FolderError(f"{flag} {out}: exists and is not a folder")
    check_entries(out, flag)
    if resume:
        stored = out / "scenario.yaml"
        if not stored.is_file():
            raise FolderError(f"--resume {out}: no run there (no scenario.yaml)")
        if _stored_scenario(out) != dump_scenario(sc):
            raise FolderError(f"--resume {out}: holds a different scenario's run")
        return
    if not out.exists():
        return
    if force:
        for folder in (out, *(out / n for n in TABLE_FOLDERS if (out / n).is_dir())):
            if not os.access(folder, os.W_OK | os.X_OK):
                raise FolderError(f"--out {folder}: not writable; --force cannot replace the run there")
        return
    if not (out / "scenario.yaml").is_file() or not _has_rounds(out):
        if any(p.name not in _LEFTOVERS for p in out.iterdir()):
            raise FolderError(f"--out {out}: not empty and not a fedsim run folder; use --force to write fedsim's files into it")
        return
    if _stored_scenario(out) != dump_scenario(sc):
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
    if _kind(out / LOCK, "--out", out, stat.S_ISREG, "a regular file"):
        with locked(out):
            pass


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold the folder's lock (creating the folder if needed) for the ``with`` block; a lock file
    that is a symbolic link is refused, never followed (``O_NOFOLLOW``)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        _kind(out / LOCK, "--out", out, stat.S_ISREG, "a regular file")
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
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
    (:func:`fedsim.runner.checkpoint.load_checkpoint`), carries no fingerprint or another scenario's
    (:func:`~fedsim.runner.checkpoint.check_fingerprint`), is past the run's end, holds other parameters
    than ``params`` (the model's names) or observations the tables do not show
    (:func:`~fedsim.runner.checkpoint.check_observed`); an ``evals.csv`` the run would read back that is larger
    than ``MAX_EVAL_BYTES`` or holds a row fedsim does not write (:func:`fedsim.runner.evals.check_evals`).
    """
    check_folder(sc, out, resume=True)
    ck = load_checkpoint(out)
    if ck is not None:
        check_fingerprint(ck, dump_scenario(sc), out)  # a checkpoint of another run (or of an older fedsim)
    if ck is not None and sc.eval.every_seconds is not None and (out / "evals.csv").is_file():
        check_evals(out / "evals.csv", f"--resume {out}: evals.csv")  # its rows are read back after the cut
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
        head = table_columns(quadratic, uses_levers(sc))
        for name, size in sizes.items():
            cols = head[name.replace(".parquet", ".csv")]
            if fmt == "parquet":
                _check_parts(out, name, size, cols, ck["next_round"] if name == "rounds.parquet" else None)
            else:
                _check_table(out, name, size, cols, ck["next_round"] + 1 if name == "rounds.csv" else None)
        if "observed" in ck:  # what a feedback rule replays must be what the tables say it saw
            check_observed(ck, out, fmt, sc.data.num_clients)
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
    if path.is_dir():
        check_part_files(path, dense=False)
        names = [p.name for p in part_files(path)]
        if names[:count] != [f"part-{i:05d}.parquet" for i in range(min(count, len(names)))]:
            raise FolderError(f"--resume {out}: {name} does not match its checkpoint, cannot resume exactly")
        have = [open_part(p).metadata.num_rows for p in part_files(path)[:count]] + [0] * max(0, len(names) - count)
    else:
        have = None
    if have is None or len(have) < count:
        what = "is missing" if have is None else f"has {len(have)} parts"
        raise FolderError(f"--resume {out}: {name} {what}; its checkpoint needs {count}, cannot resume exactly")
    if count and open_part(part_files(path)[0]).schema_arrow.names != cols:
        raise FolderError(f"--resume {out}: {name} has other columns than this fedsim writes, cannot resume exactly")
    names = [p.name for p in part_files(path)][:count]
    if names != [f"part-{i:05d}.parquet" for i in range(count)] or (rows is not None and sum(have[:count]) != rows):
        raise FolderError(f"--resume {out}: {name} does not match its checkpoint, cannot resume exactly")
    if count and not _rounds_in_order(part_files(path)[:count], strict=rows is not None):
        raise FolderError(f"--resume {out}: {name} has parts out of order (their rounds go back), cannot resume exactly")


def _rounds_in_order(parts: list[Path], strict: bool) -> bool:
    """Whether the ``round`` column runs forward through ``parts`` in order (strictly for the rounds
    table, one row a round): parts swapped by hand, even with equal row counts, are caught."""
    import numpy as np
    import pyarrow.parquet as pq

    try:
        col = np.concatenate([pq.read_table(p, columns=["round"]).column("round").to_numpy(zero_copy_only=False)
                              for p in parts])  # fmt: skip
    except Exception:  # noqa: BLE001 - unreadable: the column checks above name it
        return False
    step = np.diff(col)
    return bool((step > 0).all() if strict else (step >= 0).all())


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


def table_columns(quadratic: bool, levers: bool = False) -> dict[str, list[str]]:
    """The columns of ``rounds.csv`` and ``clients.csv``: the record types' fields
    (``dist_to_opt`` only for quadratic runs; ``resumed`` and ``cut`` only with ``levers``:
    :func:`fedsim.records.client_columns`)."""
    omit = () if quadratic else ("dist_to_opt",)
    return {"rounds.csv": columns(RoundRecord, omit=omit), "clients.csv": client_columns(levers)}


def uses_levers(sc: Scenario) -> bool:
    """Whether a run's clients.csv has the levers' columns (``resumed``, ``cut``)."""
    return sc.system.on_outage == "resume" or sc.round.on_deadline == "partial"


class Tables:
    """``rounds.csv`` and ``clients.csv`` of an open run folder (:func:`table_columns`),
    appended to by :meth:`write`; with ``table_format="parquet"`` the folders
    ``rounds.parquet/`` and ``clients.parquet/`` (:class:`fedsim.report.parquet.ParquetTableWriter`)."""

    def __init__(self, out: Path, *, quadratic: bool, table_format: str = "csv", levers: bool = False):
        self.out = Path(out)
        self.parquet = table_format == "parquet"
        cols = table_columns(quadratic, levers)
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
    """``info.yaml``: what actually ran (dataset, e.g. ``cifar10-standin``; model size; the loss's
    name, ``from_python`` when given to ``fedsim.run``; device; evaluation sample; ``step_flops``,
    ``model_bytes``, ``upload_bytes`` when there is a model)."""
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
        **({"loss": sc.loss.name} if work.module is not None else {}),  # a name, or from_python
        "parameters": int(sum(v.numel() for v in work.init_params.values())),
        "clients": work.num_clients,
        "test_samples": 0 if work.x_test is None else int(work.x_test.shape[0]),
        "device": str(work.x_train.device),
        "dtype": str(work.x_train.dtype).replace("torch.", ""),
        "clients_per_batch": engine.chunk,
        **eval_info(work),
        **(cost_info(cost) if cost is not None else {}),
        **({"data_notes": list(work.data_notes)} if getattr(work, "data_notes", ()) else {}),  # issue 27 (data)
        "threads": threads_info(),
        "fedsim": __version__,
        "torch": str(torch.__version__),
    }
    return yaml.safe_dump(info, sort_keys=False)
