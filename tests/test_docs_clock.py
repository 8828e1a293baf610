"""docs/clock.md states keys and numbers; each is checked against the code here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedsim.clock import MIN_SOJOURN, STEP_GUARD
from fedsim.clock.draws import SLOWDOWN_FLOOR
from fedsim.clock.model import MAX_EPOCHS, MAX_STEPS
from fedsim.clock.model import MAX_SPEED, MAX_TIME
from fedsim.clock.trace import DEVICE_COLUMNS, TRACE_COLUMNS
from fedsim.availability.diurnal import DiurnalAvailability
from fedsim.scenario import RoundConfig, SystemConfig, parse_scenario

DOC = (Path(__file__).resolve().parent.parent / "docs" / "clock.md").read_text()


def table_keys(heading: str) -> list[str]:
    section = DOC.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)


def test_system_table_lists_exactly_the_schema_keys():
    assert table_keys("## `system` keys") == list(SystemConfig.model_fields)


def test_stated_bounds_and_constants():
    assert MAX_TIME == 1e9 and "at most 1e9 s" in DOC
    assert MAX_SPEED == 1e6 and "at most 1e6 steps per\nsecond" in DOC
    assert MAX_STEPS == 10**7 and "capped at 10^7" in DOC and "`local_steps` and `max_local_steps` at most 10^7" in DOC
    assert MAX_EPOCHS == 10**4 and "`local_epochs` at most 10^4" in DOC
    assert STEP_GUARD == 1 + 1e-12 and "floor(x (1 + 1e-12))" in DOC
    assert SLOWDOWN_FLOOR == 1e-9 and "raised to 1e-9" in DOC
    assert MIN_SOJOURN == 1e-4 and "at least 1e-4 of the shortest round" in DOC


def test_device_lower_bounds_as_stated():
    assert "FLOP/s and bandwidths at least 1" in DOC
    for system in ({"compute": {"flops": 0.999}}, {"network": {"down": 1, "up": 0.999}}):
        with pytest.raises(ValueError, match="must be at least 1"):
            SystemConfig(**system)
    SystemConfig(compute={"flops": 1}, network={"down": 1, "up": 1})


def test_diurnal_defaults_as_stated():
    d = DiurnalAvailability(model="diurnal")
    assert (d.period, d.peak, d.trough, d.phase, d.mean_sojourn) == (86400.0, 0.8, 0.1, 0.0, 3600.0)
    assert "Defaults: period\n  86400, peak 0.8, trough 0.1, phase 0, mean_sojourn 3600" in DOC


def test_trace_headers_as_stated():
    assert ",".join(TRACE_COLUMNS) in DOC and ",".join(DEVICE_COLUMNS) in DOC


def test_round_keys_named_in_the_doc_exist():
    named = set(re.findall(r"`(max_local_steps|local_steps|local_epochs|clients_per_round|sampling|concurrency|buffer)`", DOC))
    assert named and named <= set(RoundConfig.model_fields)


@pytest.mark.parametrize("W, L, s", [(10.0, 0.5, 2.5), (7.0, 1.0, 0.3)])
def test_window_formula_as_stated(W, L, s):
    """tau_i = floor((W - 2L) s) with constant speed, latency and no outage."""
    import itertools
    import math

    from fedsim.runner.clock import build_clock

    sc = parse_scenario({"data": {"clients": 1}, "system": {"speed": s, "latency": L},
                         "round": {"policy": "window", "window": W}})
    (plan,) = itertools.islice(build_clock(sc, [1]).plans(), 1)
    assert plan.jobs[0].steps == math.floor((W - 2 * L) * s)
