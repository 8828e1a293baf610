"""Device-trace replay: hand-made traces with exact expected rows, and every malformed case."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from fedsim.clock import Clock, ClockError, Population, TraceError, load_trace
from fedsim.scenario import RoundConfig, ScenarioError, SystemConfig

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "scenarios" / "traces" / "example.csv"
HEADER = "client,start,end,online,speed\n"

# client 0: speed 1 in [0, 4), speed 3 in [4, 6), offline in [6, 8), period 8
# client 1: speed 2 in [0, 10), period 10 (always online when cycled)
TWO = HEADER + "0,0,4,1,1\n0,4,6,1,3\n0,6,8,0,0\n1,0,10,1,2\n"


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def clock(path, m: int, repeat: str = "cycle", latency: float = 0.5, **round_kw) -> Clock:
    system = SystemConfig(latency=latency, trace=str(path), trace_repeat=repeat)
    return Clock(system.value(), RoundConfig(**round_kw).value(32), Population.of([1] * m), seed=0)


def rows(ck: Clock, n: int) -> list[tuple]:
    return [(j.round, j.client, j.status, j.steps, j.start, j.end) for p in itertools.islice(ck.plans(), n)
            for j in p.jobs]


def assert_rows(got, expected):
    assert len(got) == len(expected), got
    for g, e in zip(got, expected):
        assert g[:4] == e[:4], (g, e)
        assert g[4:] == pytest.approx(e[4:], rel=1e-12, abs=1e-12), (g, e)


# ---------------------------------------------------------------------------- replay
def test_window_replay_with_time_varying_speed_and_outages(tmp_path):
    ck = clock(write(tmp_path, TWO), 2, policy="window", window=5.0)
    assert ck.speeds.tolist() == pytest.approx([(4 * 1 + 2 * 3) / 6, 2.0])  # mean speed while online
    assert_rows(rows(ck, 5), [
        # [0.5, 4.5]: 3.5 steps at speed 1, then 0.5 s at speed 3 -> 5 steps, done at 4.5
        (0, 0, "completed", 5, 0.0, 5.0),
        (0, 1, "completed", 8, 0.0, 5.0),
        # client 0 goes offline at 6
        (1, 0, "failed", 0, 5.0, 6.0),
        (1, 1, "completed", 8, 5.0, 10.0),
        # cycled: t = 10 is 2 in client 0's period; it goes offline at 14 (= 6 + 8) mid-job
        (2, 0, "failed", 0, 10.0, 14.0),
        (2, 1, "completed", 8, 10.0, 15.0),
        (3, 0, "offline", 0, 15.0, 15.0),  # 15 is 7 in the period: offline
        (3, 1, "completed", 8, 15.0, 20.0),
        (4, 0, "failed", 0, 20.0, 22.0),
        (4, 1, "completed", 8, 20.0, 25.0),
    ])


def test_wait_replay_integrates_speed_over_changes(tmp_path):
    ck = clock(write(tmp_path, TWO), 2, policy="wait", local_steps=6)
    t1 = 4.0 + 2.5 / 3 + 0.5  # round 1 opens when client 0 uploads
    t2_open = t1 + 0.5 + 3.0 + 0.5  # client 1's round-1 upload
    # round 2: client 0 at 9.33.. = 1.33.. in its period: speed 1 until 12, then speed 3
    c0_end = 12.0 + (6 - (12.0 - (t2_open + 0.5))) / 3 + 0.5
    assert_rows(rows(ck, 3), [
        (0, 0, "completed", 6, 0.0, 4.0 + 2.5 / 3 + 0.5),  # 3.5 steps at 1, 2.5 at 3
        (0, 1, "completed", 6, 0.0, 4.0),
        (1, 0, "failed", 0, t1, 6.0),
        (1, 1, "completed", 6, t1, t2_open),
        (2, 0, "completed", 6, t2_open, c0_end),
        (2, 1, "completed", 6, t2_open, t2_open + 4.0),
    ])


def test_repeat_last_versus_cycle(tmp_path):
    # online speed 1 in [0, 2), offline [2, 4), online speed 2 in [4, 6)
    path = write(tmp_path, HEADER + "0,0,2,1,1\n0,2,4,0,0\n0,4,6,1,2\n")
    assert_rows(rows(clock(path, 1, "last", policy="window", window=5.0), 3), [
        (0, 0, "failed", 0, 0.0, 2.0),
        (1, 0, "completed", 8, 5.0, 10.0),  # after 6: the last interval forever (speed 2)
        (2, 0, "completed", 8, 10.0, 15.0),
    ])
    assert_rows(rows(clock(path, 1, "cycle", policy="window", window=5.0), 4), [
        (0, 0, "failed", 0, 0.0, 2.0),
        (1, 0, "failed", 0, 5.0, 8.0),  # 8 = 2 of the second period: offline
        (2, 0, "failed", 0, 10.0, 14.0),
        (3, 0, "offline", 0, 15.0, 15.0),
    ])


def test_long_job_spans_many_periods(tmp_path):
    # always online, speed 1 then 3, period 2: 4 steps per period
    path = write(tmp_path, HEADER + "0,0,1,1,1\n0,1,2,1,3\n")
    # 100 steps from 0.5: 0.5 + 3 (to t = 2), 24 periods (96, to t = 50), 0.5 at speed 1
    assert_rows(rows(clock(path, 1, policy="wait", local_steps=100), 1), [(0, 0, "completed", 100, 0.0, 51.0)])
    # the window integrates the same way: [0.5, 49.5] = 3.5 (to 2) + 23 * 4 (to 48) + 1 + 1.5 = 98
    assert rows(clock(path, 1, policy="window", window=50.0), 1)[0][3] == 98


def test_trace_replaces_speed_and_async_runs(tmp_path):
    path = write(tmp_path, TWO)
    system = SystemConfig(speed=100.0, latency=0.5, trace=str(path))
    ck = Clock(system.value(), RoundConfig(policy="async", local_steps=2, concurrency=2, buffer=1).value(32),
               Population.of([1, 1]), seed=0)
    plans = list(itertools.islice(ck.plans(), 20))
    assert ck.speeds.tolist() == pytest.approx([10 / 6, 2.0])
    assert {j.status for p in plans for j in p.jobs} == {"completed", "failed"}
    assert plans[0].jobs[0].end == 0.5 + 2 / 2 + 0.5  # client 1 at speed 2, not 100


def test_nobody_ever_online_again_is_a_clock_error(tmp_path):
    path = write(tmp_path, HEADER + "0,0,2,1,1\n0,2,4,0,0\n")
    with pytest.raises(ClockError, match="none ever comes online again"):
        rows(clock(path, 1, "last", policy="wait", local_steps=5), 3)
    with pytest.raises(ClockError):
        rows(clock(path, 1, "last", policy="async", local_steps=5, concurrency=1), 3)


def test_comments_blank_lines_and_column_order(tmp_path):
    text = "# a comment\n\nspeed,online,end,start,client\n2,1,10,0,0\n\n# more\n0,0,20,10,0\n"
    tr = load_trace(write(tmp_path, text), 1)
    (c,) = tr.clients
    assert c.bp.tolist() == [0, 10, 20] and c.online.tolist() == [True, False] and c.speed.tolist() == [2, 0]
    # gaps and time before the first interval are offline
    (g,) = load_trace(write(tmp_path, HEADER + "0,5,10,1,1\n0,20,30,1,1\n", "g.csv"), 1).clients
    assert g.bp.tolist() == [0, 5, 10, 20, 30] and g.online.tolist() == [False, True, False, True]


# ---------------------------------------------------------------------------- the example trace
def test_example_trace_is_the_scripts_output_and_runs():
    spec = importlib.util.spec_from_file_location("make_example_trace", ROOT / "scripts" / "make_example_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shown = ["--clients 8", "--day 2400", "--slots 24", "--seed 0"]
    assert mod.render(mod.make_trace(), shown) == EXAMPLE.read_text()
    trace = load_trace(EXAMPLE, 8)
    assert len(trace.clients) == 8 and all(c.period == 2400 for c in trace.clients)
    ck = Clock(SystemConfig(latency=1.0, trace=str(EXAMPLE)).value(),
               RoundConfig(policy="window", window=30.0, clients_per_round=4).value(32), Population.of([1] * 8), seed=0)
    plans = list(itertools.islice(ck.plans(), 100))
    assert "completed" in {j.status for p in plans for j in p.jobs}
    assert min(p.available for p in plans) < 8  # some clients offline at some opens (no rows: sampled)


# ---------------------------------------------------------------------------- malformed traces
MALFORMED = {
    "overlap": (HEADER + "0,0,5,1,1\n1,0,5,1,1\n0,4,8,1,1\n", "line 4: intervals overlap for client 0 (with line 2)"),
    "duplicate interval": (HEADER + "0,0,5,1,1\n0,0,5,1,1\n1,0,5,1,1\n", "line 3: intervals overlap for client 0"),
    "negative time": (HEADER + "0,-1,5,1,1\n", "line 2: negative time (start -1, end 5)"),
    "start = end offline": (HEADER + "0,0,5,1,1\n0,5,5,0,0\n", "line 3: start 5 must be < end 5"),
    "start > end": (HEADER + "0,7,5,1,1\n", "line 2: start 7 must be < end 5"),
    "unknown client": (HEADER + "0,0,5,1,1\n2,0,5,1,1\n",
                       "line 3: unknown client 2 (the scenario has 2 clients: 0..1)"),
    "fractional client": (HEADER + "1.5,0,5,1,1\n", "line 2: client must be a non-negative integer, got '1.5'"),
    "negative client": (HEADER + "-1,0,5,1,1\n", "line 2: client must be a non-negative integer, got '-1'"),
    "named client": (HEADER + "phone,0,5,1,1\n", "line 2: client must be a non-negative integer, got 'phone'"),
    "missing column": ("client,start,end,online\n0,0,5,1\n", "line 1: missing column(s) speed"),
    "missing columns": ("client,end\n0,5\n", "line 1: missing column(s) start, online, speed"),
    "unknown column": (HEADER.strip() + ",battery\n", "line 1: unknown column 'battery'"),
    "duplicate column": ("client,start,end,online,speed,start\n", "line 1: duplicate column 'start'"),
    "non-numeric": (HEADER + "0,zero,5,1,1\n", "line 2: start is not a number: 'zero'"),
    "non-numeric speed": (HEADER + "0,0,5,1,fast\n", "line 2: speed is not a number: 'fast'"),
    "empty value": (HEADER + "0,0,,1,1\n", "line 2: end is not a number: ''"),
    "non-finite": (HEADER + "0,0,inf,1,1\n", "line 2: end must be finite, got 'inf'"),
    "nan": (HEADER + "0,nan,5,1,1\n", "line 2: start must be finite, got 'nan'"),
    "online not 0/1": (HEADER + "0,0,5,2,1\n", "line 2: online must be 0 or 1, got '2'"),
    "negative speed": (HEADER + "0,0,5,0,-1\n", "line 2: speed must be >= 0, got -1"),
    "online at speed 0": (HEADER + "0,0,5,1,0\n", "line 2: speed must be > 0 while online"),
    "too few values": (HEADER + "0,0,5,1\n", "line 2: expected 5 values, got 4"),
    "too many values": (HEADER + "0,0,5,1,1,9\n", "line 2: expected 5 values, got 6"),
    "line numbers count comments": ("# hi\n\n" + HEADER + "0,0,5,1,x\n", "line 4: speed is not a number: 'x'"),
    "empty file": ("", ": empty trace (no header line)"),
    "only comments": ("# nothing\n", ": empty trace (no header line)"),
    "missing client": (HEADER + "1,0,5,1,1\n", ": no intervals for client(s) 0 (every client needs at least one)"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_trace(tmp_path, case):
    text, expected = MALFORMED[case]
    path = write(tmp_path, text, "x.csv")
    m = 2 if case in ("unknown client", "missing client", "overlap", "duplicate interval") else 1
    with pytest.raises(TraceError) as err:
        clock(path, m, policy="window", window=5.0)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path} {expected}" if expected.startswith("line") else f"{path}{expected}"), msg
    assert isinstance(err.value, ValueError) and isinstance(err.value, ScenarioError)


def test_missing_clients_are_listed(tmp_path):
    path = write(tmp_path, HEADER + "1,0,5,1,1\n3,0,5,1,1\n")
    with pytest.raises(TraceError, match=r"t.csv: no intervals for client\(s\) 0, 2, 4 \(every client"):
        load_trace(path, 5)


def test_missing_trace_file(tmp_path):
    with pytest.raises(TraceError, match=r"nope.csv: no such trace file$"):
        load_trace(tmp_path / "nope.csv", 1)
    with pytest.raises(TraceError, match="is a directory"):
        load_trace(tmp_path, 1)


@pytest.mark.parametrize("repeat", ["cycle", "last"])
@pytest.mark.parametrize("cpr", [None, 3])
def test_window_trace_paths_agree(tmp_path, repeat, cpr):
    """The vectorised trace path (numpy toggle state per client) replays the SimPy processes."""
    ck_fast = clock(EXAMPLE, 8, repeat=repeat, latency=1.0, policy="window", window=45.0, clients_per_round=cpr)
    ck_slow = clock(EXAMPLE, 8, repeat=repeat, latency=1.0, policy="window", window=45.0, clients_per_round=cpr)
    assert ck_fast.fast
    ck_slow.fast = False
    fast, slow = list(itertools.islice(ck_fast.plans(), 120)), list(itertools.islice(ck_slow.plans(), 120))
    assert fast == slow
    statuses = {j.status for p in fast for j in p.jobs}
    assert {"completed", "failed"} <= statuses and (("offline" in statuses) == (cpr is None))


def test_trace_states_toggle_times(tmp_path):
    # client 0 of TWO: online [0, 6), offline [6, 8), period 8 -> toggles 6, 8, 14, 16, ...
    # client 1: always online -> no toggles
    from fedsim.clock.availability import ToggleStates

    ck = clock(write(tmp_path, TWO), 2, policy="window", window=5.0)
    st = ToggleStates(ck.timelines)
    assert st.next.tolist() == [6.0, float("inf")]
    seen = []
    for t in (6.0, 8.0, 14.0, 16.0, 22.0):
        st.advance(t)
        seen.append((bool(st.online[0]), float(st.next[0])))
    assert seen == [(False, 8.0), (True, 14.0), (False, 16.0), (True, 22.0), (False, 24.0)]


# ---------------------------------------------------------------------------- device traces (FedScale layout)
DEVICE = ("client,start,end,sample_seconds,down_kbps,up_kbps\n"
          "0,0,100,0.01,1000,500\n"
          "1,0,50,0.02,2000,250\n1,50,100,0.02,2000,250\n")


def device_clock(path, m=2, cost=None, batch_size=10, **round_kw):
    from fedsim.clock import WorkCost

    cost = cost or WorkCost(step_flops=1.0, model_bytes=128000, upload_bytes=64000)  # 1000 / 500 kbit
    system = SystemConfig(latency=0.0, trace=str(path))
    return Clock(system.value(batch_size), RoundConfig(**round_kw).value(batch_size), Population.of([1] * m),
                 seed=0, cost=cost)


@pytest.mark.parametrize("fast", [True, False])
def test_device_trace_step_and_transfer_times(tmp_path, fast):
    # B = 10: a step is 3 * 10 * 0.01 = 0.3 s (client 0), 0.6 s (client 1). Transfers: 1000 kbit
    # down at 1000 / 2000 kbit/s = 1 / 0.5 s, 500 kbit up at 500 / 250 kbit/s = 1 / 2 s. Window 10:
    # client 0 computes floor(8 / 0.3) = 26 steps, client 1 floor(7.5 / 0.6) = 12.
    ck = device_clock(write(tmp_path, DEVICE), policy="window", window=10.0)
    ck.fast = fast
    (plan,) = itertools.islice(ck.plans(), 1)
    got = [(j.client, j.status, j.steps, j.end, j.download, j.upload) for j in plan.jobs]
    assert got == [
        (0, "completed", 26, pytest.approx(1 + 26 * 0.3 + 1, rel=1e-12), 1.0, 1.0),
        (1, "completed", 12, pytest.approx(0.5 + 12 * 0.6 + 2, rel=1e-12), 0.5, 2.0),
    ]


def test_device_trace_offline_rows_extend_the_period(tmp_path):
    # FedScale: active [0, 40], finish_time 100 -> an online row [0, 40) and an offline row to 100
    text = "client,start,end,online,sample_seconds,down_kbps,up_kbps\n0,0,40,1,0.01,1000,500\n0,40,100,0,0,0,0\n"
    trace = load_trace(write(tmp_path, text), 1)
    (c,) = trace.clients
    assert trace.device and c.period == 100.0 and c.online.tolist() == [True, False]
    assert c.speed.tolist() == [100.0, 0.0]  # samples per second
    assert (trace.down_kbps.tolist(), trace.up_kbps.tolist()) == ([1000.0], [500.0])
    ck = device_clock(write(tmp_path, text), m=1, policy="window", window=50.0)
    plans = list(itertools.islice(ck.plans(), 4))
    # round 0 [0, 50): online at 0; steps accrue only while online, so its 130 steps end at 40,
    # and the outage at 40 comes before the upload ends at 41 -> failed
    # round 1 [50, 100) offline at the open; round 2 [100, 150) like round 0
    assert [(p.available, [j.status for j in p.jobs]) for p in plans] == [
        (1, ["failed"]), (0, ["offline"]), (1, ["failed"]), (0, ["offline"])]


@pytest.mark.parametrize("text, message", [
    ("0,0,10,0,1000,500", "line 2: sample_seconds must be > 0 while online, got '0'"),
    ("0,0,10,0.1,-1,500", "line 2: down_kbps must be > 0 while online, got '-1'"),
    ("0,0,10,0.1,1000,500\n0,10,20,0.1,1000,400", "line 3: client 0's down_kbps / up_kbps differ from its earlier rows"),
    ("0,0,10,1e-300,1000,500", "line 2: sample_seconds must be at least 1e-06, got '1e-300'"),
])
def test_malformed_device_trace(tmp_path, text, message):
    path = write(tmp_path, "client,start,end,sample_seconds,down_kbps,up_kbps\n" + text + "\n")
    with pytest.raises(TraceError) as err:
        load_trace(path, 1)
    assert str(err.value) == f"{path} {message}"


def test_device_trace_header_names_its_columns(tmp_path):
    path = write(tmp_path, "client,start,end,sample_seconds,down_kbps\n0,0,1,1,1\n")
    with pytest.raises(TraceError, match=r"missing column\(s\) up_kbps \(expected client, start, end, sample_seconds, down_kbps, up_kbps\)"):
        load_trace(path, 1)


def test_device_trace_and_network_exclude_each_other(tmp_path):
    from fedsim.clock import WorkCost

    system = SystemConfig(latency=0.0, trace=str(write(tmp_path, DEVICE)), network={"down": 1.0, "up": 1.0})
    with pytest.raises(ScenarioError, match="^system.network: a device trace gives the bandwidths"):
        Clock(system.value(10), RoundConfig(window=5.0).value(10), Population.of([1, 1]), seed=0,
              cost=WorkCost(1.0, 1.0, 1.0))


def test_importer_layout_with_online_column_and_device_values_on_offline_rows(tmp_path):
    # what fedsim/devices writes: comments, online column, the device's values on every row
    text = ("# generated\nclient,start,end,online,sample_seconds,down_kbps,up_kbps\n"
            "0,0,100,1,0.012,5000,1200\n0,100,2400,0,0.012,5000,1200\n"
            "1,0,2000,0,0.5,80,20\n1,2000,2400,1,0.5,80,20\n")
    trace = load_trace(write(tmp_path, text), 2)
    assert trace.device and [c.period for c in trace.clients] == [2400.0, 2400.0]
    assert [c.online.tolist() for c in trace.clients] == [[True, False], [False, True]]
    assert trace.clients[0].speed.tolist() == [1 / 0.012, 0.0] and trace.clients[1].speed.tolist() == [0.0, 2.0]
    assert (trace.down_kbps.tolist(), trace.up_kbps.tolist()) == ([5000.0, 80.0], [1200.0, 20.0])


def test_device_trace_cycles_over_a_larger_population(tmp_path):
    """FedScale's assignment: fedsim client i replays device i mod N (issue 11 item 3)."""
    path = tmp_path / "dev.csv"
    path.write_text("client,start,end,sample_seconds,down_kbps,up_kbps\n"
                    "0,0,100,0.01,1000,500\n"
                    "1,0,50,0.02,2000,800\n")
    tr = load_trace(path, 5)
    assert len(tr.clients) == 5
    assert [c is tr.clients[i % 2] for i, c in enumerate(tr.clients)] == [True] * 5
    assert tr.down_kbps.tolist() == [1000, 2000, 1000, 2000, 1000]
    assert tr.up_kbps.tolist() == [500, 800, 500, 800, 500]
    assert [c.mean_speed for c in tr.clients[:2]] == [100.0, 50.0]  # samples per second
    small = load_trace(path, 1)  # a smaller population uses the first devices
    assert len(small.clients) == 1 and small.down_kbps.tolist() == [1000]
    gap = tmp_path / "gap.csv"  # device ids are dense: 0..N-1
    gap.write_text("client,start,end,sample_seconds,down_kbps,up_kbps\n0,0,10,0.01,1,1\n2,0,10,0.01,1,1\n")
    with pytest.raises(TraceError, match="no intervals for client"):
        load_trace(gap, 3)
