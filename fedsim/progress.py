"""Progress bars for ``fedsim run`` (over rounds) and ``fedsim compare`` (over runs), with rate and ETA.

A bar is drawn with tqdm on a terminal only: off a terminal (a file, a pipe, a test's captured
stream) :func:`progress_bar` returns None and nothing at all is written. A bar never changes what
a run computes or writes to its folder.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import IO, Any

from tqdm import tqdm

__all__ = ["Progress", "progress_bar"]


def _field(row: Any, name: str) -> Any:
    """``row[name]`` of a dict row or ``row.name`` of a record; None when absent."""
    if isinstance(row, Mapping):
        return row.get(name)
    return getattr(row, name, None)


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, str):
        return None
    v = float(v)
    return None if math.isnan(v) else v


class Progress:
    """One bar; call it once per finished round (with the round's row) or per finished run (no row).

    A round row (a dict or a record with ``round``, ``sim_time``, optional ``test_acc`` and
    ``diverged``) sets the count to ``round + 1`` and the postfix to the simulated time and the
    last evaluated accuracy; the bar closes itself after the final round or a divergence.
    """

    def __init__(self, bar: tqdm):
        self._bar = bar
        self._acc: float | None = None
        self._postfix: dict = {}
        self._note: str | None = None

    def __call__(self, row: Any = None) -> None:
        if self._bar.disable:  # closed
            return
        done = _field(row, "round") if row is not None else None
        if done is None:
            self._bar.update(1)
        else:
            t_sim, acc = _number(_field(row, "sim_time")), _number(_field(row, "test_acc"))
            self._acc = acc if acc is not None else self._acc
            postfix = {} if t_sim is None else {"t_sim": f"{t_sim:.1f}s"}
            if self._acc is not None:
                postfix["acc"] = f"{self._acc:.4f}"
            self._postfix = postfix
            self._bar.set_postfix(self._shown(), refresh=False)
            self._bar.update(int(done) + 1 - self._bar.n)
            if int(done) + 1 >= self._bar.total or _number(_field(row, "diverged")):
                self.close()

    def note(self, text: str | None) -> None:
        """Show ``text`` after the postfix now (None: remove it): what the run is waiting for
        (:func:`fedsim.engine.threads.hold_cores`: other runs holding the cores)."""
        if self._bar.disable:
            return
        self._note = text
        self._bar.set_postfix(self._shown(), refresh=True)

    def _shown(self) -> dict:
        return {**self._postfix, "note": self._note} if self._note else self._postfix

    def hidden(self) -> AbstractContextManager:
        """A context in which other lines can be written to the bar's stream (the bar is redrawn after)."""
        return tqdm.external_write_mode(file=self._bar.fp)

    def close(self) -> None:
        """Draw the bar a last time and end its line (idempotent)."""
        self._bar.close()


def progress_bar(name: str, total: int, *, unit: str = "round", initial: int = 0,
                 stream: IO[str] | None = None) -> Progress | None:
    """A bar named ``name`` over ``total`` units (``initial`` already done, e.g. a resumed run).

    Written to ``stream`` (default: standard error at call time) only when it is a terminal;
    otherwise None, so callers write ``bar = progress_bar(...)`` and ``if bar: bar(row)``.
    """
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return None
    return Progress(tqdm(total=total, initial=initial, desc=name, unit=unit, file=stream,
                         dynamic_ncols=True, leave=True))
