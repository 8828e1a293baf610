"""Availability models through the registry: a model written outside the package (one section
class, one clock value) runs under every round policy, on the SimPy path and the vectorised paths
alike; the generic array walk (TimelineStates) replays a built-in's own arrays exactly."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import pytest
from pydantic import Field, field_validator, model_validator

import fedsim
from fedsim.availability import AvailabilitySection
from fedsim.availability.markov import Markov, MarkovStates
from fedsim.clock import Clock
from fedsim.clock.availability import AvailabilityModel, TimelineStates
from fedsim.clock.model import Population
from fedsim.errors import ScenarioError
from fedsim.registries import AVAILABILITY
from fedsim.named_pieces import RegistryError
from fedsim.scenario import RoundConfig, SystemConfig, parse_scenario


class StaggeredTimeline:
    """Online for ``on`` s, offline for ``off`` s, shifted by ``shift`` s: offline during
    [shift + on + k P, shift + (k + 1) P), P = on + off."""

    initial = changes = True

    def __init__(self, on: float, off: float, shift: float):
        self.on, self.off, self.shift = on, off, shift

    def toggles(self):
        period = self.on + self.off
        for k in itertools.count():
            yield self.shift + k * period + self.on
            yield self.shift + (k + 1) * period


@dataclass(frozen=True)
class Staggered(AvailabilityModel):
    on: float
    off: float
    stagger: float

    def timelines(self, m: int, seed: int) -> list:
        return [StaggeredTimeline(self.on, self.off, c * self.stagger) for c in range(m)]

    def time_scales(self) -> dict[str, float]:
        return {"on": self.on, "off": self.off}


class StaggeredSection(AvailabilitySection):
    on: float = Field(gt=0)
    off: float = Field(gt=0)
    stagger: float = Field(0.0, ge=0)

    def clock_value(self) -> Staggered:
        return Staggered(self.on, self.off, self.stagger)


@pytest.fixture
def staggered():
    fedsim.register_availability("staggered", StaggeredSection)
    yield
    AVAILABILITY.unregister("staggered")


def _schedule(availability, m=3, rounds=5, **round_kw):
    return fedsim.schedule({"data": {"name": "quadratic", "clients": m}, "rounds": rounds,
                            "round": round_kw or {"policy": "window", "window": 25.0},
                            "system": {"availability": availability}})


def test_a_registered_model_runs_from_a_scenario_by_hand(staggered):
    """Clients 0, 1, 2 offline during [30, 40) + 40k, [35, 45) + 40k, [40, 50) + 40k; windows
    of 25 s open at 0, 25, 50, 75, 100 (an outage starting at t means offline at t)."""
    res = _schedule({"model": "staggered", "on": 30.0, "off": 10.0, "stagger": 5.0})
    assert res.rounds["available"].tolist() == [3, 3, 3, 1, 3]
    c = res.clients
    # round r opens at 25 r; a job runs to the window's end or fails when its client goes offline
    assert c["status"].tolist() == ["completed"] * 3 + ["failed"] * 3 + ["failed", "completed", "completed"] + \
        ["offline", "offline", "failed"] + ["failed"] * 3
    assert c["end"].tolist() == [25.0] * 3 + [30.0, 35.0, 40.0] + [70.0, 75.0, 75.0] + [75.0, 75.0, 80.0] + \
        [110.0, 115.0, 120.0]


POLICIES = {
    "window": dict(policy="window", window=7.0),
    "wait": dict(policy="wait", local_steps=3),
    "deadline": dict(policy="deadline", deadline=6.0, local_steps=4),
    "overcommit": dict(policy="overcommit", overcommit=1.5, clients_per_round=4, local_steps=3),
    "async": dict(policy="async", concurrency=4, buffer=2, local_steps=3),
}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_vectorised_paths_equal_simpy_for_a_user_model(policy):
    """The vectorised and heap paths walk a user's timelines (TimelineStates, its peek included)
    and produce exactly the SimPy path's plans."""
    section = StaggeredSection(model="staggered", on=9.0, off=4.0, stagger=1.3)
    speeds = tuple(np.linspace(0.5, 2.5, 9))
    system = SystemConfig(speed=speeds, latency=0.2, availability=section).value()
    rule = RoundConfig(**{"clients_per_round": 6, **POLICIES[policy]} if policy != "async" else POLICIES[policy]).value(4)

    def plans(fast):
        clock = Clock(system, rule, Population.of([1] * len(speeds)), seed=5, fast=fast)
        assert clock.fast == fast
        return list(itertools.islice(clock.plans(), 40))

    fast, slow = plans(True), plans(False)
    assert fast == slow
    statuses = {j.status for p in fast for j in p.jobs}
    assert "completed" in statuses and "failed" in statuses


def test_timeline_states_replay_markov_states_exactly():
    """The generic walk over timelines gives the same bits as a model's own arrays."""
    model, m, seed = Markov(5.0, 2.0), 50, 3
    own, walk = MarkovStates(5.0, 2.0, seed, m), TimelineStates(model.timelines(m, seed))
    assert np.array_equal(own.online, walk.online) and np.array_equal(own.next, walk.next)
    idx = np.array([0, 7, 7, 31, 49])
    for t in (0.5, 3.0, 3.0, 11.25, 40.0, 40.0 + 1e-9, 95.0):
        for a, b in zip(own.peek(idx, t + 4.0), walk.peek(idx, t + 4.0)):
            assert np.array_equal(a, b)
        own.advance(t)
        walk.advance(t)
        assert np.array_equal(own.online, walk.online) and np.array_equal(own.next, walk.next)


def test_peek_leaves_the_state_unchanged():
    st = MarkovStates(1.0, 1.0, 0, 20)
    online, nxt = st.online.copy(), st.next.copy()
    st.peek(np.arange(20), 50.0)
    assert np.array_equal(st.online, online) and np.array_equal(st.next, nxt)


@pytest.mark.parametrize("availability, message", [
    ({"model": "sometimes"}, "system.availability.model: unknown availability model 'sometimes'; known: diurnal, "
                             "markov, staggered"),
    # a scenario file names, never imports: a module path is just an unknown name
    ({"model": "os:system"}, "system.availability.model: unknown availability model 'os:system'; known: diurnal, "
                             "markov, staggered"),
    ({"on": 1.0}, "system.availability.model: missing (which model? diurnal, markov, staggered)"),
    ({"model": "staggered", "on": 0.0, "off": 1.0}, "system.availability.on: Input should be greater than 0"),
    ({"model": "staggered", "on": 1.0, "off": 1.0, "of": 2.0}, "system.availability.of: unknown key"),
    ({"model": "staggered", "on": 1.0}, "system.availability.off: Field required"),
    ({"model": "staggered", "on": 1.0, "off": 1e-9}, "system.availability.off: must be at least 0.0025 s"),
])
def test_errors_name_the_key(staggered, availability, message):
    with pytest.raises(ScenarioError) as err:
        _schedule(availability)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_register_availability_takes_a_section_class():
    with pytest.raises(RegistryError, match="^availability model 'x': expected a subclass of "
                                            "fedsim.availability.AvailabilitySection"):
        fedsim.register_availability("x", lambda m, seed: None)
    with pytest.raises(RegistryError, match="'markov' is already registered"):
        fedsim.register_availability("markov", StaggeredSection)


def test_built_in_models_are_one_module_each():
    """markov and diurnal enter exactly as a plug-in would: a lazy 'module:attribute' each."""
    assert AVAILABILITY.names() == ("diurnal", "markov")
    from fedsim.availability.diurnal import DiurnalAvailability
    from fedsim.availability.markov import MarkovAvailability

    assert AVAILABILITY.get("markov") is MarkovAvailability and AVAILABILITY.get("diurnal") is DiurnalAvailability


def test_every_registry_has_its_documented_register_function():
    import re
    from pathlib import Path

    from fedsim import registries

    text = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text()
    listed = text[text.index("The registration functions are"):text.index("## Plug-ins")]
    exported = {n for n in fedsim.__all__ if n.startswith("register_")}
    assert set(re.findall(r"`(register_\w+)`", listed)) == exported
    assert {f"register_{kind}" for kind in registries.ALL} == exported
    assert all(callable(getattr(fedsim, name)) for name in exported)


class _Checked(StaggeredSection):
    """A user's section with its own validators (plain ValueError, no fedsim internals)."""

    @field_validator("stagger")
    @classmethod
    def _small(cls, v):
        if v > 100:
            raise ValueError("must be at most 100 s")
        return v

    @model_validator(mode="after")
    def _order(self):
        if self.off > self.on:
            raise ValueError("off must not exceed on")
        return self


@pytest.mark.parametrize("keys, message", [
    ({"on": 5.0, "off": 1.0, "stagger": 500.0}, "system.availability.stagger: must be at most 100 s"),
    ({"on": 1.0, "off": 5.0}, "system.availability: off must not exceed on"),
])
def test_a_user_sections_own_errors_are_named_under_the_key(keys, message):
    fedsim.register_availability("checked", _Checked)
    try:
        with pytest.raises(ScenarioError) as err:
            _schedule({"model": "checked", **keys})
        assert str(err.value) == message
    finally:
        AVAILABILITY.unregister("checked")


class _Listed(AvailabilityModel):
    """A model whose timelines are given as lists of toggle times (for broken-model tests)."""

    def __init__(self, times, changes=True):
        self.times, self.changes = times, changes

    def timelines(self, m, seed):
        model = self

        class Timeline:
            initial, changes = True, model.changes

            def __init__(self, times):
                self.times = times

            def toggles(self):
                return iter(self.times)

        return [Timeline(t) for t in self.times]


def _plans(model, m, fast, rounds=4):
    system = replace(SystemConfig(speed=1.0).value(), availability=model)
    rule = RoundConfig(policy="window", window=4.0).value(4)
    return list(itertools.islice(Clock(system, rule, Population.of([1] * m), seed=0, fast=fast).plans(), rounds))


@pytest.mark.parametrize("fast", [True, False], ids=["vectorised", "simpy"])
@pytest.mark.parametrize("times, message", [
    ([[5.0], [6.0]], "system.availability: _Listed.timelines gave 2 timelines for 3 clients"),
    ([[5.0], [10.0, 5.0, 20.0], [1.0]], "system.availability: _Listed: client 1's toggle at 5.0 follows 10.0 "
                                        "(toggle times must be finite, > 0 and increasing)"),
    ([[5.0], [float("nan")], [1.0]], "system.availability: _Listed: client 1's toggle at nan follows 0.0"),
    ([[0.0], [1.0], [2.0]], "system.availability: _Listed: client 0's toggle at 0.0 follows 0.0"),
])
def test_a_broken_user_model_is_one_line_on_both_paths(fast, times, message):
    with pytest.raises(ScenarioError) as err:
        _plans(_Listed(times), 3, fast)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_changes_false_means_no_toggle_on_both_paths():
    model = _Listed([[3.0], [3.0], [3.0]], changes=False)
    fast, slow = _plans(model, 3, True), _plans(model, 3, False)
    assert fast == slow
    assert [p.available for p in fast] == [3, 3, 3, 3]
    assert {j.status for p in fast for j in p.jobs} == {"completed"}


class _NoValue(AvailabilitySection):
    pass


class _DictValue(AvailabilitySection):
    def clock_value(self):
        return {"on": 1}


@pytest.mark.parametrize("section, message", [
    (_NoValue, "system.availability: model 'broken': clock_value() failed: NotImplementedError"),
    (_DictValue, "system.availability: model 'broken': clock_value() returned dict, not a "
                 "fedsim.clock.availability.AvailabilityModel"),
])
def test_a_section_whose_clock_value_is_unusable_fails_at_validation(section, message):
    fedsim.register_availability("broken", section)
    try:
        with pytest.raises(ScenarioError) as err:  # validation alone: no clock, no run
            parse_scenario({"round": {"policy": "window", "window": 5.0},
                            "system": {"availability": {"model": "broken"}}})
        assert str(err.value) == message
    finally:
        AVAILABILITY.unregister("broken")


@pytest.mark.parametrize("name", [["markov"], {"a": 1}, 3])
def test_a_model_key_that_is_not_a_name(name):
    with pytest.raises(ScenarioError) as err:
        _schedule({"model": name})
    assert str(err.value) == "system.availability.model: must be a model's name (diurnal, markov)"
