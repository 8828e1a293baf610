"""A comparison folder as bytes, for byte-identity tests (stacked vs alone, Ray vs local)."""

from __future__ import annotations

from pathlib import Path

#: ``info.yaml`` lines that record the process, not the result: ``waited_for_cores_s`` (seconds
#: the run waited for cores other runs held, a measurement of the machine's load) and
#: ``held_rounds`` (rounds the process computed: fewer for a run continued from a checkpoint).
PROCESS_LINES = ("  waited_for_cores_s:", "  held_rounds:")


def tree(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under ``folder`` but those named in ``skip`` (relative path -> bytes);
    ``info.yaml`` without :data:`PROCESS_LINES`. The rest of its ``threads`` block (threads, rule,
    budget, cores) is kept: the plan fixes it (issue 35 item 7)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name in skip:
            continue
        data = p.read_bytes()
        if p.name == "info.yaml":
            lines = data.decode().splitlines(keepends=True)
            data = "".join(ln for ln in lines if not ln.startswith(PROCESS_LINES)).encode()
        out[p.relative_to(folder).as_posix()] = data
    return out
