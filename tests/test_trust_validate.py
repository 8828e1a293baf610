"""Issue 28 items 6 and 15: what the run or its clock refuses, ``fedsim validate`` refuses first,
one line naming the field, with nothing written."""

import pytest

from _tiny_runs import QUAD, exit_2
from fedsim.cli import main

DEV_HEADER = "client,start,end,online,sample_seconds,down_kbps,up_kbps\n"
SPEED_HEADER = "client,start,end,online,speed\n"
BASE = {k: v for k, v in QUAD.items() if k != "checkpoint"}


def _both_refuse(write_yaml, tmp_path, capsys, raw, *needles):
    """validate and run exit 2 with the same one line; the run leaves no folder."""
    sc = write_yaml(raw)
    line = exit_2(capsys, ["validate", str(sc)], *needles)
    assert exit_2(capsys, ["run", str(sc), "--out", str(tmp_path / "out"), "--quiet"], *needles) == line
    assert not (tmp_path / "out").exists()
    return line


# --------------------------------------------------------------------------- item 6
def test_quadratic_data_with_a_device_trace_is_refused(write_yaml, tmp_path, capsys):
    (tmp_path / "dev.csv").write_text(DEV_HEADER + "0,0,100,1,0.01,100,100\n1,0,100,1,0.02,100,100\n")
    raw = {**BASE, "system": {"trace": "dev.csv"}, "round": {"policy": "window", "window": 10.0}}
    _both_refuse(write_yaml, tmp_path, capsys, raw, "system.trace:", "device trace", "quadratic data has no model")


def test_a_speed_trace_on_quadratic_data_still_runs(write_yaml, tmp_path, capsys):
    (tmp_path / "t.csv").write_text(SPEED_HEADER + "0,0,100,1,1\n1,0,100,1,2\n")
    sc = write_yaml({**BASE, "system": {"trace": "t.csv"}, "round": {"policy": "window", "window": 10.0}})
    assert main(["validate", str(sc)]) == 0
    assert main(["run", str(sc), "--out", str(tmp_path / "out"), "--quiet"]) == 0


@pytest.mark.parametrize("policy", ["overcommit", "wait"])
def test_overcommit_on_a_trace_where_nobody_is_ever_online(write_yaml, tmp_path, capsys, policy):
    (tmp_path / "off.csv").write_text(SPEED_HEADER + "0,0,100,0,1\n1,0,100,0,1\n")
    raw = {**BASE, "system": {"trace": "off.csv"},
           "round": {"policy": policy, "local_steps": 2, "clients_per_round": 1}}
    _both_refuse(write_yaml, tmp_path, capsys, raw, "system.trace: no client is ever online", f"policy {policy}")


# --------------------------------------------------------------------------- item 15
@pytest.mark.parametrize("section", ["model", "data"])
def test_from_python_in_a_file_is_refused_naming_the_field(write_yaml, tmp_path, capsys, section):
    raw = {"rounds": 1, "data": {"name": "synthetic", "clients": 3}, "model": {"name": "logreg"},
           "round": {"policy": "wait", "local_steps": 1}}
    raw[section] = {**raw[section], "name": "from_python"}
    _both_refuse(write_yaml, tmp_path, capsys, raw, f"{section}.name: 'from_python' stands for a {section} given to "
                 f"fedsim.run({section}=...)")


@pytest.mark.parametrize("availability, key, least", [
    ({"model": "markov", "mean_online": 1e-300, "mean_offline": 5.0}, "mean_online", "0.001 s"),
    ({"model": "markov", "mean_online": 5.0, "mean_offline": 9.9e-4}, "mean_offline", "0.001 s"),
    ({"model": "diurnal", "mean_sojourn": 1e-300}, "mean_sojourn", "0.001 s"),
])
def test_tiny_sojourns_are_refused_at_validation(write_yaml, tmp_path, capsys, availability, key, least):
    # window 10 s: the clock's MIN_SOJOURN (1e-4) of it is 1e-3 s
    raw = {**BASE, "round": {"policy": "window", "window": 10.0}, "system": {"availability": availability}}
    _both_refuse(write_yaml, tmp_path, capsys, raw, f"system.availability.{key}: must be at least {least}")


def test_a_sojourn_at_the_bound_is_accepted(write_yaml, capsys):
    raw = {**BASE, "round": {"policy": "window", "window": 10.0},
           "system": {"availability": {"model": "markov", "mean_online": 1e-3, "mean_offline": 1e-3}}}
    assert main(["validate", str(write_yaml(raw))]) == 0


def test_tiny_sojourn_with_epochs_is_refused_by_the_bound_known_without_data(write_yaml, capsys):
    # wait + local_epochs: the quickest job depends on n_i (the data); validate bounds it below by
    # 2 latency + one step at the fastest speed: 2 * 0.5 + 1 / 4 = 1.25 s, so 1.25e-4 s
    raw = {"rounds": 1, "data": {"name": "synthetic", "clients": 3},
           "round": {"policy": "wait", "local_epochs": 1},
           "system": {"speed": [1.0, 2.0, 4.0], "latency": 0.5,
                      "availability": {"model": "diurnal", "mean_sojourn": 1e-300}}}
    exit_2(capsys, ["validate", str(write_yaml(raw))], "system.availability.mean_sojourn: must be at least 0.000125 s",
           "at least 1.25 s")


def test_a_plugin_models_time_scales_are_checked_at_validation(write_yaml, tmp_path, capsys):
    """The duty-cycle model of docs/extending.md with off: 1e-9 (issue 28 item 15): refused when
    the scenario is read, naming the key, before any folder."""
    import fedsim
    from fedsim.errors import ScenarioError
    from fedsim.registries import AVAILABILITY
    from dataclasses import dataclass

    from pydantic import Field

    from fedsim.availability import AvailabilitySection
    from fedsim.clock.availability import AvailabilityModel

    class Timeline:
        initial, changes = True, True

        def __init__(self, on, off):
            self.on, self.off = on, off

        def toggles(self):
            k = 0
            while True:
                yield k * (self.on + self.off) + self.on
                yield (k + 1) * (self.on + self.off)
                k += 1

    @dataclass(frozen=True)
    class Duty(AvailabilityModel):
        on: float
        off: float

        def timelines(self, m, seed):
            return [Timeline(self.on, self.off) for _ in range(m)]

        def time_scales(self):
            return {"on": self.on, "off": self.off}

    class DutySection(AvailabilitySection):
        on: float = Field(gt=0)
        off: float = Field(gt=0)

        def clock_value(self):
            return Duty(self.on, self.off)

    fedsim.register_availability("duty_test", DutySection)
    try:
        raw = {"data": {"name": "quadratic", "clients": 4}, "rounds": 2, "round": {"policy": "window", "window": 25.0},
               "system": {"availability": {"model": "duty_test", "on": 30.0, "off": 1e-9}}}
        exit_2(capsys, ["validate", str(write_yaml(raw))], "system.availability.off: must be at least 0.0025 s")
        with pytest.raises(ScenarioError, match=r"^system.availability.off: must be at least 0.0025 s"):
            fedsim.schedule(raw, out=tmp_path / "out")
        assert not (tmp_path / "out").exists()
    finally:
        AVAILABILITY.unregister("duty_test")
