"""Shared helpers for the speed benchmarks: machine description, timing, result files.

Benchmarks are not tests: they measure, print, and append one row per measurement to
``benchmarks/results/<name>.csv`` and a table to ``benchmarks/results/<name>.md``, each row with
the machine's description, so results from different machines and dates accumulate side by side.
"""

from __future__ import annotations

import csv
import datetime as _dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(threads: int | None = None, device: str = "cpu") -> dict:
    """CPU model, cores, torch version, threads (and GPU name when ``device`` is cuda)."""
    import torch

    d = {
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": threads if threads is not None else torch.get_num_threads(),
        "device": device,
        "load1": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else "",
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        d["device"] = torch.cuda.get_device_name()
    return d


def median(xs) -> float:
    return float(statistics.median(xs))


def timed(fn, *args, **kw) -> float:
    t = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t


def append(name: str, rows: list[dict], title: str) -> None:
    """Append ``rows`` to ``results/<name>.csv`` (header on creation) and ``results/<name>.md``."""
    if not rows:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0])
    path = RESULTS / f"{name}.csv"
    fresh = not path.exists()
    if not fresh:
        with open(path, newline="") as f:
            head = next(csv.reader(f), None)
        if head != cols:  # columns changed: start a new file next to the old one
            path.rename(path.with_suffix(f".{int(time.time())}.csv"))
            fresh = True
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        if fresh:
            w.writeheader()
        w.writerows(rows)
    md = RESULTS / f"{name}.md"
    lines = [] if md.exists() else [f"# {title}\n"]
    lines.append("")
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in rows:
        lines.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    with open(md, "a") as f:
        f.write("\n".join(lines) + "\n")


def run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a benchmark in a fresh interpreter (clean peak RSS, thread settings, imports)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, timeout=timeout, capture_output=True, text=True)
