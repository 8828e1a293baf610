"""The contracts of a researcher's own compressor and selection rule (issue 38 defect 3, item 7):
mistakes that used to pass silently are one line naming the piece by its registered name.

Expected values are by hand: a compressor that returns its input is the identity, so error
feedback must deliver the whole update and keep a zero residual; unbiased uniform weights
p_i m / q sum to at most m / q (m candidates, q picked)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import torch

import fedsim
from fedsim import registries
from fedsim.clock.feedback import SelectionError, SelectionFailed, Selector
from fedsim.clock.selection import Observations, Picked, Request, SelectionRule, Uniform, check_picked
from fedsim.compression import Compression, CompressionSection, Compressor
from fedsim.compression.apply import check_compression, compress_cohort, compress_model
from fedsim.compression.fp16 import Half
from fedsim.compression.none import Identity
from fedsim.compression.qsgd import QSGD
from fedsim.compression.randk import RandK
from fedsim.compression.sign import Sign
from fedsim.compression.topk import TopK
from fedsim.errors import PartError, ScenarioError
from fedsim.scenario import parse_scenario
from fedsim.selection.section import SelectionSection

BUILTINS = [Identity(), TopK(0.3), TopK(0.01), RandK(0.3), RandK(0.3, scaled=False), QSGD(3), QSGD(255), Sign(), Half()]


def _deltas(c=3, n=11, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(c, n, generator=g, dtype=dtype), "b": torch.randn(c, 2, generator=g, dtype=dtype)}


# --------------------------------------------------------------------------- compressors
@dataclass(frozen=True)
class Echo(Compressor):
    """The identity, written as a researcher might: it returns its input (not ``lossless``)."""

    def payload_bytes(self, n, b):
        return float(n * b)

    def compress_rows(self, rows, gens):
        return rows


@dataclass(frozen=True)
class EchoView(Echo):
    def compress_rows(self, rows, gens):
        return rows[:, :]


@pytest.mark.parametrize("comp", [Echo(), EchoView()], ids=["itself", "a view"])
def test_a_compressor_returning_its_input_with_error_feedback_delivers_the_whole_update(comp):
    """C = identity: the server receives Delta (+ e = 0) exactly and the residual stays 0. Before,
    e' = u - C(u) was computed in place on u, which *was* C(u): the server received zeros."""
    d = _deltas()
    applied, res = compress_cohort(Compression(comp, error_feedback=True), d, [0, 1, 2], [0, 0, 0], {}, seed=0)
    assert all(torch.equal(applied[k], d[k]) for k in d)
    assert all(torch.count_nonzero(res[c][k]) == 0 for c in range(3) for k in d)
    # a second upload with the (zero) residuals: still the update itself
    again, _ = compress_cohort(Compression(comp, error_feedback=True), d, [0, 1, 2], [1, 1, 1], res, seed=0)
    assert all(torch.equal(again[k], d[k]) for k in d)


def _run_losses(compression):
    raw = {"name": "echo", "seed": 1, "rounds": 3, "data": {"name": "synthetic", "clients": 4},
           "model": {"name": "logreg"}, "system": {"speed": 4.0},
           "round": {"policy": "wait", "local_steps": 3},
           "algorithm": {"name": "fedavg", "lr": 0.1, **({"compression": compression} if compression else {})}}
    return fedsim.run(raw).rounds["test_loss"].tolist()


def test_a_run_with_an_echo_compressor_and_error_feedback_learns_as_an_uncompressed_run():
    fedsim.register_compressor("echo_ef", EchoSection)
    try:
        echo = _run_losses({"name": "echo_ef", "error_feedback": True})
    finally:
        registries.COMPRESSORS.unregister("echo_ef")
    plain = _run_losses(None)
    assert echo == plain and len(set(plain)) == 3  # the model moves every round, as without compression


class EchoSection(CompressionSection):
    def compressor(self):
        return Echo()


@dataclass(frozen=True)
class Declares(Compressor):
    """Declares ``bytes_for(n)`` bytes; the identity otherwise."""

    bytes_at: float = 0.0
    only_n: int | None = None

    def payload_bytes(self, n, b):
        return self.bytes_at if self.only_n in (None, n) else float(n * b)

    def compress_rows(self, rows, gens):
        return rows.clone()


class HugeSection(CompressionSection):
    bytes_at: float = 1.5e308

    def compressor(self):
        return Declares(self.bytes_at)


@pytest.fixture
def huge():
    fedsim.register_compressor("huge", HugeSection)
    yield
    registries.COMPRESSORS.unregister("huge")


def _algorithm(compression, link="compression"):
    return parse_scenario({"data": {"name": "quadratic", "clients": 2}, "round": {"policy": "window", "window": 5.0},
                           "algorithm": {link: compression}}).algorithm


def test_a_payload_above_the_system_payload_bound_is_refused_in_one_line(huge):
    """system.payload_bytes stops at 1e15 bytes; a compressor's declared payload too (1.5e308 gave
    sim_time inf). 1e15 itself is allowed; fractional bytes are allowed."""
    with pytest.raises(ScenarioError) as err:
        _algorithm({"name": "huge"})
    assert str(err.value) == ("algorithm.compression: compressor 'huge': payload_bytes(1, 2) = 1.5e+308; must be at "
                              "most 1e+15 bytes (MAX_PAYLOAD_BYTES, as system.payload_bytes)")
    with pytest.raises(ScenarioError, match=r"^algorithm.downlink_compression: compressor 'huge': .*at most 1e\+15"):
        _algorithm({"name": "huge", "bytes_at": 1e15 + 1}, "downlink_compression")
    assert _algorithm({"name": "huge", "bytes_at": 1e15}).compression.name == "huge"
    assert _algorithm({"name": "huge", "bytes_at": 0.5}).compression.name == "huge"


def test_a_payload_above_the_bound_for_the_models_own_size_is_refused_when_the_run_is_built():
    with pytest.raises(ScenarioError, match=r"compressor 'mine': payload_bytes\(610, 4\) = 2000000000000000.0; "
                                            "must be at most"):
        check_compression(Declares(2e15, only_n=610), {"x": torch.zeros(610)}, name="mine")


@dataclass(frozen=True)
class NanWhenPositive(Compressor):
    """NaN for every row whose first entry is > 0: a bug the probe may not meet."""

    def payload_bytes(self, n, b):
        return float(n * b)

    def compress_rows(self, rows, gens):
        out = rows.clone()
        out[rows[:, 0] > 0] = float("nan")
        return out


def test_a_compressor_turning_a_finite_update_into_nan_is_named_not_reported_as_divergence():
    d = {"x": torch.tensor([[-1.0, 2.0], [3.0, 4.0], [-5.0, 6.0]])}
    with pytest.raises(PartError) as err:
        compress_cohort(Compression(NanWhenPositive(), name="nan_pos"), d, [7, 8, 9], [4, 4, 4], seed=0)
    assert str(err.value) == ("algorithm.compression: compressor 'nan_pos': compress_rows returned NaN for client 8's "
                              "update (job key 4), which was finite; its output must be finite where its input is")
    with pytest.raises(PartError, match="^algorithm.downlink_compression: compressor 'nan_pos': .* model version 3"):
        compress_model(NanWhenPositive(), {"x": torch.tensor([1.0, 2.0])}, seed=0, version=3, name="nan_pos")


def test_a_non_finite_update_may_come_out_non_finite_and_fp16_may_overflow():
    """A diverged update (NaN in) is the model's result, not the compressor's fault; fp16 declares
    that finite entries beyond 65504 become inf."""
    d = {"x": torch.tensor([[float("nan"), 2.0], [float("inf"), -6.0]])}
    out, _ = compress_cohort(Compression(AlwaysNan()), d, [0, 1], [0, 0], seed=0)
    assert torch.isnan(out["x"]).all()
    with pytest.raises(PartError, match="client 2's update"):  # beside a finite row, that row is named
        compress_cohort(Compression(AlwaysNan()), {"x": torch.cat([d["x"], torch.ones(1, 2)])}, [0, 1, 2], [0] * 3,
                        seed=0)
    big = {"x": torch.tensor([[1e5, -7e4, 1.0]])}
    out, _ = compress_cohort(Compression(Half()), big, [0], [0], seed=0)
    assert out["x"][0].tolist() == [float("inf"), float("-inf"), 1.0]
    assert Half.overflows and not Compressor.overflows


@dataclass(frozen=True)
class CohortSign(Compressor):
    """Sign with one scale for the whole cohort (a mistake: the scale should be the row's)."""

    def payload_bytes(self, n, b):
        return float(b + (n + 7) // 8)

    def compress_rows(self, rows, gens):
        return rows.abs().mean() * torch.where(rows >= 0, 1.0, -1.0).to(rows.dtype)


@dataclass(frozen=True)
class CohortTopK(Compressor):
    """Top-k over the whole cohort at once (k = 1% of the entries of all rows)."""

    def payload_bytes(self, n, b):
        return float(n * b)

    def compress_rows(self, rows, gens):
        flat = rows.reshape(-1)
        keep = torch.topk(flat.abs(), max(1, flat.numel() // 100)).indices
        out = torch.zeros_like(flat)
        out[keep] = flat[keep]
        return out.reshape(rows.shape)


@dataclass(frozen=True)
class AlwaysNan(Compressor):
    def payload_bytes(self, n, b):
        return float(n * b)

    def compress_rows(self, rows, gens):
        return torch.full_like(rows, float("nan"))


@pytest.mark.parametrize("comp, text", [
    (CohortSign(), "compress_rows mixes rows: row 0 of a probe compressed alone differs in 610 of 610 entries"),
    (CohortTopK(), "compress_rows mixes rows: row 0 of a probe compressed alone differs in"),
    (AlwaysNan(), "compress_rows returned NaN for a finite probe update"),
])
def test_a_compressor_that_mixes_rows_or_returns_nan_is_refused_when_the_run_is_built(comp, text):
    with pytest.raises(ScenarioError) as err:
        check_compression(comp, {"w": torch.zeros(60, 10), "b": torch.zeros(10)}, name="mine")
    assert str(err.value).startswith("algorithm.compression: compressor 'mine': " + text), str(err.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 7, 610, 123_457])
@pytest.mark.parametrize("comp", BUILTINS, ids=repr)
def test_every_builtin_compressor_passes_the_build_checks(comp, n, dtype):
    check_compression(comp, {"x": torch.zeros(n, dtype=dtype)}, name="builtin")


# --------------------------------------------------------------------------- selection rules
def _request(k=2, online=(0, 1, 2, 3), m=4, p=None, is_async=False):
    p = np.full(m, 1.0 / m) if p is None else np.asarray(p, dtype=np.float64)
    on = np.asarray(online, dtype=np.int64)
    return Request(0, 0.0, k, m, p, is_async, False, lambda: on)


def test_picked_of_refuses_ids_that_are_not_integers():
    p = np.full(4, 0.25)
    for bad in ([0.5, 2.5], np.array([0.0, 2.0])):
        with pytest.raises(ValueError, match="Picked.of: client ids must be integers, got dtype float64"):
            Picked.of(bad, p)
    assert Picked.of([0, 2], p).clients.tolist() == [0, 2]
    assert Picked.of(np.array([1, 3], dtype=np.int32), p).weights.tolist() == [0.5, 0.5]
    assert len(Picked.of([], p).clients) == 0


def test_weights_summing_to_zero_or_more_than_unbiased_weights_can_are_refused():
    ones = np.ones(2, dtype=np.int64)
    with pytest.raises(ValueError, match="weights sum to 0, so the round would not move the model"):
        check_picked(Picked(np.array([0, 1]), ones, np.zeros(2)), _request(), "mine")
    # three picked of four candidates with weight 1 each: sum 3 > 4 / 3
    req = _request(k=3)
    with pytest.raises(ValueError, match=r"weights sum to 3, more than 1.33333 \(candidates / picked"):
        check_picked(Picked(np.array([0, 1, 2]), np.ones(3, dtype=np.int64), np.ones(3)), req, "mine")
    # unbiased uniform weights p_i m / q: p = (0.7, 0.1, 0.1, 0.1), picked {0, 1}: 1.4 + 0.2 = 1.6 <= 4 / 2
    p = [0.7, 0.1, 0.1, 0.1]
    ok = check_picked(Picked(np.array([0, 1]), ones, np.array([1.4, 0.2])), _request(p=p), "mine")
    assert ok.weights.tolist() == [1.4, 0.2]
    # zeros are what p says when the picked hold no data; async weights are not used
    check_picked(Picked(np.array([0, 1]), ones, np.zeros(2)), _request(p=[0.0, 0.0, 0.5, 0.5]), "mine")
    check_picked(Picked(np.array([0, 1]), ones, np.zeros(2)), _request(is_async=True), "mine")


@pytest.mark.parametrize("weights", ["normalized", "unbiased"])
@pytest.mark.parametrize("k", [1, 2, 3, 5, None])
def test_uniforms_own_weights_pass_the_check(weights, k):
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    for key in range(20):
        rule = Uniform(weights)
        req = Request(key, 0.0, k, 5, p, False, False, lambda: np.array([0, 1, 3, 4]))
        check_picked(rule.select(7, req)[1], req, "uniform")


@dataclass(frozen=True)
class Vandal(SelectionRule):
    """Writes into what it is handed."""

    target: str = "p"
    uses_feedback: ClassVar[bool] = True

    def select(self, state, request):
        if self.target == "p":
            request.p[0] = 1e9
        elif self.target == "online":
            request.online()[0] = 3
        return state, Picked.of(request.online()[: request.k], request.p)

    def observe(self, state, obs):
        obs.loss[:] = 0.0
        return state


@pytest.mark.parametrize("target", ["p", "online"])
def test_a_rule_cannot_write_fedsims_data_weights_or_candidates(target):
    p = np.array([0.5, 0.25, 0.25])
    sel = Selector(Vandal(target), 3, p, 0, name="vandal")
    with pytest.raises(SelectionFailed, match="^round.selection: vandal.select\\(\\) failed: ValueError: "
                                             "assignment destination is read-only$"):
        sel.pick(0, 0.0, 2, lambda: np.array([0, 1, 2]))
    assert p.tolist() == [0.5, 0.25, 0.25]


def test_a_rule_cannot_write_the_logged_observations():
    sel = Selector(Vandal("none"), 2, np.array([0.5, 0.5]), 0, name="vandal")
    z = np.zeros(1)
    obs = Observations(0, 1.0, np.array([0]), np.array([0]), np.array(["completed"]), np.array([2]), z + 0.1, z + 0.5,
                       z + 0.1, np.array([1.25]), np.array([3.0]), np.array([8]))
    with pytest.raises(SelectionFailed, match=r"vandal.observe\(\) failed: ValueError: assignment destination "
                                             "is read-only"):
        sel.observe(obs)
    assert obs.loss.tolist() == [1.25] and obs.loss.flags.writeable  # the log keeps what the server learned


@dataclass(frozen=True)
class Grumpy(SelectionRule):
    def select(self, state, request):
        raise KeyError("nobody")


class GrumpySection(SelectionSection):
    def clock_value(self):
        return Grumpy()


class FloatIdsSection(SelectionSection):
    def clock_value(self):
        return FloatIds()


@dataclass(frozen=True)
class FloatIds(SelectionRule):
    def select(self, state, request):
        return state, Picked.of(np.array([0.5, 2.5]), request.p)


@pytest.mark.parametrize("section, text", [
    (GrumpySection, "round.selection: my_grumpy_rule.select() failed: KeyError: 'nobody'"),
    (FloatIdsSection, "round.selection: my_grumpy_rule.select() failed: ValueError: Picked.of: client ids must be "
                      "integers, got dtype float64 (0.5, 2.5)"),
])
def test_a_rules_errors_name_the_name_it_was_registered_under(tmp_path, section, text):
    fedsim.register_selector("my_grumpy_rule", section)
    try:
        with pytest.raises(SelectionFailed) as err:
            fedsim.schedule({"data": {"name": "quadratic", "clients": 4}, "rounds": 2,
                             "round": {"policy": "wait", "local_steps": 1, "clients_per_round": 2,
                                       "selection": {"name": "my_grumpy_rule"}}}, out=tmp_path / "o")
    finally:
        registries.SELECTORS.unregister("my_grumpy_rule")
    assert str(err.value) == text
