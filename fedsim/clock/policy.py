"""Round policies: the server's rule for when a round opens and closes and whom it waits for.

Each policy is a frozen value that answers the clock's questions about itself (when a round opens
and closes, when the server gives up on a job, how many clients it asks for, its fast path), so
the clock's paths never test which policy they run: :class:`Window` | :class:`Wait` |
:class:`Deadline` | :class:`Overcommit` | :class:`Async`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .general import general_tables
from .overcommit import fedscale_overcommit_size
from .heap import async_tables
from .vectorised import window_tables
from .vectorised_wait import prescribed_tables

__all__ = ["Policy", "Window", "Wait", "Deadline", "Overcommit", "Async", "overcommit_size"]

INF = math.inf


class Policy:
    """Base of the round policies: each answers the clock's questions about itself, so the clock's
    paths never test which policy they run.

    Class attributes:
        is_async: one server update per ``buffer`` arrivals with jobs always in flight
            (:class:`Async`) rather than synchronous rounds.
        keeps_first: the round closes at the K-th upload (:class:`Overcommit`).
        waits_for_online: a round that found nobody online closes when the first client comes
            online (else at its fixed close).
    """

    is_async: ClassVar[bool] = False
    keeps_first: ClassVar[bool] = False

    def open_at(self, r: int, last_close: float) -> float:
        """When round ``r`` opens, the previous one having closed at ``last_close``."""
        return last_close

    def fixed_close(self, r: int) -> float | None:
        """Round ``r``'s close when it is fixed in advance (a window), else None."""
        return None

    def give_up(self, t_open: float, fixed_close: float | None) -> float:
        """When the server stops waiting for round jobs opened at ``t_open``."""
        return INF

    def request_size(self, k: int | None) -> int | None:
        """How many clients the server asks for when it wants ``k`` updates."""
        return k

    def span(self) -> tuple[float, str] | None:
        """(seconds, scenario key) of a round's fixed length or deadline; None without one."""
        return None

    def tables(self, clock, selector):
        """The fast path's iterator of :class:`~fedsim.clock.plan.RoundTable` for ``clock``,
        picking through ``selector`` (:class:`fedsim.clock.feedback.Selector`)."""
        return general_tables(clock, selector) if clock.general else prescribed_tables(clock, selector)


@dataclass(frozen=True)
class Window(Policy):
    """Rounds of fixed length ``window`` seconds: round r spans [r W, (r + 1) W]."""

    window: float

    def open_at(self, r: int, last_close: float) -> float:
        return r * self.window

    def fixed_close(self, r: int) -> float:
        return (r + 1) * self.window

    def give_up(self, t_open: float, fixed_close: float | None) -> float:
        return fixed_close

    def span(self) -> tuple[float, str]:
        return float(self.window), "round.window"

    def tables(self, clock, selector):
        return general_tables(clock, selector) if clock.general else window_tables(clock, selector)


@dataclass(frozen=True)
class Wait(Policy):
    """Prescribed work; the round ends when the last surviving client has uploaded."""


@dataclass(frozen=True)
class Deadline(Policy):
    """Prescribed work; jobs not done ``deadline`` seconds after the open are dropped."""

    deadline: float

    def give_up(self, t_open: float, fixed_close: float | None) -> float:
        return t_open + self.deadline

    def span(self) -> tuple[float, str]:
        return float(self.deadline), "round.deadline"


@dataclass(frozen=True)
class Overcommit(Policy):
    """FedScale's over-commitment: prescribed work; select ``overcommit_size(factor, K)`` clients,
    aggregate the first K uploads (K = ``RoundRule.clients_per_round``), drop the rest; the round
    ends at the K-th upload (with fewer than K uploads, as :class:`Wait`)."""

    factor: float
    #: FedScale's rounding (``trace_semantics: fedscale``): int(K F), not ceil
    fedscale: bool = False
    keeps_first: ClassVar[bool] = True

    def request_size(self, k: int | None) -> int | None:
        return overcommit_size(self.factor, k, fedscale=self.fedscale)


def overcommit_size(factor: float, k: int, *, fedscale: bool = False) -> int:
    """ceil(factor * K) with ``factor`` read as the decimal it was written as (``repr``), so
    1.3 x 10 selects 13 clients, not ceil(13.000000000000002) = 14; ``fedscale``: int(factor * K)
    as FedScale computes it (``int(num_participants * overcommitment)``: 9 for K = 7, F = 1.3)."""
    from fractions import Fraction

    if fedscale:
        return fedscale_overcommit_size(factor, k)
    return int(math.ceil(Fraction(repr(float(factor))) * int(k)))


@dataclass(frozen=True)
class Async(Policy):
    """FedBuff-style: ``concurrency`` jobs in flight, one server update every ``buffer`` arrivals."""

    concurrency: int
    buffer: int = 1
    is_async: ClassVar[bool] = True

    def tables(self, clock, selector):
        return async_tables(clock, selector)
