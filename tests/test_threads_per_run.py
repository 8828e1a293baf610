"""info.yaml's core-slot record is the run's own (issue 35 item 7): ``held_rounds`` and
``waited_for_cores_s`` were counted per process, so the second cell of a comparison run in one
process (``--jobs 1``) said it held the first cell's rounds too, and a Ray worker that ran one
cell before another wrote other bytes than a fresh process."""

from __future__ import annotations

import torch

from fedsim.engine import threads as T
from fedsim.engine.workload import build_workload
from fedsim.scenario import parse_scenario


def test_set_threads_starts_the_runs_record_afresh(monkeypatch, tmp_path):
    monkeypatch.setattr(T, "SLOTS", tmp_path)
    monkeypatch.setattr(T, "_affinity", lambda: {0, 1})
    monkeypatch.setattr(T, "usable_cores", lambda: 2)
    monkeypatch.setattr(T, "_state", dict(T._state, cpus=None, files={}, held=False, waited=0.0, rounds=0, dir=None,
                                          bypass=None, queue=None))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("FEDSIM_HOLD_CORES", raising=False)
    sc = parse_scenario({"data": {"name": "quadratic", "centers": [[0.0], [1.0]]},
                         "round": {"policy": "wait", "local_steps": 1}})
    work = build_workload(sc, torch.device("cpu"), torch.float32)
    n0 = torch.get_num_threads()
    try:
        for run in range(2):  # two runs in one process, three rounds each
            T.set_threads(None, work, 1)
            for _ in range(3):
                with T.hold_cores(torch.device("cpu")):
                    pass
            info = T.threads_info()
            assert (info["held_rounds"], info["core_slots"]) == (3, "turns"), run
    finally:
        torch.set_num_threads(n0)
