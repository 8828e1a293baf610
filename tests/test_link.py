"""The server link's processor sharing (fedsim.clock.link): hand-checked cases and an exact reference."""

import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.clock.link import SharedLink, fair_rates, sweep

INF = float("inf")


# -- fair_rates ---------------------------------------------------------------------------------


def test_fair_rates_by_hand():
    """sum c <= C gives the caps (also sum c == C); equal caps split C evenly; one slow client keeps
    its cap and the others share the rest, (10 - 1) / 2 = 4.5, whatever the order; caps equal to the
    level: 9 / 3 = 3 <= 3 <= 10; no link (C = inf) gives the caps; no transfer gives nothing."""
    assert fair_rates(np.array([1.0, 2.0, 3.0]), 10.0).tolist() == [1.0, 2.0, 3.0]
    assert fair_rates(np.array([2.0, 3.0, 5.0]), 10.0).tolist() == [2.0, 3.0, 5.0]
    assert fair_rates(np.array([5.0, 5.0, 5.0, 5.0]), 10.0).tolist() == [2.5] * 4
    assert fair_rates(np.array([1.0, 10.0, 10.0]), 10.0).tolist() == [1.0, 4.5, 4.5]
    assert fair_rates(np.array([10.0, 1.0, 10.0]), 10.0).tolist() == [4.5, 1.0, 4.5]
    assert fair_rates(np.array([3.0, 10.0, 3.0]), 9.0).tolist() == [3.0, 3.0, 3.0]
    assert fair_rates(np.array([2.0, 8.0, 8.0]), 10.0).tolist() == [2.0, 4.0, 4.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0 * inf on the way
        assert fair_rates(np.array([2.0, INF]), 10.0).tolist() == [2.0, 8.0]
        assert fair_rates(np.array([INF, INF]), 10.0).tolist() == [5.0, 5.0]
    assert fair_rates(np.array([7.0, 1e9]), INF).tolist() == [7.0, 1e9]
    assert fair_rates(np.array([]), 10.0).tolist() == []


@pytest.mark.parametrize("capacity", [0.0, -1.0, float("nan")])
def test_fair_rates_refuses_a_link_of_no_capacity(capacity):
    with pytest.raises(ValueError, match="capacity"):
        fair_rates(np.array([1.0]), capacity)
    with pytest.raises(ValueError, match="capacity"):
        SharedLink(capacity)


def _water_fill(caps, capacity):
    """Exact max-min fair rates by the textbook iteration: give every unfrozen transfer an equal
    share of what is left; freeze those whose cap is below it at their cap; repeat."""
    rates, left, free = {}, capacity, dict(caps)
    while free:
        share = None if left is None else left / len(free)
        capped = {i: c for i, c in free.items() if share is None or c <= share}
        if not capped:
            rates.update({i: share for i in free})
            break
        for i, c in capped.items():
            rates[i] = c
            del free[i]
            if left is not None:
                left -= c
    return rates


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.integers(1, 200))
def test_fair_rates_equal_the_textbook_iteration(caps, capacity):
    exact = _water_fill({i: Fraction(c) for i, c in enumerate(caps)}, Fraction(capacity))
    got = fair_rates(np.array(caps, dtype=float), float(capacity))
    assert got == pytest.approx([float(exact[i]) for i in range(len(caps))], rel=1e-12)
    assert got.sum() == pytest.approx(min(capacity, sum(caps)), rel=1e-12)


# -- SharedLink by hand -------------------------------------------------------------------------


def test_three_transfers_by_hand():
    """C = 10, caps 2, 8, 8, bits 4, 8, 12, all start at 0 (transfers 0, 1, 2; keys 7, 1, 4).

    Rates (1): 10 / 3 > 2, so transfer 0 keeps 2 and 1, 2 share 8: rates 2, 4, 4 (sum 10).
    Predicted finishes 4/2 = 2, 8/4 = 2, 12/4 = 3: transfers 0 and 1 finish together at 2.
    At 2, transfer 2 has 12 - 4 * 2 = 4 bits left and moves alone at min(8, 10) = 8: it finishes
    at 2 + 4/8 = 2.5.
    """
    link = SharedLink(10.0)
    assert link.next_finish() == INF and link.active() == 0
    for key, bits, cap in [(7, 4.0, 2.0), (1, 8.0, 8.0), (4, 12.0, 8.0)]:  # keys not in the caps' order
        link.add(key, 0.0, bits, cap)
    assert link.active() == 3 and link.next_finish() == 2.0
    assert link.pop_finished(1.0) == [] and link.now == 1.0  # nothing finishes before 2
    assert link.pop_finished(2.0) == [1, 7]  # together, in ascending key order
    assert link.active() == 1 and link.next_finish() == 2.5
    assert link.pop_finished(2.5) == [4]
    assert link.active() == 0 and link.next_finish() == INF
    assert sweep([0, 0, 0], [4, 8, 12], [2, 8, 8], 10.0).tolist() == [2.0, 2.0, 2.5]


def test_staggered_starts_and_a_removal_by_hand():
    """C = 12. A (key 0): 12 bits, cap 12, starts at 0; B (key 1): 12 bits, cap 12, starts at 0.5;
    C (key 2): 8 bits, cap 4, starts at 1; B is removed at 1.25 (an outage).

    t = 0:    A alone at min(12, 12) = 12: finish 12/12 = 1.
    t = 0.5:  A has 12 - 6 = 6 left; A, B at 12/2 = 6 each: A at 0.5 + 6/6 = 1.5, B at 0.5 + 12/6 = 2.5.
    t = 1:    A has 3, B 9; caps 4, 12, 12: 12/3 = 4 <= 4, so all at 4: A at 1 + 3/4 = 1.75,
              B at 1 + 9/4 = 3.25, C at 1 + 8/4 = 3.
    t = 1.25: B leaves (8 bits unsent). A has 2, C 7; caps 4, 12: C keeps 4, A gets 12 - 4 = 8:
              A at 1.25 + 2/8 = 1.5; C's rate is unchanged, so its prediction 3 stands.
    t = 1.5:  A finishes; C alone moves at its cap 4 (unchanged): finishes at 3.
    """
    link = SharedLink(12.0)
    link.add(0, 0.0, 12.0, 12.0)
    assert link.next_finish() == 1.0
    link.add(1, 0.5, 12.0, 12.0)
    assert link.next_finish() == 1.5
    link.add(2, 1.0, 8.0, 4.0)
    assert link.next_finish() == 1.75 and link.active() == 3
    link.remove(1, 1.25)
    assert link.next_finish() == 1.5 and link.active() == 2
    link.remove(7, 1.25)  # absent: nothing happens
    assert link.next_finish() == 1.5 and link.active() == 2
    assert link.pop_finished(1.5) == [0]
    assert link.next_finish() == 3.0
    assert link.pop_finished(3.0) == [2]
    assert link.next_finish() == INF
    got = sweep([0, 0.5, 1], [12, 12, 8], [12, 12, 4], 12.0, leave=[INF, 1.25, INF])
    assert got.tolist() == [1.5, INF, 3.0]


def test_a_transfer_finishes_at_its_prediction():
    """C = 10, three transfers of caps 100 at 0: each at 10/3. Transfer 0 (31 bits) is predicted at
    31 / (10/3) = 9.299999999999999 in floats, where 31 - (10/3) * 9.299999999999999 = 3.6e-15 > 0.
    A fourth transfer starting exactly then lowers the rates to 2.5; transfer 0 must still finish
    at its prediction, not at 9.3 with its residue moved at the new rate."""
    link = SharedLink(10.0)
    link.add_many([0, 1, 2], 0.0, [31.0, 50.0, 50.0], [100.0, 100.0, 100.0])
    f = 31.0 / (10.0 / 3.0)
    assert link.next_finish() == f and 31.0 - (10.0 / 3.0) * f > 0 and f + (31.0 - (10.0 / 3.0) * f) / 2.5 > f
    link.add(3, f, 5.0, 100.0)
    assert link.next_finish() == f
    assert link.pop_finished(f) == [0]
    assert link.active() == 3


def test_a_rate_change_one_float_before_a_finish_stays_in_the_present():
    """A transfer (cap r below C = 0.5, so at rate r) added at t0 is predicted at f = t0 + q/r. At
    the float just before f its remaining q - r (t - t0) rounds to -1.4e-14: a second transfer
    starting then lowers its rate to 0.25, and its new prediction is t (remaining clamped at 0),
    never before the link's time."""
    t0, q, r = 33.90826183808892, 109.05941102083547, 0.4152096850863923
    link = SharedLink(0.5)
    link.add(0, t0, q, r)
    f = t0 + q / r
    t = np.nextafter(f, -INF)
    assert link.next_finish() == f and q - r * (t - t0) < 0
    link.add(1, t, 1.0, 1.0)
    assert link.next_finish() == t
    assert link.pop_finished(t) == [0]


def test_a_client_with_no_limit_of_its_own_gets_the_link():
    """C = 10: a transfer of 20 bits with cap inf alone moves at 10 (finish 2); a second one, cap 2,
    from t = 1: rates 8 and 2, the first has 10 left, finishing at 1 + 10/8 = 2.25."""
    link = SharedLink(10.0)
    link.add(0, 0.0, 20.0, INF)
    assert link.next_finish() == 2.0
    link.add(1, 1.0, 100.0, 2.0)
    assert link.next_finish() == 2.25
    with pytest.raises(ValueError, match="no capacity"):
        SharedLink(INF).add(0, 0.0, 1.0, INF)


def test_bad_calls_are_refused():
    link = SharedLink(10.0)
    link.add(0, 1.0, 10.0, 5.0)  # finishes at 3
    with pytest.raises(ValueError, match="already"):
        link.add(0, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="before"):
        link.add(1, 0.5, 1.0, 1.0)
    with pytest.raises(ValueError, match="pop_finished first"):
        link.add(1, 3.5, 1.0, 1.0)
    with pytest.raises(ValueError, match="pop_finished first"):
        link.pop_finished(4.0)
    for bits, cap in [(0.0, 1.0), (-1.0, 1.0), (float("nan"), 1.0), (INF, 1.0), (1.0, 0.0), (1.0, float("nan"))]:
        with pytest.raises(ValueError):
            link.add(1, 2.0, bits, cap)
    with pytest.raises(ValueError, match="finite"):
        link.pop_finished(INF)
    assert link.active() == 1 and link.pop_finished(3.0) == [0]


# -- no link ------------------------------------------------------------------------------------


def test_no_link_is_start_plus_bits_over_cap_exactly():
    rng = np.random.default_rng(0)
    n = 200
    starts = np.round(rng.uniform(0, 50, n), 1)
    bits = rng.lognormal(3, 1, n)
    caps = rng.lognormal(1, 1, n)
    leave = np.where(rng.random(n) < 0.2, starts + rng.uniform(0, 40, n), INF)
    want = starts + bits / caps
    want[leave < want] = INF
    assert np.array_equal(sweep(starts, bits, caps, INF, leave), want)


# -- an exact event-by-event reference ----------------------------------------------------------


def _reference(starts, bits, caps, capacity, leave):
    """Processor sharing in exact rationals, one event at a time (finishes, then leaves, then starts
    at one instant). Returns the finish times (None: left first) and checks conservation as it goes:
    the link never moves more than C, and a transfer finishes when exactly its bits have moved."""
    n = len(starts)
    finish, left, sent = [None] * n, dict(), [Fraction(0)] * n
    pending = sorted((s, i) for i, s in enumerate(starts) if leave[i] is None or leave[i] > s)
    active = {}
    t = Fraction(0)
    while pending or active:
        rates = _water_fill({i: caps[i] for i in active}, capacity)
        if capacity is not None:
            assert sum(rates.values()) <= capacity
        times = [t + active[i] / rates[i] for i in active]
        times += [pending[0][0]] if pending else []
        times += [leave[i] for i in active if leave[i] is not None]
        t1 = min(times)
        for i in active:
            active[i] -= rates[i] * (t1 - t)
            sent[i] += rates[i] * (t1 - t)
        t = t1
        for i in [i for i in active if active[i] == 0]:
            finish[i] = t
            del active[i]
        for i in [i for i in active if leave[i] == t]:
            left[i] = active.pop(i)
        while pending and pending[0][0] == t:
            active[pending[0][1]] = bits[pending[0][1]]
            pending.pop(0)
    for i in range(n):
        assert finish[i] is None or sent[i] == bits[i]
        assert i not in left or sent[i] + left[i] == bits[i]
    return finish


def _moved(starts, caps, capacity, finish):
    """What a work-conserving link moves, from the finish times alone: between consecutive events it
    moves min(C, sum of the active transfers' caps)."""
    edges = sorted(set(starts) | set(finish))
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        c = sum(caps[i] for i in range(len(starts)) if starts[i] <= a < finish[i])
        total += min(capacity, c) * (b - a)
    return total


transfers = st.lists(
    st.tuples(st.integers(0, 12), st.integers(1, 40), st.integers(1, 12), st.one_of(st.none(), st.integers(1, 15))),
    min_size=1, max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(transfers, st.one_of(st.none(), st.integers(1, 30)), st.booleans())
def test_sweep_equals_the_exact_reference(rows, capacity, halves):
    """Starts on a grid of 1/2 or 1 (so ties between starts are common), integer bits and caps, some
    transfers leaving a while after they start. Draws where the exact finish of a transfer equals
    its leave time are skipped: there the float prediction may fall on either side of the tie."""
    scale = Fraction(1, 2) if halves else Fraction(1)
    starts = [Fraction(s) * scale for s, _, _, _ in rows]
    bits = [Fraction(b) for _, b, _, _ in rows]
    caps = [Fraction(c) for _, _, c, _ in rows]
    leave = [None if w is None else starts[i] + Fraction(w) * scale for i, (_, _, _, w) in enumerate(rows)]
    cap_f = None if capacity is None else Fraction(capacity)
    exact = _reference(starts, bits, caps, cap_f, leave)
    if any(f is not None and f == w for f, w in zip(exact, leave)):
        return
    got = sweep([float(s) for s in starts], [float(b) for b in bits], [float(c) for c in caps],
                INF if capacity is None else float(capacity),
                [INF if w is None else float(w) for w in leave])
    for g, e in zip(got.tolist(), exact):
        if e is None:
            assert g == INF
        else:
            assert g == pytest.approx(float(e), rel=1e-9)
    if all(w is None for w in leave):  # conservation from the floats alone: everything sent, at <= C
        moved = _moved([float(s) for s in starts], [float(c) for c in caps],
                       INF if capacity is None else float(capacity), got.tolist())
        assert moved == pytest.approx(float(sum(bits)), rel=1e-9)


def test_sweep_edge_cases():
    """A transfer of 0 bits finishes at its start; one leaving at or before its start never starts;
    one finishing exactly when it leaves finishes (finishes come first at an instant): C = 4, two
    of 4 bits at cap 2 from 0, one leaving at 1; the other, at 2 throughout, finishes at 2."""
    got = sweep([1.0, 2.0, 0.0, 0.0], [0.0, 5.0, 4.0, 4.0], [1.0, 1.0, 2.0, 2.0], 4.0,
                leave=[INF, 2.0, 2.0, 1.0])
    assert got.tolist() == [1.0, INF, 2.0, INF]
    assert sweep([], [], [], 1.0).tolist() == []
    # times may be negative: A (10 bits) alone at 4 from -3 has 2 left at -1, when B (1 bit) starts;
    # both at 2: B done at -0.5, A then has 1 left, alone at 4: done at -0.25
    assert sweep([-3.0, -1.0], [10.0, 1.0], [4.0, 4.0], 4.0).tolist() == [-0.25, -0.5]
    with pytest.raises(ValueError):
        sweep([0.0], [1.0], [0.0], 1.0)
    with pytest.raises(ValueError):
        sweep([float("nan")], [1.0], [1.0], 1.0)
