"""FedScale import and generated populations (fedsim.devices): exact CSV texts, hostile input."""

from __future__ import annotations

import hashlib
import math
import os
import pickle

import numpy as np
import pytest

from fedsim.cli import main
from fedsim.devices.fedscale import FedScaleError, import_fedscale, read_pickle
from fedsim.devices.population import PopulationSpec, population_rows, write_population

HEADER = "client,start,end,online,sample_seconds,down_kbps,up_kbps\n"

CAPACITY = {5: {"computation": 100.0, "communication": 2000}, 2: {"computation": 50, "communication": 1000.5}}
BEHAVIOUR = {
    10: {"duration": 9, "active": [0, 300], "inactive": [100, 400], "finish_time": 500, "model": "a"},
    3: {"duration": 1, "active": [50], "inactive": [60], "finish_time": 60, "model": "b"},
    7: {"duration": 0, "active": [], "inactive": [], "finish_time": 10.5, "model": "c"},
}
# behaviour ids ascending 3, 7, 10 -> devices 0, 1, 2; capacity ids ascending 2, 5 -> entries 0, 1;
# device i takes capacity entry i mod 2: devices 0 and 2 get id 2 (50 ms -> 0.05 s, 1000.5 kbit/s)
EXPECTED_ROWS = """\
0,0,50,0,0.05,1000.5,1000.5
0,50,60,1,0.05,1000.5,1000.5
1,0,10.5,0,0.1,2000,2000
2,0,100,1,0.05,1000.5,1000.5
2,100,300,0,0.05,1000.5,1000.5
2,300,400,1,0.05,1000.5,1000.5
2,400,500,0,0.05,1000.5,1000.5
"""


def _dump(path, obj):
    path.write_bytes(pickle.dumps(obj))
    return path


def _files(tmp_path, capacity=CAPACITY, behaviour=BEHAVIOUR):
    return _dump(tmp_path / "cap.pkl", capacity), _dump(tmp_path / "beh.pkl", behaviour)


def test_import_matches_hand_written_trace(tmp_path):
    cap, beh = _files(tmp_path)
    out = tmp_path / "trace.csv"
    assert import_fedscale(cap, beh, out) == 3
    text = out.read_text()
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert text == (
        "# fedsim device trace imported from FedScale by `fedsim trace import-fedscale`\n"
        f"# capacity: cap.pkl (2 entries, sha256 {sha(cap)})\n"
        f"# behaviour: beh.pkl (3 entries, sha256 {sha(beh)})\n"
        "# client i = i-th behaviour client_id ascending (3 .. 10), capacity entry i mod 2 ascending\n"
        + HEADER + EXPECTED_ROWS
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


# --assign fedscale: fedsim client i is FedScale client i + 1; behaviour at position (i + 1) mod 3 of
# BEHAVIOUR's insertion order (10, 3, 7); capacity key (i + 1) mod 2 of CAPACITY_01.
CAPACITY_01 = {1: {"computation": 20, "communication": 300}, 0: {"computation": 40.0, "communication": 600}}
EXPECTED_FEDSCALE_ROWS = """\
0,0,50,0,0.02,300,300
0,50,60,1,0.02,300,300
1,0,10.5,0,0.04,600,600
2,0,100,1,0.02,300,300
2,100,300,0,0.02,300,300
2,300,400,1,0.02,300,300
2,400,500,0,0.02,300,300
"""


def test_assign_fedscale_by_hand(tmp_path):
    cap, beh = _files(tmp_path, CAPACITY_01)
    out = tmp_path / "trace.csv"
    notes = []
    assert import_fedscale(cap, beh, out, assign="fedscale", notes=notes) == 3
    assert out.read_text().endswith(HEADER + EXPECTED_FEDSCALE_ROWS)
    assert notes == []


def test_assign_fedscale_gives_the_default_profile_to_absent_keys(tmp_path, capsys):
    # CAPACITY's keys are 5 and 2; (i + 1) mod 2 is 0 or 1: every client gets {computation: 1,
    # communication: 1} (1 ms per sample -> 0.001 s, 1 kbit/s), as FedScale gives them
    cap, beh = _files(tmp_path)
    out = tmp_path / "t.csv"
    assert main(["trace", "import-fedscale", str(cap), str(beh), "--out", str(out), "--assign", "fedscale",
                 "--clients", "4"]) == 0
    assert out.read_text().endswith(HEADER + """\
0,0,50,0,0.001,1,1
0,50,60,1,0.001,1,1
1,0,10.5,0,0.001,1,1
2,0,100,1,0.001,1,1
2,100,300,0,0.001,1,1
2,300,400,1,0.001,1,1
2,400,500,0,0.001,1,1
3,0,50,0,0.001,1,1
3,50,60,1,0.001,1,1
""")
    err = capsys.readouterr().err
    assert err.startswith("warning: 4 of 4 clients have no capacity entry") and err.count("\n") == 1


def test_zero_length_sessions_are_read(tmp_path):
    """FedScale's own fixture (fedscale/tests/cloud/internal/test_client_metadata.py) has a session
    with active == inactive; it is imported as a zero-length online row and read back."""
    from fedsim.clock.trace import load_trace

    beh = {1: {"active": [1, 3, 6, 9], "inactive": [1, 4, 7, 10], "finish_time": 10}}
    cap, beh = _files(tmp_path, {1: {"computation": 1, "communication": 1}}, beh)
    out = tmp_path / "t.csv"
    assert import_fedscale(cap, beh, out) == 1
    assert out.read_text().endswith(HEADER + """\
0,0,1,0,0.001,1,1
0,1,1,1,0.001,1,1
0,1,3,0,0.001,1,1
0,3,4,1,0.001,1,1
0,4,6,0,0.001,1,1
0,6,7,1,0.001,1,1
0,7,9,0,0.001,1,1
0,9,10,1,0.001,1,1
""")
    (t,) = load_trace(out, 1).clients
    assert [x[:2] for x in t.sessions] == [(1.0, 1.0), (3.0, 4.0), (6.0, 7.0), (9.0, 10.0)]
    assert t.bp.tolist() == [0.0, 1.0, 3.0, 4.0, 6.0, 7.0, 9.0, 10.0]  # no online time at 1
    assert t.online.tolist() == [False, False, True, False, True, False, True]


def test_cli_import_and_output(tmp_path, capsys):
    cap, beh = _files(tmp_path)
    out = tmp_path / "t.csv"
    assert main(["trace", "import-fedscale", str(cap), str(beh), "--out", str(out)]) == 0
    assert out.read_text().endswith(HEADER + EXPECTED_ROWS)


class _Boom:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_pickle_does_not_execute(tmp_path, capsys):
    marker = tmp_path / "pwned"
    cap = _dump(tmp_path / "cap.pkl", {1: {"computation": _Boom(marker), "communication": 1}})
    beh = _dump(tmp_path / "beh.pkl", BEHAVIOUR)
    out = tmp_path / "t.csv"
    assert main(["trace", "import-fedscale", str(cap), str(beh), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{cap}: holds a class (")
    assert not marker.exists()
    assert not out.exists()
    pickle.loads(cap.read_bytes())  # the same bytes do run code with the plain unpickler
    assert marker.exists()


def test_any_class_is_refused_even_harmless(tmp_path):
    p = _dump(tmp_path / "x.pkl", {1: {"computation": np.float64(3.0), "communication": 1}})
    with pytest.raises(FedScaleError, match="holds a class"):
        read_pickle(p)


@pytest.mark.parametrize(
    "capacity, behaviour, which, message",
    [
        ([1, 2], BEHAVIOUR, "cap", "not a FedScale capacity trace"),
        ({}, BEHAVIOUR, "cap", "not a FedScale capacity trace"),
        ({"a": {"computation": 1, "communication": 1}}, BEHAVIOUR, "cap", "client_id 'a': must be an integer"),
        ({1: {"computation": 1}}, BEHAVIOUR, "cap", "1.communication: missing"),
        ({1: {"computation": -1, "communication": 1}}, BEHAVIOUR, "cap", "1.computation: must be a finite number > 0"),
        ({1: {"computation": 1, "communication": 0}}, BEHAVIOUR, "cap", "1.communication: must be a finite number > 0"),
        ({1: {"computation": 1, "communication": math.nan}}, BEHAVIOUR, "cap", "1.communication: must be a finite"),
        ({1: {"computation": True, "communication": 1}}, BEHAVIOUR, "cap", "1.computation: must be a finite"),
        (CAPACITY, {1: [0, 1]}, "beh", "1: expected a dict, got list"),
        (CAPACITY, {1: {"active": [0], "inactive": [1]}}, "beh", "1.finish_time: missing"),
        (CAPACITY, {1: {"active": [0], "inactive": [1, 2], "finish_time": 5}}, "beh", "1.inactive: 2 entries for 1"),
        (CAPACITY, {1: {"active": [0], "inactive": [1], "finish_time": 0}}, "beh", "1.finish_time: must be a finite number > 0"),
        (CAPACITY, {1: {"active": [-1], "inactive": [1], "finish_time": 5}}, "beh", r"1.active\[0\]: must be a finite number >= 0"),
        (CAPACITY, {1: {"active": [0, 2], "inactive": [3, 4], "finish_time": 5}}, "beh", r"1.active\[1\]: sessions must be increasing"),
        (CAPACITY, {1: {"active": [2, 1], "inactive": [2, 3], "finish_time": 5}}, "beh", r"1.active\[1\]: sessions must be increasing"),
        (CAPACITY, {1: {"active": [0], "inactive": [6], "finish_time": 5}}, "beh", r"1.inactive\[0\]: 6 is past finish_time 5.0"),
        (CAPACITY, {1: {"active": (0,), "inactive": [1], "finish_time": 5}}, "beh", "1.active: must be a list, got tuple"),
    ],
)
def test_bad_layouts_name_file_and_key(tmp_path, capacity, behaviour, which, message):
    cap, beh = _files(tmp_path, capacity, behaviour)
    out = tmp_path / "t.csv"
    out.write_text("old\n")
    with pytest.raises(FedScaleError, match=message) as err:
        import_fedscale(cap, beh, out, force=True)  # even allowed to replace it, a bad input leaves it
    assert str(err.value).startswith(f"{cap if which == 'cap' else beh}: ")
    assert "\n" not in str(err.value)
    assert out.read_text() == "old\n"  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beh.pkl", "cap.pkl", "t.csv"]


def test_not_a_regular_file_or_garbage(tmp_path):
    cap, beh = _files(tmp_path)
    with pytest.raises(FedScaleError, match="not a regular file"):
        import_fedscale(tmp_path, beh, tmp_path / "t.csv")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FedScaleError, match="^.*fifo: not a regular file$"):
        import_fedscale(cap, fifo, tmp_path / "t.csv")  # would block if opened
    junk = tmp_path / "junk.pkl"
    junk.write_bytes(b"\x80\x04garbage")
    with pytest.raises(FedScaleError, match="junk.pkl: not a readable pickle"):
        read_pickle(junk)
    with pytest.raises(FedScaleError, match="no such file"):
        read_pickle(tmp_path / "missing.pkl")
    assert not (tmp_path / "t.csv").exists()


def test_population_exact_without_randomness(tmp_path):
    # every spread set to 0: sessions [36000 + d*86400, +28800), 0.03 s per sample, 10000/5000 kbit/s
    spec = PopulationSpec(
        clients=2, days=2, sample_ms_sigma=0, kbps_sigma=0, tz_hours=0, jitter_hours=0, length_sigma=0
    )
    tail = "0.03,10000,5000"
    one = [f"0,0,36000,0,{tail}", f"0,36000,64800,1,{tail}", f"0,64800,122400,0,{tail}",
           f"0,122400,151200,1,{tail}", f"0,151200,172800,0,{tail}"]  # fmt: skip
    assert list(population_rows(spec)) == one + [r.replace("0,", "1,", 1) for r in one]


def test_population_laws_and_format(tmp_path):
    spec = PopulationSpec(clients=20001, seed=3)
    rows = list(population_rows(spec))
    assert rows == list(population_rows(PopulationSpec(clients=20001, seed=3)))  # seeded
    assert rows != list(population_rows(PopulationSpec(clients=20001, seed=4)))
    a = np.array([[float(x) for x in r.split(",")] for r in rows])
    per = {}
    for c, s, e, on, *_ in a:
        per.setdefault(int(c), []).append((s, e, on))
    assert sorted(per) == list(range(20001))
    for segs in per.values():  # contiguous from 0 to the period, alternating, non-empty
        assert segs[0][0] == 0 and segs[-1][1] == 7 * 86400
        assert all(s < e for s, e, _ in segs)
        assert all(x[1] == y[0] and x[2] != y[2] for x, y in zip(segs, segs[1:]))
    first = a[np.r_[True, a[1:, 0] != a[:-1, 0]]]  # one row per device
    # lognormal medians (standard error of a median of 20001 draws in log space: 1.25 sigma / 141)
    assert np.median(first[:, 4]) == pytest.approx(0.030, rel=0.04)
    assert np.median(first[:, 5]) == pytest.approx(10_000, rel=0.04)
    assert np.allclose(first[:, 5] / first[:, 6], 2.0)
    on = a[a[:, 3] == 1]
    share = (on[:, 2] - on[:, 1]).sum() / (20001 * 7 * 86400)
    assert share == pytest.approx(8 * np.exp(0.3**2 / 2) / 24, rel=0.02)  # E[session] / day


def test_generate_cli(tmp_path, capsys):
    out = tmp_path / "pop.csv"
    assert main(["trace", "generate", "--clients", "4", "--days", "1", "--seed", "5", "--out", str(out)]) == 0
    ref = tmp_path / "ref.csv"
    write_population(PopulationSpec(clients=4, days=1, seed=5), ref)
    assert out.read_text() == ref.read_text()
    assert main(["trace", "generate", "--clients", "4", "--sample-ms-median", "0", "--out", str(tmp_path / "x.csv")]) == 2
    assert capsys.readouterr().err == "--sample-ms-median: must be a finite number > 0, got 0.0\n"
    assert not (tmp_path / "x.csv").exists()


def test_out_folder_must_exist(tmp_path, capsys):
    cap, beh = _files(tmp_path)
    missing = tmp_path / "nope" / "t.csv"
    assert main(["trace", "import-fedscale", str(cap), str(beh), "--out", str(missing)]) == 2
    assert main(["trace", "generate", "--clients", "2", "--out", str(missing)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"--out {missing}: folder {missing.parent} does not exist"] * 2
    assert not missing.parent.exists()
