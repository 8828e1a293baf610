"""Issue 17 / 12: a trace file is parsed once per run. ``fedsim run`` checks it with the scenario
(``fedsim.validate.check_trace``) and the clock replays it; both get the one parsed
:class:`~fedsim.clock.trace.Trace` (``load_trace`` keeps the last ``LOADED_TRACES`` by content)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import yaml

import fedsim
from fedsim.cli import main
from fedsim.clock import trace as trace_mod

TRACE = "client,start,end,online,speed\n0,0,100,1,2.0\n1,0,100,1,4.0\n"


@pytest.fixture
def parses(monkeypatch):
    """The list of (path, clients) of every parse, with an empty set of kept traces."""
    calls = []
    real = trace_mod._parse

    def counting(name, text, num_clients):
        calls.append((name, num_clients))
        return real(name, text, num_clients)

    monkeypatch.setattr(trace_mod, "_parse", counting)
    monkeypatch.setattr(trace_mod, "_loaded", OrderedDict())
    return calls


def scenario(tmp_path, **extra):
    (tmp_path / "t.csv").write_text(TRACE)
    sc = {
        "name": "traced", "seed": 0, "rounds": 2,
        "data": {"name": "quadratic", "centers": [[1.0], [3.0]]},
        "system": {"trace": str(tmp_path / "t.csv")},
        "round": {"policy": "wait", "local_steps": 2},
        "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1},
        **extra,
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def test_fedsim_run_parses_the_trace_once(tmp_path, parses):
    path = scenario(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert parses == [(str(tmp_path / "t.csv"), 2)]
    assert (tmp_path / "out" / "rounds.csv").read_text().count("\n") == 3


def test_variants_sharing_a_trace_parse_it_once(tmp_path, parses):
    path = scenario(tmp_path, variants={"a": {"algorithm.lr": 0.1}, "b": {"algorithm.lr": 0.2}})
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert len(parses) == 1 and (tmp_path / "out" / "b" / "rounds.csv").exists()


def test_fedsim_validate_and_the_api_parse_it_once(tmp_path, parses, capsys):
    path = scenario(tmp_path)
    assert main(["validate", str(path)]) == 0
    assert len(parses) == 1
    trace_mod._loaded.clear()
    fedsim.run(path)
    assert len(parses) == 2


def test_an_edited_trace_is_parsed_again_and_only_the_last_traces_are_kept(tmp_path, parses):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    assert trace_mod.load_trace(path, 2) is trace_mod.load_trace(path, 2)
    assert len(parses) == 1
    path.write_text(TRACE.replace("4.0", "5.0"))  # same size, and likely the same modification time
    assert trace_mod.load_trace(path, 2).clients[1].speed.tolist() == [5.0]
    assert len(parses) == 2
    others = [tmp_path / f"o{i}.csv" for i in range(trace_mod.LOADED_TRACES)]
    for other in others:
        other.write_text(TRACE)
        trace_mod.load_trace(other, 2)
    trace_mod.load_trace(path, 2)  # pushed out by the others: parsed again
    assert len(parses) == 3 + trace_mod.LOADED_TRACES
    assert len(trace_mod._loaded) == trace_mod.LOADED_TRACES


def test_a_kept_trace_cannot_be_changed_in_place(tmp_path, parses):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    with pytest.raises(ValueError, match="read-only"):
        trace_mod.load_trace(path, 2).clients[0].speed[0] = 9.0


def test_python_api_checks_the_trace_before_the_folder(tmp_path, parses):
    """fedsim.run and fedsim.schedule make the command line's checks: a trace where no client is
    ever online under policy wait is one line, before ``out`` exists, and parsed once."""
    (tmp_path / "off.csv").write_text("client,start,end,online,speed\n0,0,100,0,2.0\n1,0,100,0,4.0\n")
    sc = yaml.safe_load(scenario(tmp_path).read_text())
    sc["system"]["trace"] = str(tmp_path / "off.csv")
    for call in (fedsim.run, fedsim.schedule):
        with pytest.raises(fedsim.ScenarioError, match=r"^system.trace: no client is ever online in .*off.csv; "
                                                       r"policy wait would wait forever$"):
            call(sc, out=tmp_path / "out")
        assert not (tmp_path / "out").exists()
    assert parses == [(str(tmp_path / "off.csv"), 2)]
