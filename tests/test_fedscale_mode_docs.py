"""FedScale mode (``system.trace_semantics: fedscale``): what docs/devices.md, clock.md and
compression.md state about it is what the clock does (issue 38 defect 5). Expected values are
computed by hand from the traces below (FedScale's rules: a job fails when its client is offline
at its completion time, tested with the stateful session index; over-commitment selects
int(K F) and collects the first K)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedsim
from fedsim.cli import main

from _tiny_runs import exit_2

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _doc(name: str) -> str:
    return " ".join((DOCS / name).read_text().split())


def _schedule(trace: Path, text: str, semantics: str, rounds: int = 1, **round_keys):
    trace.write_text(text)
    return fedsim.schedule({"data": {"name": "quadratic", "clients": 4, "dim": 1},
                            "rounds": rounds, "round": {"local_steps": 2, **round_keys},
                            "system": {"trace": str(trace), "trace_semantics": semantics}})


# Four clients, each step 1/speed seconds, no latency, period 10 s. Client 0 completes at 0.5 but
# is online only in [0, 0.4); clients 1 and 2 complete at 1.0 and 2.0; client 3 completes at 4.0
# but is online only in [0, 3).
FOUR = ("client,start,end,online,speed\n0,0,0.4,1,4\n0,0.4,10,0,0\n1,0,10,1,2\n2,0,10,1,1\n"
        "3,0,3,1,0.5\n3,3,10,0,0\n")


def _rows(plan):
    c = plan.clients.sort_values("client")
    return [(int(r.client), r.status, int(r.steps), float(r.end)) for r in c.itertuples()]


def test_overcommitted_jobs_fedscale_loses_are_failed_before_the_close_and_dropped_after(tmp_path):
    """K = 2, F = 2: FedScale selects int(4.0) = 4 and loses clients 0 and 3 (offline at their
    completions 0.5 and 4.0); the K-th upload is client 2's at 2.0. fedsim: client 0 `failed` at
    0.5 (before the close), client 3 `dropped` at the close 2.0 with 0 steps."""
    plan = _schedule(tmp_path / "t.csv", FOUR, "fedscale", policy="overcommit", overcommit=2.0, clients_per_round=2)
    assert _rows(plan) == [(0, "failed", 0, 0.5), (1, "completed", 2, 1.0), (2, "completed", 2, 2.0),
                           (3, "dropped", 0, 2.0)]
    assert plan.rounds["sim_time"].tolist() == [2.0] and plan.rounds["participants"].tolist() == [2]
    text = _doc("devices.md")
    assert ("| over-committed jobs FedScale loses | a job whose outage comes after the K-th upload is `dropped` "
            "(stopped at the close) | `trace_semantics: fedscale`: a job whose client is offline at its completion "
            "time is `failed` (end = that time) when it would complete before the K-th upload, and `dropped` (steps "
            "0, end = the close) when it would complete after it") in text
    assert "FedScale removes every such job in advance as lost" in text


def test_a_fedscale_deadline_round_closes_at_the_last_completed_upload_before_a_later_failure(tmp_path):
    """Deadline D = 8 over the same clients (0 and 3 fail): fedsim's own semantics close at the last
    resolution (client 3's outage at 3.0); FedScale's at the last completed upload (2.0), while
    client 3's failure row ends at its completion, 4.0."""
    trace = tmp_path / "t.csv"
    own = _schedule(trace, FOUR, "fedsim", policy="deadline", deadline=8.0)
    assert _rows(own) == [(0, "failed", 0, 0.4), (1, "completed", 2, 1.0), (2, "completed", 2, 2.0),
                          (3, "failed", 0, 3.0)]
    assert own.rounds["sim_time"].tolist() == [3.0]
    fs = _schedule(trace, FOUR, "fedscale", policy="deadline", deadline=8.0)
    assert _rows(fs) == [(0, "failed", 0, 0.5), (1, "completed", 2, 1.0), (2, "completed", 2, 2.0),
                         (3, "failed", 0, 4.0)]
    assert fs.rounds["sim_time"].tolist() == [2.0]
    # a job still running at D: the round closes at D (client 2 needs 2 s, D = 1.5)
    late = _schedule(trace, FOUR, "fedscale", policy="deadline", deadline=1.5)
    assert late.rounds["sim_time"].tolist() == [1.5] and _rows(late)[2] == (2, "dropped", 0, 1.5)
    clock = _doc("clock.md")
    assert ("With `system.trace_semantics: fedscale` (`wait` likewise) a job that will fail is decided when it "
            "starts and left out of the close, as FedScale removes it in advance: the round closes at the last "
            "completed upload (or at open + D while a job still runs), before a later failure's `end`") in clock
    devices = _doc("devices.md")
    assert ("| `wait` and `deadline` round close | the later of the last upload and the last failure (docs/clock.md); "
            "`deadline`: at the latest D after the open | `trace_semantics: fedscale`: the last completed upload") in devices


DEVICE = "client,start,end,sample_seconds,down_kbps,up_kbps\n0,0,100,0.001,1,1\n1,0,100,0.001,2,2\n"


@pytest.mark.parametrize("compression, up_bytes", [(None, 610 * 4), ({"name": "topk", "ratio": 0.01}, 7 * 8)])
def test_compression_is_accepted_in_fedscale_mode_and_times_the_upload(tmp_path, compression, up_bytes):
    """A 60 -> 10 logistic regression (610 float32 parameters, 2,440 bytes raw; top-k at 1%:
    k = 7 entries of value and index, 56 bytes): upload = bytes x 8 / 1024 / up_kbps seconds, as
    FedScale times a transfer; a step 3 x batch 4 x 1 ms."""
    trace = tmp_path / "t.csv"
    trace.write_text(DEVICE)
    alg = {"name": "fedavg", "lr": 0.1, "batch_size": 4, **({"compression": compression} if compression else {})}
    plan = fedsim.schedule({"data": {"name": "synthetic", "clients": 2}, "model": {"name": "logreg"}, "rounds": 1,
                            "algorithm": alg, "round": {"policy": "wait", "local_steps": 1},
                            "system": {"trace": str(trace), "trace_semantics": "fedscale", "latency": 0}})
    c = plan.clients.sort_values("client")
    for kbps, row in zip((1, 2), c.itertuples()):
        down, up = 2440 * 8 / 1024 / kbps, up_bytes * 8 / 1024 / kbps
        assert (row.download, row.upload) == pytest.approx((down, up), rel=1e-12)
        assert row.end == pytest.approx(down + 3 * 4 * 0.001 + up, rel=1e-12)
    text = _doc("devices.md")
    assert ("FedScale has no compression: `algorithm.compression` and `downlink_compression` are accepted with "
            "`trace_semantics: fedscale` and work as in any run, their declared bytes timing the transfers") in text
    assert ("With `system.trace_semantics: fedscale` (replaying a trace as FedScale does, docs/devices.md) compressors "
            "are accepted and time the transfers as here, though FedScale itself has no compression") in _doc("compression.md")


def test_the_payload_bytes_refusal_points_to_the_section_that_states_it(write_yaml, capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(DEVICE)
    raw = {"data": {"name": "synthetic", "clients": 2}, "model": {"name": "logreg"}, "rounds": 1,
           "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 4, "compression": {"name": "topk", "ratio": 0.01}},
           "round": {"policy": "wait", "local_steps": 1},
           "system": {"trace": str(trace), "trace_semantics": "fedscale", "payload_bytes": 6850}}
    err = exit_2(capsys, ["validate", str(write_yaml(raw))], "system.payload_bytes: not with algorithm.compression 'topk'")
    page, section = re.search(r'\((docs/[a-z_]+\.md), "([^"]+)"\)$', err.strip()).groups()
    assert page == "docs/compression.md"
    lines = (DOCS.parent / page).read_text().split("\n## ")
    body = " ".join(next(b for b in lines if b.startswith(section)).split())
    assert ("`system.payload_bytes` (bytes of one transfer in place of the model's, e.g. FedScale's pickle size) "
            "applies to raw links: with a compressor other than `none` on either link it is refused") in body
    raw["algorithm"].pop("compression")  # raw links: payload_bytes applies
    assert main(["validate", str(write_yaml(raw))]) == 0
