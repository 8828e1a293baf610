"""Issue 21, trace commands and device traces: every input bounded, every bad one exit 2 in one line
with nothing written; --out checked like a run's; signals leave no temporary file."""

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsim.cli import main
from fedsim.clock.trace import TraceError, load_trace
from fedsim.limits import MAX_TRACE_BYTES, MAX_TRACE_ROWS

ROOT = Path(__file__).resolve().parents[1]
DEV_HEADER = "client,start,end,online,sample_seconds,down_kbps,up_kbps\n"


def _pickles(tmp_path, capacity=None, behaviour=None):
    cap = tmp_path / "cap.pkl"
    beh = tmp_path / "beh.pkl"
    cap.write_bytes(pickle.dumps(capacity if capacity is not None else {1: {"computation": 20.0, "communication": 800.0}}))
    beh.write_bytes(pickle.dumps(behaviour if behaviour is not None else
                                 {1: {"active": [1.0], "inactive": [4.0], "finish_time": 10.0}}))
    return cap, beh


def _exit2(capsys, argv, *needles):
    t = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - t < 10
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and len(err) < 500, err
    for n in needles:
        assert n in err, err
    return err


def _entries(folder):
    return sorted(os.listdir(folder))


# --------------------------------------------------------------------------- 3, 15: --out targets
@pytest.mark.parametrize("kind", ["device", "folder", "fifo", "symlink"])
def test_out_that_is_not_a_regular_file_is_refused(tmp_path, capsys, kind):
    out = tmp_path / "n"
    if kind == "device":
        if os.getuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(out, 0o600 | 0o020000, os.makedev(1, 3))  # a character device like /dev/null
    elif kind == "folder":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        os.symlink(tmp_path / "elsewhere", out)
    before = _entries(tmp_path)
    _exit2(capsys, ["trace", "generate", "--clients", "3", "--out", str(out), "--force"], str(out))
    cap, beh = _pickles(tmp_path / "..") if False else _pickles(tmp_path)
    _exit2(capsys, ["trace", "import-fedscale", str(cap), str(beh), "--out", str(out), "--force"], str(out))
    assert _entries(tmp_path) == sorted(before + ["beh.pkl", "cap.pkl"])
    assert not (tmp_path / "elsewhere").exists()


def test_empty_out_is_refused(capsys):
    _exit2(capsys, ["trace", "generate", "--clients", "3", "--out", ""], "--out")


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into read-only folders")
def test_out_in_a_read_only_folder_is_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        _exit2(capsys, ["trace", "generate", "--clients", "3", "--out", str(ro / "t.csv")], "not writable")
    finally:
        os.chmod(ro, 0o700)


# --------------------------------------------------------------------------- also noticed: overwrite and mode
def test_existing_out_needs_force_and_output_mode_follows_the_umask(tmp_path, capsys):
    out = tmp_path / "t.csv"
    out.write_text("mine\n")
    _exit2(capsys, ["trace", "generate", "--clients", "3", "--out", str(out)], "exists", "--force")
    assert out.read_text() == "mine\n"
    old = os.umask(0o022)
    try:
        assert main(["trace", "generate", "--clients", "3", "--out", str(out), "--force"]) == 0
    finally:
        os.umask(old)
    assert out.read_text().startswith("#") and (os.stat(out).st_mode & 0o777) == 0o644
    cap, beh = _pickles(tmp_path)
    _exit2(capsys, ["trace", "import-fedscale", str(cap), str(beh), "--out", str(beh)], "exists", "--force")
    assert pickle.loads(beh.read_bytes())[1]["finish_time"] == 10.0


# --------------------------------------------------------------------------- 10: rows bounded, signals clean up
def test_a_small_pickle_sharing_one_session_list_is_refused_before_writing(tmp_path, capsys):
    sessions = {"active": [float(2 * k) for k in range(5000)], "inactive": [float(2 * k + 1) for k in range(5000)],
                "finish_time": 10001.0}
    cap, beh = _pickles(tmp_path, behaviour={i: sessions for i in range(4000)})  # 40 million rows
    assert beh.stat().st_size < 200_000
    _exit2(capsys, ["trace", "import-fedscale", str(cap), str(beh), "--out", str(tmp_path / "t.csv")],
           f"{MAX_TRACE_ROWS:,}")
    assert _entries(tmp_path) == ["beh.pkl", "cap.pkl"]


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "t.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "fedsim", "trace", "generate", "--clients", "1000000", "--days", "4",
                          "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not any(n.endswith(".tmp") for n in os.listdir(tmp_path)):
            assert p.poll() is None and time.monotonic() < deadline, "the temporary file never appeared"
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    finally:
        p.kill()
        p.wait()
    assert p.returncode != 0 and os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- 11: size caps
def test_a_huge_pickle_is_refused_without_reading_it(tmp_path, capsys):
    cap, beh = _pickles(tmp_path)
    with open(beh, "r+b") as f:
        f.truncate(MAX_TRACE_BYTES + 1)  # sparse: no disk used
    _exit2(capsys, ["trace", "import-fedscale", str(cap), str(beh), "--out", str(tmp_path / "t.csv")], "bytes")


def test_a_huge_trace_csv_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(DEV_HEADER)
    with open(path, "r+b") as f:
        f.truncate(5 * 2**30)
    with pytest.raises(TraceError, match="bytes, more than"):
        load_trace(path, 3)


def test_a_trace_csv_with_too_many_rows_is_refused(tmp_path, monkeypatch):
    import fedsim.clock.trace as tr

    monkeypatch.setattr(tr, "MAX_TRACE_ROWS", 3)
    path = tmp_path / "t.csv"
    path.write_text(DEV_HEADER + "".join(f"{c},0,10,1,0.01,100,100\n" for c in range(4)))
    with pytest.raises(TraceError, match="more than 3 rows"):
        load_trace(path, 4)


# --------------------------------------------------------------------------- 12, 17: device ids bounded by the rows
def test_a_one_row_device_trace_with_a_huge_id_is_refused_at_once(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(DEV_HEADER + "10000000,0,10,1,0.01,100,100\n")
    t = time.perf_counter()
    with pytest.raises(TraceError, match=r"no intervals for client\(s\) 0, 1, 2"):
        load_trace(path, 5)
    assert time.perf_counter() - t < 2  # today: 20 s and 1.4 GB


def test_a_device_trace_with_a_header_only_is_one_line(tmp_path, recwarn):
    path = tmp_path / "t.csv"
    path.write_text(DEV_HEADER)
    with pytest.raises(TraceError, match="no intervals"):
        load_trace(path, 3)
    assert not [w for w in recwarn if "divide" in str(w.message) or "modulo" in str(w.message)]


# --------------------------------------------------------------------------- 13, 14: huge and deep values
@pytest.mark.parametrize(
    "capacity, behaviour, needle",
    [
        ({1: {"computation": 20.0, "communication": 800.0}}, {10**5000: {"active": [1.0], "inactive": [4.0], "finish_time": 10.0}},
         "must fit in 64 bits"),
        ({1: {"computation": 10**400, "communication": 800.0}}, None, "1.computation"),
        ({1: {"computation": 20.0, "communication": 800.0}}, {1: {"active": [10**400], "inactive": [4.0], "finish_time": 10.0}},
         "1.active[0]"),
        ({1: {"computation": 1e308, "communication": 800.0}}, None, "1.computation: must be in"),
        ({1: {"computation": 5e-324, "communication": 800.0}}, None, "1.computation: must be in"),
        ({1: {"computation": 20.0, "communication": 800.0}}, {1: {"active": [1.0], "inactive": [4.0], "finish_time": 5e9}},
         "1.finish_time: must be in"),
    ],
)
def test_huge_numbers_are_exit_2(tmp_path, capsys, capacity, behaviour, needle):
    cap, beh = _pickles(tmp_path, capacity, behaviour)
    _exit2(capsys, ["trace", "import-fedscale", str(cap), str(beh), "--out", str(tmp_path / "t.csv")], needle)
    assert _entries(tmp_path) == ["beh.pkl", "cap.pkl"]


def test_a_deeply_nested_value_is_exit_2(tmp_path, capsys):
    cap = tmp_path / "cap.pkl"
    cap.write_bytes(pickle.dumps({1: {"computation": 20.0, "communication": 800.0}}))
    beh = tmp_path / "beh.pkl"
    beh.write_bytes(_deep_pickle(200_000))
    _exit2(capsys, ["trace", "import-fedscale", str(cap), str(beh), "--out", str(tmp_path / "t.csv")], "1.active[0]", "a list")


def _deep_pickle(depth: int) -> bytes:
    """``{1: {"active": [[[...]]], "inactive": [4.0], "finish_time": 10.0}}`` with ``active[0]``
    nested ``depth`` lists deep, written opcode by opcode (pickle.dumps would recurse)."""
    import struct

    def text(t: str) -> bytes:  # BINUNICODE
        return b"X" + struct.pack("<I", len(t)) + t.encode()

    def flt(x: float) -> bytes:  # BINFLOAT
        return b"G" + struct.pack(">d", x)

    nested = b"(" * depth + b"]" + b"l" * depth  # MARK ... LIST: each level is [the one inside]
    inner = b"}(" + text("active") + b"(" + nested + b"l" + text("inactive") + b"(" + flt(4.0) + b"l"
    inner += text("finish_time") + flt(10.0) + b"u"
    return b"\x80\x02}(K\x01" + inner + b"u."


# --------------------------------------------------------------------------- 16: generate bounded like validation
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--clients", "100000000"], "--clients"),
        (["--clients", "100000000000000000000"], "--clients"),
        (["--clients", "3", "--days", "1000000000"], "--days"),
        (["--clients", "3", "--sample-ms-sigma", "1000"], "--sample-ms-sigma"),
        (["--clients", "3", "--seed", str(2**64)], "--seed"),
        (["--clients", "3", "--seed", "-1"], "--seed"),
        (["--clients", "1000", "--days", "10000"], "rows"),
    ],
)
def test_generate_is_bounded(tmp_path, capsys, args, needle):
    _exit2(capsys, ["trace", "generate", *args, "--out", str(tmp_path / "t.csv")], needle)
    assert _entries(tmp_path) == []


def test_generate_never_writes_a_trace_fedsim_refuses(tmp_path, capsys):
    out = tmp_path / "t.csv"
    # sigma at its bound with a median near the reader's limit: a draw past it is refused, not written
    _exit2(capsys, ["trace", "generate", "--clients", "2000", "--sample-ms-sigma", "10", "--sample-ms-median", "1e11",
                    "--out", str(out)], "--sample-ms-sigma: drew")  # fmt: skip
    assert _entries(tmp_path) == []
    assert main(["trace", "generate", "--clients", "50", "--sample-ms-sigma", "3", "--out", str(out)]) == 0
    assert len(load_trace(out, 50).clients) == 50


def test_a_5000_digit_client_id_in_a_trace_csv_is_one_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(DEV_HEADER + "9" * 5000 + ",0,10,1,0.01,100,100\n")
    with pytest.raises(TraceError, match="client id of 5000 digits"):
        load_trace(path, 3)
    speed = tmp_path / "s.csv"
    speed.write_text("client,start,end,online,speed\n" + "0" * 4999 + "1,0,10,1,1\n0,0,10,1,1\n")
    assert len(load_trace(speed, 2).clients) == 2  # leading zeros: still client 1
