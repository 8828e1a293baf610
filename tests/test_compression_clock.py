"""Compressed bytes on the clock (issue 26 item 1, "bytes from the representation") and the checks
a run makes when it is built.

A logistic regression on FedProx's synthetic data has n = 60 x 10 + 10 = 610 float32 parameters
(b = 4). Each transfer takes latency + bytes x 8 / bandwidth (docs/clock.md), the bytes by hand
from docs/compression.md's table:

    none     n b                               = 2440
    topk 1%  k = ceil(0.01 n) = 7: 7 b + 7 x 4 = 56
    qsgd 7   (4 bits an entry: 3 for the level in 0..7, 1 for the sign): b + ceil(4 n / 8) = 309
    fp16     2 n                               = 1220
    SCAFFOLD uploads its control-variate change uncompressed: + n b

A trained run and ``--schedule-only`` give the same transfer seconds in clients.csv.
"""

from __future__ import annotations

import csv
import math

import pytest
import yaml

import fedsim
from fedsim.cli import main
from fedsim.compression import CompressionSection, Compressor
from tests._tiny_runs import exit_2

LATENCY, DOWN, UP = 0.1, 20_000.0, 5_000.0
BASE = {
    "name": "bytes", "seed": 0, "rounds": 2,
    "data": {"name": "synthetic", "clients": 4},
    "model": {"name": "logreg"},
    "system": {"speed": 5.0, "latency": LATENCY, "network": {"down": DOWN, "up": UP}},
    "round": {"policy": "wait", "local_steps": 2},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8},
}
N, B = 610, 4

CASES = {  # name: (algorithm keys, download bytes, upload bytes)
    "off": ({}, N * B, N * B),
    "none": ({"compression": "none"}, N * B, N * B),
    "topk_1pct": ({"compression": {"name": "topk", "ratio": 0.01, "error_feedback": True}}, N * B, 7 * B + 7 * 4),
    "qsgd_4bit": ({"compression": {"name": "qsgd", "levels": 7}}, N * B, B + (N * 4 + 7) // 8),
    "fp16": ({"compression": "fp16"}, N * B, 2 * N),
    "fp16_both_ways": ({"compression": "fp16", "downlink_compression": "fp16"}, 2 * N, 2 * N),
    "scaffold_topk": ({"name": "scaffold", "compression": {"name": "topk", "ratio": 0.01}}, N * B, 56 + N * B),
}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("case", CASES)
def test_transfer_seconds_follow_the_declared_bytes(case, tmp_path):
    keys, down_bytes, up_bytes = CASES[case]
    raw = {**BASE, "algorithm": {**BASE["algorithm"], **keys}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "plan"), "--quiet", "--schedule-only"]) == 0
    trained, planned = _rows(tmp_path / "run" / "clients.csv"), _rows(tmp_path / "plan" / "clients.csv")
    assert len(trained) == 8
    for row in trained:
        assert float(row["download"]) == pytest.approx(LATENCY + down_bytes * 8 / DOWN, rel=1e-12)
        assert float(row["upload"]) == pytest.approx(LATENCY + up_bytes * 8 / UP, rel=1e-12)
    cols = ("round", "client", "status", "steps", "start", "end", "download", "upload")
    assert [[r[c] for c in cols] for r in planned] == [[r[c] for c in cols] for r in trained]
    info = yaml.safe_load((tmp_path / "run" / "info.yaml").read_text())
    assert (info["model_bytes"], info["upload_bytes"]) == (down_bytes, up_bytes)


def test_the_wait_round_closes_at_the_compressed_upload(tmp_path):
    """A wait round is download + 2 steps at 5 steps/s + upload: 1.076 + 0.4 + 4.004 s raw, and
    1.076 + 0.4 + 0.1896 s with top-k 1%; the next round opens at the close."""
    for name, keys, close in (("off", {}, 5.48), ("topk", {"compression": {"name": "topk", "ratio": 0.01}}, 1.6656)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**BASE, "algorithm": {**BASE["algorithm"], **keys}}))
        assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet", "--schedule-only"]) == 0
        times = [float(r["sim_time"]) for r in _rows(tmp_path / name / "rounds.csv")]
        assert times == pytest.approx([close, 2 * close], rel=1e-12)


def test_the_example_in_the_docs_is_this_world():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "compression.md").read_text()
    doc = " ".join(doc.split())
    assert (LATENCY, UP, N * B, CASES["topk_1pct"][2]) == (0.1, 5000.0, 2440, 56)
    for text, value in (("0.1 + 2440 x 8 / 5000 = 4.004 s", 4.004), ("0.1 + 56 x 8 / 5000 = 0.1896 s", 0.1896)):
        assert text in doc
        assert eval(text.split("=")[0].replace("x", "*")) == pytest.approx(value, abs=1e-12)


# --------------------------------------------------------------------------- refused, before the folder
def test_payload_bytes_with_a_compressor_is_one_line(write_yaml, capsys):
    raw = {**BASE, "system": {**BASE["system"], "payload_bytes": 1000},
           "algorithm": {**BASE["algorithm"], "downlink_compression": {"name": "qsgd", "levels": 3}}}
    exit_2(capsys, ["validate", str(write_yaml(raw))],
           "system.payload_bytes: not with algorithm.downlink_compression 'qsgd'")
    raw["algorithm"]["downlink_compression"] = "none"  # the raw bytes: payload_bytes applies
    assert main(["validate", str(write_yaml(raw))]) == 0


class Doubles(Compressor):
    """Returns float64 rows: changes the update's dtype."""

    def payload_bytes(self, n, b):
        return float(n * b)

    def compress_rows(self, rows, gens):
        return rows.double()


class NanAt610(Compressor):
    """Fine at the sizes a scenario is checked at, NaN bytes for this model's 610 parameters."""

    def payload_bytes(self, n, b):
        return math.nan if n == 610 else float(n)

    def compress_rows(self, rows, gens):
        return rows.clone()


class DoublesSection(CompressionSection):
    name: str = "doubles"

    def compressor(self):
        return Doubles()


class NanSection(CompressionSection):
    name: str = "nan_at_610"

    def compressor(self):
        return NanAt610()


@pytest.fixture
def registered():
    from fedsim.registries import COMPRESSORS

    fedsim.register_compressor("doubles", DoublesSection)
    fedsim.register_compressor("nan_at_610", NanSection)
    yield
    for name in ("doubles", "nan_at_610"):
        COMPRESSORS.unregister(name)


@pytest.mark.parametrize("link, name, message", [
    ("compression", "doubles", "algorithm.compression: compressor 'doubles': compress_rows changed the update's "
                               "dtype (torch.float32 -> torch.float64)"),
    ("downlink_compression", "nan_at_610", "algorithm.downlink_compression: compressor 'nan_at_610': "
                                           "payload_bytes(610, 4) = nan; must be a finite number of bytes >= 0"),
])
@pytest.mark.parametrize("mode", [[], ["--schedule-only"]], ids=["run", "schedule"])
def test_a_compressor_that_cannot_serve_the_model_is_refused_before_the_folder(
        registered, tmp_path, capsys, link, name, message, mode):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "algorithm": {**BASE["algorithm"], link: {"name": name}}}))
    assert main(["validate", str(path)]) == 0  # the scenario alone cannot tell
    out = tmp_path / "out"
    err = exit_2(capsys, ["run", str(path), "--out", str(out), "--quiet", *mode], message)
    assert err.strip() == message
    assert not out.exists()
