"""``algorithm.compression`` / ``downlink_compression`` in a scenario (issue 26 items 1 and 5): the
keys, their defaults, and every bad input as one line naming the field (exit 2), before torch for
what the scenario alone shows; a compressor of one's own checked when registered, when the scenario
is read (its declared bytes) and when the run is built (its output on a probe)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedsim
from fedsim.compression import Compression, CompressionSection, Compressor
from fedsim.compression.fp16 import Half
from fedsim.compression.sign import Sign
from fedsim.compression.topk import TopK
from fedsim.compression.apply import check_compression, upload_bytes
from fedsim.errors import ScenarioError
from fedsim.registries import COMPRESSORS
from fedsim.named_pieces import RegistryError
from fedsim.scenario import dump_scenario, parse_scenario
from tests._tiny_runs import exit_2

ROOT = Path(__file__).resolve().parent.parent
BASE = {"data": {"name": "quadratic", "clients": 3}, "round": {"policy": "window", "window": 5.0}}


def algorithm(**keys):
    return parse_scenario({**BASE, "algorithm": keys}).algorithm


# --------------------------------------------------------------------------- the keys
def test_off_by_default():
    alg = algorithm()
    assert alg.compression is None and alg.downlink_compression is None


def test_sections_resolve_to_compressors():
    alg = algorithm(compression={"name": "topk", "ratio": 0.01, "error_feedback": True},
                    downlink_compression="fp16")
    assert alg.compression.value() == Compression(TopK(0.01), error_feedback=True)
    assert alg.downlink_compression.value().compressor == Half()
    assert algorithm(compression={"name": "qsgd", "levels": 7}).compression.value().error_feedback is False


def test_randk_scaling_follows_error_feedback_unless_given():
    def scaled(**keys):
        return algorithm(compression={"name": "randk", "ratio": 0.1, **keys}).compression.compressor().scaled

    assert scaled() is True and scaled(error_feedback=True) is False
    assert scaled(error_feedback=True, scaled=True) is True and scaled(scaled=False) is False


def test_the_resolved_scenario_round_trips():
    import yaml

    sc = parse_scenario({**BASE, "algorithm": {"compression": {"name": "randk", "ratio": 0.25, "error_feedback": True},
                                               "downlink_compression": {"name": "qsgd", "levels": 255}}})
    text = dump_scenario(sc)
    assert parse_scenario(yaml.safe_load(text)) == sc
    assert yaml.safe_load(text)["algorithm"]["compression"] == {"name": "randk", "error_feedback": True,
                                                                "ratio": 0.25, "scaled": False}


# --------------------------------------------------------------------------- bad input: one line, exit 2
BAD = [
    ({"name": "zip"}, "algorithm.compression.name: unknown compressor 'zip'; known: fp16, none, qsgd, randk, sign, topk"),
    ({"ratio": 0.1}, "algorithm.compression.name: missing (which compressor?"),
    ({"name": 3}, "algorithm.compression.name: must be a compressor's name"),
    ({"name": "topk", "ratio": 0}, "algorithm.compression.ratio: Input should be greater than 0"),
    ({"name": "topk", "ratio": -0.5}, "algorithm.compression.ratio: Input should be greater than 0"),
    ({"name": "randk", "ratio": 1.5}, "algorithm.compression.ratio: Input should be less than or equal to 1"),
    ({"name": "topk", "ratio": math.nan}, "algorithm.compression.ratio: Input should be a finite number"),
    ({"name": "topk", "ratio": math.inf}, "algorithm.compression.ratio: Input should be"),
    ({"name": "topk", "ratio": True}, "algorithm.compression.ratio: must not be true/false"),
    ({"name": "topk"}, "algorithm.compression.ratio: Field required"),
    ({"name": "qsgd", "levels": 0}, "algorithm.compression.levels: Input should be greater than or equal to 1"),
    ({"name": "qsgd", "levels": -3}, "algorithm.compression.levels: Input should be greater than or equal to 1"),
    ({"name": "qsgd", "levels": 2.5}, "algorithm.compression.levels: Input should be a valid integer"),
    ({"name": "qsgd", "levels": 10**30}, "algorithm.compression.levels: Input should be less than or equal to 65535"),
    ({"name": "sign", "ratio": 0.1}, "algorithm.compression.ratio: unknown key"),
    ({"name": "fp16", "error_feedback": "maybe"}, "algorithm.compression.error_feedback: Input should be a valid boolean"),
    ([0.1], "algorithm.compression: give {name: NAME, ...}"),
    (True, "algorithm.compression: give {name: NAME, ...}"),
    ("fedsim.compression.topk:TopK", "algorithm.compression.name: unknown compressor 'fedsim.compression.topk:TopK'"),
]


@pytest.mark.parametrize("value, message", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_compression_is_one_line_naming_the_field(value, message, write_yaml, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_yaml({**BASE, "algorithm": {"compression": value}})
    exit_2(capsys, ["validate", str(path)], message)
    exit_2(capsys, ["run", str(path), "--quiet"], message)
    assert not (tmp_path / "runs").exists()


def test_downlink_errors_name_the_downlink(write_yaml, capsys):
    exit_2(capsys, ["validate", str(write_yaml({**BASE, "algorithm": {"downlink_compression": {"name": "topk"}}}))],
           "algorithm.downlink_compression.ratio: Field required")
    exit_2(capsys, ["validate", str(write_yaml({**BASE, "algorithm": {"downlink_compression": "nope"}}))],
           "algorithm.downlink_compression.name: unknown compressor 'nope'")
    exit_2(capsys, ["validate", str(write_yaml({**BASE, "algorithm": {"downlink_compression":
                                                                     {"name": "fp16", "error_feedback": True}}}))],
           "algorithm.downlink_compression.error_feedback: not on the downlink")


def test_set_overrides_reach_the_section(write_yaml, capsys):
    path = write_yaml({**BASE, "algorithm": {"compression": {"name": "topk", "ratio": 0.1}}})
    exit_2(capsys, ["validate", str(path), "--set", "algorithm.compression.ratio=0"], "algorithm.compression.ratio")


def test_validate_with_compression_imports_no_torch(tmp_path):
    (tmp_path / "c.yaml").write_text("round: {policy: window, window: 5.0}\n"
                                     "algorithm: {compression: {name: qsgd, levels: 3, error_feedback: true},\n"
                                     "            downlink_compression: {name: fp16}}\n")
    code = ("import json, sys\nfrom fedsim.cli import main\nrc = main(['validate', 'c.yaml'])\n"
            "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"rc": 0, "torch": False}, r.stderr


# --------------------------------------------------------------------------- a compressor of one's own
class _Declares(Compressor):
    """A user's compressor whose payload is whatever the test says."""

    def __init__(self, value):
        object.__setattr__(self, "value", value)

    def payload_bytes(self, num_params, dtype_bytes):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value

    def compress_rows(self, rows, gens):
        return rows.clone()


def _section(value):
    class Declared(CompressionSection):
        def compressor(self):
            return _Declares(value)

    return Declared


@pytest.fixture
def own():
    names = []

    def register(name, section):
        fedsim.register_compressor(name, section)
        names.append(name)

    yield register
    for n in names:
        COMPRESSORS.unregister(n)


@pytest.mark.parametrize("value, shown", [
    (-1.0, "= -1.0"), (math.nan, "= nan"), (math.inf, "= inf"), ("12", "= '12'"), (True, "= True"),
    (torch.tensor(3.0), "= tensor(3.)"), (None, "= None"), (10**400, "= 1000000000"),
    (ZeroDivisionError("no"), "failed: ZeroDivisionError: no"),
])
def test_declared_bytes_must_be_a_finite_number_at_least_zero(own, value, shown, write_yaml, capsys):
    own("declared", _section(value))
    err = exit_2(capsys, ["validate", str(write_yaml({**BASE, "algorithm": {"compression": {"name": "declared"}}}))],
                 "algorithm.compression: compressor 'declared': payload_bytes(1, 2)", shown)
    assert len(err) < 400


def test_a_numpy_number_of_bytes_is_a_number(own):
    import numpy as np

    own("np_bytes", _section(np.float32(12.0)))
    assert algorithm(compression="np_bytes").compression.name == "np_bytes"


def test_a_failing_or_foreign_compressor_method_is_one_line(own, write_yaml, capsys):
    class Broken(CompressionSection):
        def compressor(self):
            raise RuntimeError("no such mode")

    class NotOne(CompressionSection):
        def compressor(self):
            return lambda v: v

    own("broken", Broken)
    own("not_one", NotOne)
    exit_2(capsys, ["validate", str(write_yaml({**BASE, "algorithm": {"compression": "broken"}}))],
           "algorithm.compression: compressor 'broken': compressor() failed: RuntimeError: no such mode")
    exit_2(capsys, ["validate", str(write_yaml({**BASE, "algorithm": {"compression": "not_one"}}))],
           "algorithm.compression: compressor 'not_one': compressor() returned function, not a fedsim.compression.Compressor")


def test_registration_takes_only_a_section_class(own):
    with pytest.raises(RegistryError, match="expected a subclass of fedsim.compression.CompressionSection"):
        fedsim.register_compressor("bad", _Declares(1.0))
    with pytest.raises(RegistryError, match="already registered"):
        fedsim.register_compressor("topk", _section(1.0))
    own("lazy_one", "fedsim.compression.sign:SignSection")  # 'module:attribute', as the built-ins
    assert algorithm(compression="lazy_one").compression.compressor() == Sign()


class _Mangles(Compressor):
    def __init__(self, how):
        object.__setattr__(self, "how", how)

    def payload_bytes(self, n, b):
        return float(n)

    def compress_rows(self, rows, gens):
        if self.how == "shape":
            return rows[:, :-1].clone()
        if self.how == "dtype":
            return rows.double()
        if self.how == "inplace":
            return rows.mul_(2)
        if self.how == "list":
            return rows.tolist()
        raise ValueError("cannot compress this\nsecond line")


@pytest.mark.parametrize("how, message", [
    ("shape", "compress_rows changed the update's shape ((2, 13) -> (2, 12))"),
    ("dtype", "compress_rows changed the update's dtype (torch.float32 -> torch.float64)"),
    ("inplace", "compress_rows wrote into its input"),
    ("list", "compress_rows returned list, not a tensor"),
    ("raise", "compress_rows failed on a probe update: ValueError: cannot compress this"),
])
def test_the_build_time_probe_refuses_a_transform_that_changes_the_update(how, message):
    params = {"w": torch.zeros(3, 4), "b": torch.zeros(1)}
    with pytest.raises(ScenarioError) as err:
        check_compression(_Mangles(how), params, "algorithm.compression", "mine")
    assert str(err.value) == f"algorithm.compression: compressor 'mine': {message}"


def test_the_build_time_check_passes_the_built_ins_and_checks_the_models_own_bytes():
    params = {"w": torch.zeros(30, 10, dtype=torch.float64), "b": torch.zeros(10, dtype=torch.float64)}
    for name in COMPRESSORS.names():
        keys = {"ratio": 0.1} if name in ("topk", "randk") else {"levels": 3} if name == "qsgd" else {}
        check_compression(COMPRESSORS.get(name)(name=name, **keys).compressor(), params)

    class Big(_Declares):
        def payload_bytes(self, n, b):
            return -1.0 if n == 310 else 1.0  # fine at the scenario's probe sizes, not for this model

    with pytest.raises(ScenarioError, match=r"^algorithm.compression: compressor 'Big': payload_bytes\(310, 8\) = -1.0"):
        check_compression(Big(1.0), params)
    with pytest.raises(ScenarioError, match="payload_bytes"):
        upload_bytes(Big(1.0), params)
    with pytest.raises(ScenarioError, match="^algorithm.compression: the parameters must share one floating dtype"):
        check_compression(_Declares(1.0), {"w": torch.zeros(3), "i": torch.zeros(3, dtype=torch.int64)})


def test_a_plugin_module_registers_a_compressor(tmp_path, write_yaml, capsys, monkeypatch):
    (tmp_path / "comp_plugin_26.py").write_text(
        "import fedsim\nfrom fedsim.compression.fp16 import FP16Section\n\n"
        "class Halfish(FP16Section):\n    name: str = 'halfish'\n\n"
        "fedsim.register_compressor('halfish', Halfish)\n")
    monkeypatch.chdir(tmp_path)
    path = write_yaml({**BASE, "algorithm": {"compression": {"name": "halfish"}}})
    try:
        exit_2(capsys, ["validate", str(path)], "algorithm.compression.name: unknown compressor 'halfish'")
        from fedsim.cli import main

        assert main(["validate", str(path), "--plugin", "comp_plugin_26"]) == 0
    finally:
        COMPRESSORS.unregister("halfish")


def test_a_scenario_without_compression_dumps_as_before():
    """Off, the keys are left out of the resolved scenario.yaml: a run folder written before them
    still resumes (its stored scenario is compared with the dump)."""
    import yaml

    text = dump_scenario(parse_scenario(BASE))
    assert "compression" not in text
    assert "compression" in yaml.safe_load(dump_scenario(parse_scenario(
        {**BASE, "algorithm": {"compression": "fp16"}})))["algorithm"]
