"""Issue 17: a piece registered again with ``replace=True`` takes effect for the next resolution
and the next run (an algorithm looks its parts up once, when it is built; nothing is cached across
builds)."""

from __future__ import annotations

import pandas as pd

import fedsim
from fedsim import registries
from fedsim.algorithms.algorithm import algorithm
from fedsim.algorithms.parts import Aggregation
from fedsim.scenario import parse_scenario

SCENARIO = {
    "name": "regrun", "seed": 0, "rounds": 2,
    "data": {"name": "synthetic", "clients": 6},
    "system": {"speed": {"dist": "lognormal", "median": 4.0, "sigma": 0.8}},
    "round": {"policy": "window", "window": 3.0},
    "algorithm": {"name": "fedavg", "lr": 0.05},
}


def _cleanup(*pairs):
    for reg, name in pairs:
        reg.unregister(name)


def test_a_replaced_preset_and_part_are_used_by_the_next_resolution():
    first, second = (lambda spec: lambda upd: "first"), (lambda spec: lambda upd: "second")
    try:
        fedsim.register_aggregation("agg_replaced", Aggregation(first))
        fedsim.register_algorithm("alg_replaced", {"aggregation": "agg_replaced", "server_lr": 0.5})
        sc = parse_scenario({**SCENARIO, "algorithm": {"name": "alg_replaced"}})
        assert sc.algorithm_spec.server_lr == 0.5
        assert algorithm(sc.algorithm_spec).aggregate(None) == "first"
        fedsim.register_algorithm("alg_replaced", {"aggregation": "agg_replaced", "server_lr": 0.25}, replace=True)
        assert sc.algorithm_spec.server_lr == 0.25  # the same (equal) section resolves anew
        fedsim.register_aggregation("agg_replaced", Aggregation(second), replace=True)
        assert algorithm(sc.algorithm_spec).aggregate(None) == "second"  # the same spec builds anew
    finally:
        _cleanup((registries.ALGORITHMS, "alg_replaced"), (registries.AGGREGATIONS, "agg_replaced"))


def test_a_replaced_algorithm_takes_effect_for_the_next_run():
    try:
        fedsim.register_algorithm("run_replaced", {})  # FedAvg
        before = fedsim.run(SCENARIO, algorithm="run_replaced").rounds
        fedsim.register_algorithm("run_replaced", {"aggregation": "nova"}, replace=True)  # FedNova
        after = fedsim.run(SCENARIO, algorithm="run_replaced").rounds
    finally:
        registries.ALGORITHMS.unregister("run_replaced")
    fedavg = fedsim.run(SCENARIO).rounds
    fednova = fedsim.run({**SCENARIO, "algorithm": {"name": "fednova", "lr": 0.05}}).rounds
    assert not fedavg["train_loss"].equals(fednova["train_loss"])  # the two differ on this scenario
    pd.testing.assert_frame_equal(before, fedavg)
    pd.testing.assert_frame_equal(after, fednova)
