"""Issue 37 item 4: with an ideal system (every node always online, equal speed, wait for all) a
Flower app on fedsim's grid gives what Flower's own ``run_simulation`` gives on the same app, data
and seeds: the same global arrays after R rounds and the same metrics, for FedAvg, FedProx,
FedAdam and a custom Strategy subclass (the example app's ``UniformAvg``).

Tolerance: the arrays are float32, and the two runs sum the replies in different orders (Flower's
order is the order its Ray workers finish; fedsim's is simulated arrival, then client index);
float32 addition is not associative, so each aggregation may differ by a few ulps (~1e-7
relative), and two rounds of training carry that on. rtol 1e-5, atol 1e-6 for arrays, and rel
1e-5 for the metrics: the clients compute their losses in float32 on those arrays (a first run
that asked 1e-9 of them failed on metrics up to 1.1e-7 relative apart: 2.2407506 vs 2.2407508). Measured (flwr 1.42): largest |difference| of the arrays
3.0e-8 (FedAvg, FedProx) to 4.7e-8 (FedAdam), the ServerApp-side accuracies equal. Everything else (which nodes, which batches, which steps) is
identical, so a real difference (one missing reply, one other step) is orders of magnitude larger.

One ``run_simulation`` (one Ray start) runs all four strategies one after another; so does one
fedsim run."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

NODES, ROUNDS = 3, 2
CONFIG = {"strategies": "fedavg,fedprox,fedadam,uniform", "num-server-rounds": ROUNDS, "min-nodes": NODES,
          "lr": 0.1, "seed": 0}
IDEAL = {"seed": 0, "data": {"clients": NODES}, "system": {"speed": 1.0},
         "round": {"policy": "wait", "local_steps": 10}}  # the app's own default


def _snapshot(results):
    return {name: (r.arrays.to_numpy_ndarrays(), {k: dict(v) for k, v in r.train_metrics_clientapp.items()},
                   {k: dict(v) for k, v in r.evaluate_metrics_clientapp.items()},
                   {k: dict(v) for k, v in r.evaluate_metrics_serverapp.items()})
            for name, r in results.items()}


@pytest.fixture(scope="module")
def both():
    # in a fresh process: Ray keeps process-wide state (its authentication token among it) from a
    # Ray session an earlier test of this pytest process opened and closed, and Flower's
    # run_simulation starts a new local instance that then refuses it (InvalidAuthToken)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(run_both).result()


def run_both():
    """(Flower's results, fedsim's results) of the four strategies."""
    logging.getLogger("flwr").setLevel(logging.WARNING)
    from flwr.app import Context, RecordDict
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.telemetry import EventType

    import fedsim.flower as ff
    from fedsim.flower.example import app

    app.RESULTS.clear()
    ctx = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config=dict(CONFIG))
    _run_simulation(num_supernodes=NODES, client_app=app.client_app, server_app=app.server_app,
                    backend_config={"client_resources": {"num_cpus": 1}}, server_app_context=ctx,
                    exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE)
    flower = _snapshot(app.RESULTS)
    app.RESULTS.clear()
    ff.run(app.server_app, app.client_app, IDEAL, run_config=dict(CONFIG))
    return flower, _snapshot(app.RESULTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedadam", "uniform"])
def test_same_arrays_and_metrics_as_run_simulation(both, name):
    flower, ours = both
    fa, ft, fe, fs = flower[name]
    oa, ot, oe, os_ = ours[name]
    assert len(fa) == len(oa) == 4
    for a, b in zip(fa, oa):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for mine, theirs in ((ot, ft), (oe, fe), (os_, fs)):
        assert mine.keys() == theirs.keys() == set(range(1, ROUNDS + 1)) | ({0} if mine is os_ else set())
        for r in theirs:
            assert mine[r].keys() == theirs[r].keys()
            for k in theirs[r]:
                assert mine[r][k] == pytest.approx(theirs[r][k], rel=1e-5, abs=1e-7)
    # training moved the model: the comparison is not of two untouched initial models
    assert max(float(np.abs(x).max()) for x in fa) > 0
    assert fs[ROUNDS]["accuracy"] > fs[0]["accuracy"]
