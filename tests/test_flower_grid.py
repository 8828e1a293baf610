"""Issue 37 items 1-3 on hand-made worlds: fedsim's Flower Grid delivers each message at its
simulated time, runs the ClientApp per node and returns the replies the round policy lets through.

World: 3 nodes with speeds 1, 2, 4 steps/s, latency 0.5 s per transfer, no network (unless a test
says so). A job of s steps on node c then replies at 0.5 + s / speed_c + 0.5, written out by hand
in each test. The ClientApp is numpy-only; what it reports is set per test."""

from __future__ import annotations

import logging
import math
import sys
import subprocess

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common.constant import ErrorCode  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

import fedsim.flower as ff  # noqa: E402
from fedsim.errors import ScenarioError  # noqa: E402
from fedsim.flower import NODE_ID_OFFSET, STEPS_KEY  # noqa: E402

logging.getLogger("flwr").setLevel(logging.WARNING)
SPEEDS = [1.0, 2.0, 4.0]


def world(round_, **system):
    return {"seed": 0, "data": {"clients": 3}, "system": {"speed": SPEEDS, "latency": 0.5, **system}, "round": round_}


def make_client(report=None, raise_on=()):
    """A ClientApp that records what it received and reports ``report(pid, config)`` as its metrics
    (default: the steps the key allows, as fedsim-steps)."""
    app, seen = ClientApp(), []

    @app.train()
    def train(msg: Message, context: Context):
        pid = context.node_config["partition-id"]
        cfg = msg.content["config"]
        seen.append((pid, context.node_config["num-partitions"], dict(cfg)))
        if pid in raise_on:
            raise RuntimeError("boom")
        metrics = report(pid, cfg) if report else {STEPS_KEY: int(cfg[STEPS_KEY]), "num-examples": 10}
        arrays = msg.content["arrays"]
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)}), reply_to=msg)

    return app, seen


def exchange(scenario, client, timeout=None, nbytes=4, rounds=1):
    """A ServerApp that sends one train message to every node online, ``rounds`` times; returns
    (grid run result, per-round list of (node, has_error, error code) in the order returned)."""
    server, got = ServerApp(), []

    @server.main()
    def main(grid, context):
        for _ in range(rounds):
            nodes = list(grid.get_node_ids())
            content = RecordDict({"arrays": ArrayRecord([np.zeros(nbytes // 4, np.float32)]),
                                  "config": ConfigRecord({"server-round": 1})})
            msgs = [Message(content, n, "train") for n in nodes]
            replies = grid.send_and_receive(msgs, timeout=timeout)
            got.append([(_node(m), m.has_error(), m.error.code if m.has_error() else None) for m in replies])
            grid_times.append(grid.now)

    grid_times = []

    def _node(m):
        if not m.has_error():
            return m.metadata.src_node_id - NODE_ID_OFFSET
        return ids[m.metadata.reply_to_message_id]

    ids = {}
    orig = ff.ClockGrid.push_messages

    def push(self, messages):
        out = orig(self, messages)
        for m in messages:
            ids[m.metadata.message_id] = m.metadata.dst_node_id - NODE_ID_OFFSET
        return out

    ff.ClockGrid.push_messages = push
    try:
        res = ff.run(server, client, scenario)
    finally:
        ff.ClockGrid.push_messages = orig
    return res, got, grid_times


def ends(res, k=0):
    return {o.client: (o.status, o.steps, o.end) for o in res.exchanges[k].outcomes}


def test_wait_replies_at_download_compute_upload_in_arrival_order():
    client, seen = make_client()
    res, got, now = exchange(world({"policy": "wait", "local_steps": 4}), client)
    # 0.5 + 4 / speed + 0.5
    assert ends(res) == {0: ("completed", 4, 5.0), 1: ("completed", 4, 3.0), 2: ("completed", 4, 2.0)}
    assert [g[0] for g in got[0]] == [2, 1, 0] and not any(g[1] for g in got[0])
    assert now == [5.0]
    # tau_i reaches the client under the documented key; partition ids map to fedsim's clients
    assert sorted(seen) == [(c, 3, {"server-round": 1, STEPS_KEY: 4}) for c in range(3)]


def test_deadline_lets_through_only_replies_by_the_deadline():
    client, _ = make_client()
    res, got, now = exchange(world({"policy": "deadline", "deadline": 3.5, "local_steps": 4}), client)
    assert [g[0] for g in got[0]] == [2, 1]  # node 0 (5.0 s) is past the deadline: missing, as in Flower
    assert now == [3.5]
    assert ends(res)[0] == ("dropped", 0, 3.5)


def test_the_strategys_timeout_is_a_deadline_too():
    client, _ = make_client()
    res, got, now = exchange(world({"policy": "wait", "local_steps": 4}), client, timeout=2.5)
    assert [g[0] for g in got[0]] == [2] and now == [2.5]


def test_window_allows_the_steps_that_fit_and_closes_at_the_window():
    client, seen = make_client()
    res, got, now = exchange(world({"policy": "window", "window": 4.0}), client)
    # steps between 0.5 and 4 - 0.5: floor(3 * speed) = 3, 6, 12; each then replies at exactly 4.0
    assert sorted((c, cfg[STEPS_KEY]) for c, _, cfg in seen) == [(0, 3), (1, 6), (2, 12)]
    assert ends(res) == {0: ("completed", 3, 4.0), 1: ("completed", 6, 4.0), 2: ("completed", 12, 4.0)}
    assert [g[0] for g in got[0]] == [0, 1, 2] and now == [4.0]


def test_overcommit_keeps_the_first_k_replies():
    client, _ = make_client()
    res, got, now = exchange(world({"policy": "overcommit", "local_steps": 4, "clients_per_round": 2}), client)
    assert [g[0] for g in got[0]] == [2, 1] and now == [3.0]


def test_billed_work_is_what_the_node_reports_not_what_it_was_allowed():
    # ignores the key, does 8 steps: 1 + 8 / speed
    client, _ = make_client(report=lambda pid, cfg: {STEPS_KEY: 8, "num-examples": 10})
    res, _, now = exchange(world({"policy": "wait", "local_steps": 4}), client)
    assert {c: e[2] for c, e in ends(res).items()} == {0: 9.0, 1: 5.0, 2: 3.0} and now == [9.0]
    # no steps metric: ceil(num-examples / algorithm.batch_size) = ceil(100 / 32) = 4 steps
    client, _ = make_client(report=lambda pid, cfg: {"num-examples": 100})
    res, _, _ = exchange(world({"policy": "wait", "local_steps": 2}), client)
    assert {c: (e[1], e[2]) for c, e in ends(res).items()} == {0: (4, 5.0), 1: (4, 3.0), 2: (4, 2.0)}


def test_network_bytes_are_the_messages_arrays():
    # 250 float32 = 1,000 bytes, as Flower sends them: .npy bytes, a 128-byte header first, 1,128
    # bytes; down at 8,000 bit/s: 1.128 s, back up at 4,000 bit/s: 2.256 s, no latency
    from flwr.app import Array

    assert len(Array(np.zeros(250, np.float32)).data) == 1128
    client, _ = make_client()
    sc = world({"policy": "wait", "local_steps": 4}, latency=0.0, network={"down": 8000, "up": 4000})
    res, _, _ = exchange(sc, client, nbytes=1000)
    got = {c: e[2] for c, e in ends(res).items()}
    assert got == pytest.approx({0: 1.128 + 4 + 2.256, 1: 1.128 + 2 + 2.256, 2: 1.128 + 1 + 2.256}, abs=1e-12)
    assert [(o.download, o.upload) for o in res.exchanges[0].outcomes] == [pytest.approx((1.128, 2.256))] * 3


def test_a_node_that_drops_out_is_an_error_reply_and_then_not_a_node():
    # node 1 goes offline at 1.0 (mid-compute) until 100
    client, _ = make_client()
    sc = world({"policy": "wait", "local_steps": 4}, availability=[[], [[1.0, 100.0]], []])
    res, got, now = exchange(sc, client, rounds=2)
    assert got[0] == [(1, True, ErrorCode.NODE_UNAVAILABLE), (2, False, None), (0, False, None)]
    assert ends(res)[1] == ("failed", 0, 1.0) and now[0] == 5.0
    assert sorted(o.client for o in res.exchanges[1].outcomes) == [0, 2]  # offline at 5.0: not listed


def test_a_clientapp_that_raises_is_an_error_reply_like_flowers():
    client, _ = make_client(raise_on=(0,))
    res, got, _ = exchange(world({"policy": "wait", "local_steps": 4}), client)
    assert got[0][0] == (0, True, ErrorCode.CLIENT_APP_RAISED_EXCEPTION)  # at 0.5 + 0.5 = 1.0, first
    assert ends(res)[0] == ("failed", 0, 1.0)


def test_fedavg_sleeps_on_the_simulated_clock_until_enough_nodes_are_online():
    # nodes 0 and 1 offline until 30 s; FedAvg needs 3 nodes: it waits (1 s sleeps) on the clock
    client, _ = make_client()
    server = ServerApp()

    @server.main()
    def main(grid, context):
        FedAvg(min_available_nodes=3, fraction_evaluate=0.0).start(
            grid=grid, initial_arrays=ArrayRecord([np.zeros(1, np.float32)]), num_rounds=1)

    sc = world({"policy": "wait", "local_steps": 4}, availability=[[[0.0, 30.0]], [[0.0, 30.0]], []])
    res = ff.run(server, client, sc)
    assert res.exchanges[0].start == 30.0
    # FedAvg sized its sample when one node was online: max(int(1 * 1.0), min_train_nodes=2) = 2
    chosen = [o.client for o in res.exchanges[0].outcomes]
    assert len(chosen) == 2 and res.exchanges[0].available == 3
    assert math.isclose(res.sim_time, 30 + 0.5 + 4 / min(SPEEDS[c] for c in chosen) + 0.5)


def test_run_folder_and_cli(tmp_path, capsys):
    from fedsim.cli import main

    mod = tmp_path / "tiny_flower_app.py"
    mod.write_text(
        "import numpy as np\n"
        "from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict\n"
        "from flwr.clientapp import ClientApp\n"
        "from flwr.serverapp import ServerApp\n"
        "from flwr.serverapp.strategy import FedAvg\n"
        "client = ClientApp()\n"
        "@client.train()\n"
        "def t(msg, ctx):\n"
        "    s = int(msg.content['config']['fedsim-steps'])\n"
        "    return Message(RecordDict({'arrays': msg.content['arrays'], 'metrics': MetricRecord({'num-examples': 1 + ctx.node_config['partition-id'], 'fedsim-steps': s})}), reply_to=msg)\n"
        "server = ServerApp()\n"
        "@server.main()\n"
        "def m(grid, ctx):\n"
        "    FedAvg(min_available_nodes=3, fraction_evaluate=0.0).start(grid=grid, initial_arrays=ArrayRecord([np.zeros(2, np.float32)]), num_rounds=int(ctx.run_config['rounds']),\n"
        "        evaluate_fn=lambda r, a: MetricRecord({'loss': float(r), 'accuracy': 0.5}))\n")
    sc = tmp_path / "sc.yaml"
    sc.write_text("name: tiny\ndata: {clients: 3}\nsystem: {speed: [1.0, 2.0, 4.0], latency: 0.5}\n"
                  "round: {policy: wait, local_steps: 4}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        out = tmp_path / "run"
        assert main(["flower", str(sc), "--server-app", "tiny_flower_app:server", "--client-app", "tiny_flower_app:client",
                     "--out", str(out), "--run-config", "rounds=2"]) == 0
    finally:
        sys.path.remove(str(tmp_path))
    rounds = (out / "rounds.csv").read_text().splitlines()
    assert rounds[0].split(",")[:10] == ["round", "sim_time", "participants", "tau_mean", "tau_min", "tau_max",
                                          "available", "kind", "server_round", "start"]
    assert "train.fedsim-steps" in rounds[0]  # the strategy's aggregated MetricRecord, as columns
    assert [r.split(",")[1] for r in rounds[1:]] == ["5.0", "10.0"]
    assert len((out / "clients.csv").read_text().splitlines()) == 1 + 6
    # the ServerApp-side evaluations against simulated time: before round 1 (t = 0, no exchange yet:
    # round -1), after round 1 (t = 5) and round 2 (t = 10), in fedsim's evals.csv columns
    assert (out / "evals.csv").read_text().splitlines() == [
        "sim_time,round,test_loss,test_acc,train_loss", "0.0,-1,0.0,0.5,", "5.0,0,1.0,0.5,", "10.0,1,2.0,0.5,"]
    # a scenario alone never imports code: the apps are flags; --resume is refused in one line
    capsys.readouterr()
    assert main(["flower", str(sc), "--server-app", "x:y", "--client-app", "x:y", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be resumed" in err
    assert main(["flower", str(sc), "--server-app", "nomodule_here:y", "--client-app", "x:y"]) == 2
    assert "--server-app" in capsys.readouterr().err


def test_refused_inputs_name_the_field():
    client, _ = make_client()
    with pytest.raises(ScenarioError, match="data.clients"):
        ff.grid_for({"round": {"policy": "wait", "local_steps": 1}}, client)
    with pytest.raises(ScenarioError, match="round.policy"):
        ff.grid_for({"data": {"clients": 2}, "round": {"policy": "async", "concurrency": 1, "local_steps": 1}}, client)
    with pytest.raises(ScenarioError, match="server_app"):
        ff.run(ServerApp(), client, world({"policy": "wait", "local_steps": 1}))


def test_core_fedsim_never_imports_flwr():
    code = ("import sys, fedsim\n"
            "fedsim.run({'name': 'q', 'rounds': 2, 'data': {'name': 'quadratic', 'centers': [[1.0], [3.0]]},"
            " 'round': {'policy': 'wait', 'local_steps': 2}, 'algorithm': {'name': 'fedavg', 'lr': 0.1, 'batch_size': 1}})\n"
            "import fedsim.cli, fedsim.runner, fedsim.clock, fedsim.api\n"
            "assert 'flwr' not in sys.modules, 'flwr imported'\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_node_ids_are_offset_client_indices():
    assert NODE_ID_OFFSET == 1000  # docs/flower.md states it
    server, ids = ServerApp(), []

    @server.main()
    def main(grid, context):
        ids.append(list(grid.get_node_ids()))

    ff.run(server, make_client()[0], world({"policy": "wait", "local_steps": 1}))
    assert ids == [[1000, 1001, 1002]]


def _evaluate_exchange(scenario, report):
    app, seen = ClientApp(), []

    @app.evaluate()
    def evaluate(msg, context):
        seen.append(dict(msg.content["config"]))
        return Message(RecordDict({"metrics": MetricRecord(report)}), reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid, context):
        content = RecordDict({"arrays": ArrayRecord([np.zeros(1, np.float32)]), "config": ConfigRecord({"a": 1})})
        grid.send_and_receive([Message(content, n, "evaluate") for n in grid.get_node_ids()])

    return ff.run(server, app, scenario), seen


def test_an_evaluate_reply_is_billed_its_transfers_and_its_reported_steps():
    sc = world({"policy": "wait", "local_steps": 4})
    res, seen = _evaluate_exchange(sc, {"num-examples": 100})  # no steps reported: transfers only
    assert {c: e[2] for c, e in ends(res).items()} == {0: 1.0, 1: 1.0, 2: 1.0}
    assert seen == [{"a": 1}] * 3  # no fedsim-steps in an evaluate message
    res, _ = _evaluate_exchange(sc, {"num-examples": 100, STEPS_KEY: 2})  # 0.5 + 2 / speed + 0.5
    assert {c: e[2] for c, e in ends(res).items()} == {0: 3.0, 1: 2.0, 2: 1.5}
    # under a window an evaluate exchange closes at its last reply, not at the window's end
    res, _ = _evaluate_exchange(world({"policy": "window", "window": 4.0}), {"num-examples": 100, STEPS_KEY: 2})
    assert res.sim_time == 3.0


def test_a_window_with_no_room_for_a_step_sends_nothing():
    client, seen = make_client()
    # the strategy's timeout of 1 s bounds the 4 s window; 0.5 down + 0.5 up fill it
    res, got, now = exchange(world({"policy": "window", "window": 4.0}), client, timeout=1.0)
    assert seen == [] and got == [[]] and now == [1.0]
    assert {o.status for o in res.exchanges[0].outcomes} == {"dropped"}


def test_partial_deadline_allows_what_fits_before_the_last_upload():
    client, seen = make_client()
    sc = world({"policy": "deadline", "deadline": 3.5, "local_steps": 4, "on_deadline": "partial"})
    res, got, now = exchange(sc, client)
    # min(4, floor((3.5 - 0.5 - 0.5) * speed)) = 2, 4, 4; replies at 3.0, 3.0, 2.0
    assert sorted((c, cfg[STEPS_KEY]) for c, _, cfg in seen) == [(0, 2), (1, 4), (2, 4)]
    assert ends(res) == {0: ("completed", 2, 3.0), 1: ("completed", 4, 3.0), 2: ("completed", 4, 2.0)}
    assert now == [3.0]


def test_the_servers_aggregation_time_follows_a_train_exchange():
    client, _ = make_client()
    sc = world({"policy": "wait", "local_steps": 4}, server={"aggregate": 2.0})
    res, _, now = exchange(sc, client, rounds=2)
    # 5.0 + 3 updates x 2.0 s; the second exchange opens there
    assert now[0] == 11.0 and res.exchanges[1].start == 11.0


def test_python_random_is_seeded_with_the_scenarios_seed():
    import random

    server, draws = ServerApp(), []

    @server.main()
    def main(grid, context):
        draws.append(random.random())

    for seed in (3, 3, 4):
        sc = world({"policy": "wait", "local_steps": 1})
        sc["seed"] = seed
        ff.run(server, make_client()[0], sc)
    assert draws == [random.Random(3).random(), random.Random(3).random(), random.Random(4).random()]


def test_push_then_pull_is_one_exchange():
    client, _ = make_client()
    server, got = ServerApp(), []

    @server.main()
    def main(grid, context):
        content = RecordDict({"arrays": ArrayRecord([np.zeros(1, np.float32)]), "config": ConfigRecord({})})
        ids = list(grid.push_messages([Message(content, n, "train") for n in grid.get_node_ids()]))
        got.append(len(list(grid.pull_messages(ids))))
        got.append(grid.now)

    res = ff.run(server, client, world({"policy": "wait", "local_steps": 4}))
    assert got == [3, 5.0] and len(res.exchanges) == 1


def test_a_device_trace_gives_speeds_and_bandwidths(tmp_path):
    # FedScale's device layout: a step is 3 x batch 32 x sample_seconds (0.96, 1.92, 0.48 s); a
    # transfer is kbit / kbps with kbit = 1,128 bytes x 8 / 1024 = 8.8125 (down 8 kbps: 1.1015625 s,
    # up 4 kbps: 2.203125 s); 2 steps each, no latency
    trace = tmp_path / "devices.csv"
    trace.write_text("client,start,end,sample_seconds,down_kbps,up_kbps\n"
                     "0,0,100000,0.01,8,4\n1,0,100000,0.02,8,4\n2,0,100000,0.005,8,4\n")
    client, _ = make_client()
    sc = {"seed": 0, "data": {"clients": 3}, "system": {"trace": str(trace)},
          "round": {"policy": "wait", "local_steps": 2}}
    res, _, _ = exchange(sc, client, nbytes=1000)
    got = {c: e[2] for c, e in ends(res).items()}
    assert got == pytest.approx({0: 1.1015625 + 1.92 + 2.203125, 1: 1.1015625 + 3.84 + 2.203125,
                                 2: 1.1015625 + 0.96 + 2.203125}, abs=1e-9)


# ----------------------------------------------------------------------------- the server's link
# docs/flower.md, "The server's link": within one exchange the downloads share system.server.down
# and the replies system.server.up as on fedsim's clock (docs/clock.md, "The server's link").
# A Flower array of n float32 is 4 n + 128 bytes (.npy header): 250 floats are 1,128 bytes =
# 9,024 bits, 1,000 floats 4,128 bytes = 33,024 bits.

def two_nodes(speed, network, server, latency=0.5, **round_):
    return {"seed": 0, "data": {"clients": 2},
            "system": {"speed": speed, "latency": latency, "network": network, "server": server},
            "round": {"policy": "wait", "local_steps": 4, **round_}}


def test_two_downloads_share_the_servers_downlink_by_hand():
    """2 nodes, own links 1e6 bit/s each way, server down 1e6 bit/s, latency 0.5, speeds 1 and 2,
    4 steps, B = 1,128 bytes each way. Both messages' 8 B bits enter the downlink at 0.5; the fair
    level solves min(1e6, L) + min(1e6, L) = 1e6: L = 0.5e6 each, so both downloads end at
    0.5 + 8 B / 0.5e6 = 0.5 + 16 B / 1e6 = 0.5 + 0.018048 = 0.518048 (alone: 0.509024). The
    replies are alone (no server up): 0.5 + 9,024 / 1e6 = 0.509024. Node 0 replies at
    0.518048 + 4 / 1 + 0.509024 = 5.027072, node 1 at 0.518048 + 4 / 2 + 0.509024 = 3.027072."""
    client, seen = make_client()
    net = {"down": 1e6, "up": 1e6}
    res, got, now = exchange(two_nodes([1.0, 2.0], net, {"down": 1e6}), client, nbytes=1000)
    assert ends(res) == {0: ("completed", 4, pytest.approx(5.027072, abs=1e-12)),
                         1: ("completed", 4, pytest.approx(3.027072, abs=1e-12))}
    assert [(o.download, o.upload) for o in res.exchanges[0].outcomes] == \
        [pytest.approx((0.518048, 0.509024), abs=1e-12)] * 2
    assert [g[0] for g in got[0]] == [1, 0] and now == [pytest.approx(5.027072, abs=1e-12)]
    assert sorted(cfg[STEPS_KEY] for _, _, cfg in seen) == [4, 4]
    # without the server's link each download is alone: 0.509024
    res, _, _ = exchange(two_nodes([1.0, 2.0], net, {"aggregate": 0.0}), client, nbytes=1000)
    assert [o.download for o in res.exchanges[0].outcomes] == [pytest.approx(0.509024, abs=1e-12)] * 2


def _sized_replies(floats):
    """A ClientApp whose reply carries ``floats[pid]`` float32 (its own size per node), 1 step."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context):
        pid = context.node_config["partition-id"]
        arrays = ArrayRecord([np.zeros(floats[pid], np.float32)])
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({STEPS_KEY: 1})}), reply_to=msg)

    return app


def test_a_reply_that_ends_frees_the_servers_uplink_for_the_other():
    """2 nodes at speed 1, 1 step, latency 0.5; downloads alone at 8e6 bit/s of 9,024 bits:
    0.5 + 0.001128, computes end at 1.501128 for both. Replies: node 0 9,024 bits on its own
    1e6 bit/s uplink, node 1 33,024 bits on 4e6 bit/s; server up 2e6 bit/s. Both enter the link
    one latency later, at 2.001128: min(1e6, L) + min(4e6, L) = 2e6 gives L = 1e6, both at 1e6.
    Node 0 is through after 9,024 / 1e6 = 0.009024 s: at 2.010152. Node 1 has moved 9,024 bits,
    has 24,000 left and now takes min(4e6, 2e6) = 2e6 alone: 0.012 s more, at 2.022152 (upload
    0.521024 s). Alone it would take 0.5 + 33,024 / 4e6 = 0.508256 s; sharing at 1e6 throughout
    0.5 + 0.033024."""
    net = {"down": 8e6, "up": [1e6, 4e6]}
    res, got, now = exchange(two_nodes([1.0, 1.0], net, {"up": 2e6}, local_steps=1), _sized_replies([250, 1000]),
                             nbytes=1000)
    assert ends(res) == {0: ("completed", 1, pytest.approx(2.010152, abs=1e-12)),
                         1: ("completed", 1, pytest.approx(2.022152, abs=1e-12))}
    assert [o.upload for o in res.exchanges[0].outcomes] == [pytest.approx(0.509024, abs=1e-12),
                                                             pytest.approx(0.521024, abs=1e-12)]
    assert [g[0] for g in got[0]] == [0, 1] and now == [pytest.approx(2.022152, abs=1e-12)]


def test_a_reply_that_starts_later_shares_only_while_both_are_on_the_link():
    """As above but speeds 1 and 4 and 1,000 floats both ways (33,024 bits), own uplinks 1e6 and
    4e6, server up 2e6, latency 0: downloads at 8e6 end at 0.004128; computes end at 1.004128
    (node 0) and 0.254128 (node 1). Node 1's reply is alone on the link at min(4e6, 2e6) = 2e6:
    through after 0.016512 s, at 0.27064, before node 0's starts; node 0's then moves alone at its
    own 1e6: 1.004128 + 0.033024 = 1.037152. Nothing overlaps: each as if alone on a 2e6 link."""
    net = {"down": 8e6, "up": [1e6, 4e6]}
    res, _, _ = exchange(two_nodes([1.0, 4.0], net, {"up": 2e6}, latency=0.0, local_steps=1),
                         _sized_replies([1000, 1000]), nbytes=4000)
    assert {c: e[2] for c, e in ends(res).items()} == pytest.approx({0: 1.037152, 1: 0.27064}, abs=1e-12)


def test_a_node_that_drops_out_mid_download_leaves_the_link_to_the_other():
    """Server down 1e6 shared by 2 nodes on 1e6 own links, latency 0, 4,128-byte messages
    (33,024 bits each), node 0 offline from 0.01: both move at 0.5e6 until 0.01 (5,000 bits
    each); node 0's download is cut (an error reply at 0.01) and node 1's 28,024 bits left move at
    1e6: it ends at 0.038024 (sharing throughout: 0.066048)."""
    sc = two_nodes([1.0, 1.0], {"down": 1e6, "up": 1e9}, {"down": 1e6}, latency=0.0, local_steps=1)
    sc["system"]["availability"] = [[[0.01, 100.0]], []]
    client, seen = make_client()
    res, got, _ = exchange(sc, client, nbytes=4000)
    out = res.exchanges[0].outcomes
    assert (out[0].status, out[0].end) == ("failed", 0.01) and got[0][0] == (0, True, ErrorCode.NODE_UNAVAILABLE)
    assert out[1].status == "completed" and out[1].download == pytest.approx(0.038024, abs=1e-12)
    assert [pid for pid, _, _ in seen] == [1]  # node 0's ClientApp never ran


def test_a_window_fits_steps_after_the_shared_download():
    """Window 1, latency 0, speed 100, 2 nodes on 1e6 own links, server down 1e6, 1,128-byte
    messages: both downloads end at 16 x 1,128 / 1e6 = 0.018048 (alone 0.009024); the upload
    of as many bytes alone takes 0.009024, so each fits floor((1 - 0.009024 - 0.018048) x 100) =
    97 steps (alone it would be floor((1 - 0.018048) x 100) = 98)."""
    client, seen = make_client()
    sc = two_nodes([100.0, 100.0], {"down": 1e6, "up": 1e6}, {"down": 1e6}, latency=0.0)
    sc["round"] = {"policy": "window", "window": 1.0}
    exchange(sc, client, nbytes=1000)
    assert [cfg[STEPS_KEY] for _, _, cfg in seen] == [97, 97]


@pytest.mark.parametrize("round_", [
    {"policy": "wait", "local_steps": 2},
    {"policy": "window", "window": 3.0},
    {"policy": "deadline", "deadline": 2.0, "local_steps": 4, "on_deadline": "partial"},
    {"policy": "deadline", "deadline": 2.0, "local_steps": 4},
], ids=["wait", "window", "partial", "deadline"])
def test_the_flower_grid_equals_fedsims_own_clock_on_a_shared_link(round_):
    """The same scenario on fedsim's clock (``fedsim.schedule``, i.e. ``--schedule-only``) and on
    the Flower grid: 3 nodes (speeds 1, 2, 4), a shared server link both ways, unequal own links
    (down 3e5, 0.5e5, 2e5: node 1 capped below the fair level of 2.5e5 / 3), node 1 offline in
    [1, 3.5) (mid-job in round 1, absent in round 2), 2 rounds. fedsim bills the model's bytes: a
    logreg on synthetic data has 610 float32 = 2,440 bytes; a Flower ArrayRecord of the same 610
    float32 sends 2,440 + 128 (.npy header) = 2,568 bytes, so ``system.payload_bytes: 2568`` makes
    fedsim bill what the Flower app sends. Every round's close and every messaged node's status,
    steps, end, download and upload are then equal (to 1e-12 s; measured: equal to the bit). fedsim
    lists a node offline at the open as an ``offline`` row; the Flower strategy sees only the
    online nodes (get_node_ids) and sends it nothing."""
    import fedsim
    from flwr.app import Array

    assert len(Array(np.zeros(610, np.float32)).data) == 2440 + 128
    system = {"speed": [1.0, 2.0, 4.0], "latency": 0.1, "payload_bytes": 2568,
              "network": {"down": [3e5, 0.5e5, 2e5], "up": [1e5, 3e5, 2e5]}, "server": {"down": 2.5e5, "up": 2e5},
              "availability": [[], [[1.0, 3.5]], []]}
    sc = {"name": "link", "seed": 0, "rounds": 2, "data": {"name": "synthetic", "clients": 3},
          "model": {"name": "logreg"}, "system": system, "round": round_,
          "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8}}
    native = fedsim.schedule(sc)
    res, _, _ = exchange(sc, make_client()[0], nbytes=2440, rounds=2)
    assert [e.close for e in res.exchanges] == pytest.approx(list(native.rounds["sim_time"]), abs=1e-12)
    mine = [(k, o.client, o.status, o.steps, o.end, o.download, o.upload)
            for k, e in enumerate(res.exchanges) for o in sorted(e.outcomes, key=lambda o: o.client)]
    rows = native.clients[native.clients["status"] != "offline"]
    theirs = [tuple(r) for r in rows[["round", "client", "status", "steps", "end", "download", "upload"]]
              .itertuples(index=False)]
    assert [m[:4] for m in mine] == [t[:4] for t in theirs] and len(mine) == 5
    assert [m[4:] for m in mine] == [pytest.approx(t[4:], abs=1e-12) for t in theirs]
    # the links are shared: the downloads took longer than alone (latency + bits / own link)
    assert all(o.download > 0.1 + 2568 * 8 / system["network"]["down"][o.client] + 1e-6
               for o in res.exchanges[1].outcomes)


def test_a_window_with_no_room_after_a_shared_download_drops_the_node_there():
    """As above with the strategy's timeout 0.02 s bounding the window: the uploads alone need
    0.009024, so the last upload start is 0.010976, before the shared downloads end (0.018048):
    no step fits. Both messages took their share of the link (downloads 0.018048) and the nodes
    are dropped there; no ClientApp runs, no reply."""
    client, seen = make_client()
    sc = two_nodes([100.0, 100.0], {"down": 1e6, "up": 1e6}, {"down": 1e6}, latency=0.0)
    sc["round"] = {"policy": "window", "window": 1.0}
    res, got, now = exchange(sc, client, nbytes=1000, timeout=0.02)
    assert seen == [] and got == [[]] and now == [0.02]
    assert [(o.status, o.end, o.download) for o in res.exchanges[0].outcomes] == \
        [("dropped", pytest.approx(0.018048, abs=1e-12), pytest.approx(0.018048, abs=1e-12))] * 2


def test_the_docs_state_the_server_link_rule_and_no_longer_refuse_it():
    """docs/flower.md's rule for the server's link, with its worked numbers (checked by
    test_two_downloads_share_the_servers_downlink_by_hand: 0.5 + 16 x 1,128 / 1e6 = 0.518048),
    and its refusal list without system.server; a server link is accepted by the grid."""
    from pathlib import Path

    doc = " ".join((Path(__file__).resolve().parents[1] / "docs" / "flower.md").read_text().split())
    assert "the transfers of one exchange share it as on fedsim's own clock" in doc
    assert "max-min fair share of `down`, at most the node's own downlink" in doc
    assert "each download moves at 0.5 Mbit/s and ends at latency + 16 B / 10^6 s" in doc
    assert "the same times on the Flower grid as `fedsim run --schedule-only`" in doc
    assert "128-byte `.npy` header" in doc
    refused = doc.split("Not modelled on the Flower grid")[1].split("## ")[0]
    assert "system.server" not in refused and "system.on_outage: resume" in refused
    assert 0.5 + 16 * 1128 / 1e6 == pytest.approx(0.518048, abs=1e-15)
    client, _ = make_client()
    ff.grid_for(two_nodes([1.0, 1.0], {"down": 1e6, "up": 1e6}, {"down": 1e6, "up": 1e6}), client)
