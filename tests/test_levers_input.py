"""Bad input for the straggler levers' keys: one line naming the field, exit 2, before any run
folder (issue 25 item 5, issue 26 item 5)."""

from __future__ import annotations

import pytest
import yaml

from fedsim.cli import main

BASE = {
    "name": "bad", "seed": 0, "rounds": 2,
    "data": {"name": "synthetic", "clients": 6}, "model": {"name": "logreg"},
    "system": {"speed": 2.0, "latency": 0.1, "network": {"down": 1e6, "up": 1e6}},
    "round": {"policy": "deadline", "deadline": 5.0, "local_steps": 3},
    "algorithm": {"name": "fedavg", "lr": 0.1},
}


def merged(**sections):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for key, value in sections.items():
        raw[key] = {**raw[key], **value}
    return raw


CASES = [
    (dict(system={"on_outage": "resume"}), "system.on_outage: resume means nothing when every client is always online"),
    (dict(system={"on_outage": "maybe"}), "system.on_outage: Input should be 'fail' or 'resume'"),
    (dict(round={"on_deadline": "partial", "policy": "wait"}), "round.on_deadline: partial uploads at a deadline mean "
                                                               "nothing under policy wait"),
    (dict(round={"policy": "window", "window": 5.0, "local_steps": None, "local_time": 2.0}),
     "round.local_time: a per-job time budget is for policy async"),
    (dict(round={"policy": "async", "concurrency": 2, "local_time": 2.0}, algorithm={"name": "fedbuff"}),
     "round.local_time: give local_time or local_steps, not both"),
    (dict(round={"policy": "async", "concurrency": 2, "local_steps": None, "local_time": 0}, algorithm={"name": "fedbuff"}),
     "round.local_time: Input should be greater than 0"),
    (dict(round={"policy": "async", "concurrency": 2, "local_steps": None, "local_time": float("nan")},
          algorithm={"name": "fedbuff"}), "round.local_time"),
    (dict(system={"server": {"up": 0}}), "system.server.up: must be a finite bit rate of at least 1 bit/s"),
    (dict(system={"server": {"down": -5.0}}), "system.server.down: must be a finite bit rate of at least 1 bit/s"),
    (dict(system={"server": {"up": float("nan")}}), "system.server.up"),
    (dict(system={"server": {"aggregate": -1.0}}), "system.server.aggregate: must be seconds per update in [0, 1e9]"),
    (dict(system={"server": {"aggregate": {"flops": 0}}}), "system.server.aggregate.flops"),
    (dict(system={"server": {"bogus": 1}}), "system.server.bogus: unknown key"),
    (dict(system={"network": None, "server": {"up": 1e6}}), "system.server.up: a shared server link needs transfers"),
]


@pytest.mark.parametrize("sections, message", CASES, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(CASES)])
def test_bad_lever_keys_are_one_line(tmp_path, capsys, sections, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(merged(**sections)))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert not (tmp_path / "out").exists()


def test_aggregation_flops_with_quadratic_data_is_refused(tmp_path, capsys):
    raw = {"name": "q", "data": {"name": "quadratic", "clients": 3}, "round": {"policy": "wait", "local_steps": 1},
           "system": {"server": {"aggregate": {"flops": 1e9}}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(path)]) == 2
    assert "system.server.aggregate: quadratic data has no model" in capsys.readouterr().err
