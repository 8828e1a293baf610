"""A run folder as bytes, for runs made on another machine (``fedsim compare --executor ray``).

:func:`read_folder` turns a folder into ``{relative/path: bytes}`` (regular files and folders
only), :func:`write_folder` makes a new folder of such files (each with
:class:`fedsim.atomic.AtomicFile`), and :func:`store_folder` puts one at its place in a comparison so
that it appears whole or not at all: written into a sibling staging folder, then renamed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Iterable, Mapping

from ..atomic import AtomicFile
from ..scenario import ScenarioError

__all__ = ["STAGE_TAG", "check_rel", "read_folder", "write_folder", "snapshot", "store_folder", "remove_leftovers"]

#: Tag of the staging and discarded folders beside a run folder (``.seed0.ray-<12 hex>``).
STAGE_TAG = ".ray-"


def check_rel(rel: str) -> str:
    """``rel`` when it is a plain relative path (``a/b.csv``: no ``..``, ``.``, empty part, leading
    ``/``, backslash or NUL), so that joining it to a folder stays inside; else ScenarioError."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise ScenarioError(f"run folder file {rel!r}: not a plain relative path")
    return rel


def read_folder(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` as ``{relative/path: bytes}`` (sorted); ScenarioError for a symbolic
    link or anything but regular files and folders (they cannot travel to another machine)."""
    files: dict[str, bytes] = {}
    folder = Path(folder)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise ScenarioError(f"{folder}: not a folder (a symbolic link or a file); move it away")

    def walk(d: Path, prefix: str) -> None:
        for name in sorted(os.listdir(d)):
            p, rel = d / name, prefix + name
            mode = os.lstat(p).st_mode
            if stat.S_ISDIR(mode):
                walk(p, rel + "/")
            elif stat.S_ISREG(mode):
                files[rel] = p.read_bytes()
            else:
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise ScenarioError(f"{folder}: {rel} is {what}; a run folder sent to or from a Ray worker "
                                    "holds only regular files and folders (move it away)")

    walk(folder, "")
    return files


def write_folder(folder: Path, files: Mapping[str, bytes]) -> None:
    """Create ``folder`` (new) holding ``files`` (``{relative/path: bytes}``), each written with
    :class:`~fedsim.atomic.AtomicFile` (never through a link)."""
    os.mkdir(folder)
    for rel in sorted(files):
        dst = folder / check_rel(rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        with AtomicFile(dst, exclusive=True) as f:
            f.write(files[rel])


def snapshot(folder: Path) -> tuple | None:
    """What ``folder`` holds (relative path, size, mtime) or None when it does not exist."""
    try:
        os.lstat(folder)
    except FileNotFoundError:
        return None
    out = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for n in sorted(names):
            st = os.lstat(os.path.join(root, n))
            out.append((os.path.relpath(os.path.join(root, n), folder), st.st_size, st.st_mtime_ns))
    return tuple(out)


def store_folder(folder: Path, files: Mapping[str, bytes], expected: tuple | None = None) -> None:
    """Put a run folder's ``files`` at ``folder`` so that it appears whole or not at all.

    The files are written into a new sibling ``.<name>.ray-<hex>`` folder, which is then renamed to
    ``folder``; a folder already there (the one whose files went to the worker) is first renamed to
    another such sibling and removed after. ``expected`` is :func:`snapshot` of ``folder`` when its
    files were sent: a folder changed since (another process writing there) is refused, untouched.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    if snapshot(folder) != expected:
        raise ScenarioError(f"{folder}: changed while its run was on a Ray worker (is another process writing "
                            "there?); left as it is")
    stage = folder.with_name(f".{folder.name}{STAGE_TAG}{secrets.token_hex(6)}")
    old = None
    try:
        write_folder(stage, files)
        if expected is not None:
            old = folder.with_name(f".{folder.name}{STAGE_TAG}{secrets.token_hex(6)}")
            os.rename(folder, old)
        os.rename(stage, folder)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if old is not None and not folder.exists():
            os.rename(old, folder)
        raise
    fd = os.open(folder.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def remove_leftovers(folders: Iterable[Path]) -> None:
    """Remove the staging folders a stopped driver left beside ``folders`` (only this module's
    ``.<name>.ray-<12 hex>`` folders, never through a link)."""
    for parent in sorted({Path(f).parent for f in folders}):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            stem, tag, tail = name.rpartition(STAGE_TAG)
            if not (name.startswith(".") and tag and len(tail) == 12 and all(c in "0123456789abcdef" for c in tail)):
                continue
            p = parent / name
            if stat.S_ISDIR(os.lstat(p).st_mode):
                shutil.rmtree(p, ignore_errors=True)
