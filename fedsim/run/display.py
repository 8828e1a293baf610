"""The one-line progress display of ``fedsim run`` on a terminal."""

from __future__ import annotations

import math
import sys
import time
from typing import Callable

from ..records import RoundRecord

__all__ = ["progress_printer"]


def progress_printer(name: str, total: int, stream=sys.stderr) -> Callable[[RoundRecord], None] | None:
    """``progress(record)``: rewrites one status line per round when ``stream`` is a terminal
    (None otherwise)."""
    if not stream.isatty():
        return None
    t0 = time.perf_counter()

    def show(record: RoundRecord) -> None:
        acc = record.test_acc
        acc_s = "" if acc is None or math.isnan(acc) else f" acc {acc:.4f}"
        wall = time.perf_counter() - t0
        stream.write(f"\r{name}: round {record.round + 1}/{total}  t_sim {record.sim_time:.1f}s{acc_s}  wall {wall:.1f}s ")
        if record.round + 1 == total or record.diverged:
            stream.write("\n")
        stream.flush()

    return show
