"""Compressors (issue 26 item 1): exact values on hand-made vectors, QSGD's unbiasedness and
variance bound (Alistarh et al. 2017, Lemma 3.1), rand-k's unbiasedness, the byte rules against
hand counts, error feedback's bookkeeping, and a client's result independent of its cohort."""

from __future__ import annotations

import math

import pytest
import torch

from fedsim.compression import Compression
from fedsim.compression.apply import compress_cohort, compress_model, download_bytes, generators, upload_bytes
from fedsim.compression.base import flatten, index_bytes, kept, unflatten
from fedsim.compression.fp16 import Half
from fedsim.compression.none import Identity
from fedsim.compression.qsgd import QSGD
from fedsim.compression.randk import RandK
from fedsim.compression.sign import Sign
from fedsim.compression.topk import TopK

ALL = [Identity(), TopK(0.3), RandK(0.3), RandK(0.3, scaled=False), QSGD(3), Sign(), Half()]


def rows(*vs, dtype=torch.float32):
    return torch.tensor(vs, dtype=dtype)


def gens(c, seed=0):
    return generators(seed, "compress", [(i, 0) for i in range(c)], torch.device("cpu"))


# --------------------------------------------------------------------------- exact values
def test_topk_keeps_the_largest_magnitudes():
    v = rows([0.5, -3.0, 2.0, -2.5, 1.0, 0.0])
    assert TopK(0.5).compress_rows(v, None).tolist() == [[0.0, -3.0, 2.0, -2.5, 0.0, 0.0]]  # k = 3
    assert TopK(0.01).compress_rows(v, None).tolist() == [[0.0, -3.0, 0.0, 0.0, 0.0, 0.0]]  # k = max(1, ...)
    assert TopK(1.0).compress_rows(v, None).tolist() == v.tolist()


def test_topk_ties_keep_the_lowest_indices():
    # k = 3: 3 and 2 are above the cut, three entries tie at magnitude 1: index 1 is kept
    v = rows([2.0, 1.0, -1.0, 1.0, 3.0], [1.0, -1.0, 1.0, 1.0, 1.0])
    out = TopK(0.6).compress_rows(v, None)
    assert out.tolist() == [[2.0, 1.0, 0.0, 0.0, 3.0], [1.0, -1.0, 1.0, 0.0, 0.0]]
    # an all-zero row keeps its first k entries (zeros): nothing moves
    assert TopK(0.5).compress_rows(rows([0.0] * 4), None).tolist() == [[0.0] * 4]


def test_topk_keeps_nan_and_inf_as_the_largest():
    nan, inf = float("nan"), float("inf")
    out = TopK(0.4).compress_rows(rows([1.0, nan, 5.0, -inf, 2.0]), None)  # k = 2: the NaN and the -inf
    assert math.isnan(out[0, 1]) and out[0, 3] == -inf and out[0, [0, 2, 4]].tolist() == [0.0, 0.0, 0.0]


def test_sign_is_the_scaled_sign():
    # ||v||_1 / n = 6 / 4 = 1.5; 0 is sent as +
    assert Sign().compress_rows(rows([1.0, -2.0, 0.0, 3.0], [-0.5, -0.5, 0.25, 0.75]), None).tolist() == [
        [1.5, -1.5, 1.5, 1.5], [-0.5, -0.5, 0.5, 0.5]]


def test_fp16_rounds_to_nearest_even_and_overflows_to_inf():
    u = 2.0**-11  # half of float16's spacing at 1
    v = rows([1 + u, 1 + 3 * u, -(1 + 5 * u), 65504.0, 65520.0, 1e-8, 3e-8, -7.0])
    out = Half().compress_rows(v, None)[0].tolist()
    assert out[:3] == [1.0, 1 + 4 * u, -(1 + 4 * u)]  # ties to even: 1, 1 + 2^-9, 1 + 2^-9
    assert out[3] == 65504.0 and out[4] == math.inf  # 65520 is the tie with 2^16: even -> inf
    assert out[5] == 0.0 and out[6] == 2.0**-24 and out[7] == -7.0  # below half the least subnormal -> 0


def test_randk_keeps_k_entries_scaled_by_n_over_k():
    v = torch.arange(1.0, 11.0, dtype=torch.float64).repeat(50, 1)
    for comp, factor in ((RandK(0.3), 10 / 3), (RandK(0.3, scaled=False), 1.0)):
        out = comp.compress_rows(v, gens(50))
        kept_mask = out != 0
        assert kept_mask.sum(dim=1).tolist() == [3] * 50
        assert torch.equal(out[kept_mask], (v * factor)[kept_mask] if factor != 1 else v[kept_mask])


def test_qsgd_values_lie_on_the_grid():
    v = rows([3.0, -4.0, 0.0, 0.0], dtype=torch.float64)  # N = 5
    out = QSGD(2).compress_rows(v.repeat(200, 1), gens(200))
    # s |v| / N = (1.2, 1.6, 0, 0): entry 0 is 2.5 or 5, entry 1 is -2.5 or -5, zeros stay 0
    assert set(out[:, 0].tolist()) == {2.5, 5.0} and set(out[:, 1].tolist()) == {-2.5, -5.0}
    assert out[:, 2:].eq(0).all()
    assert QSGD(2).compress_rows(torch.zeros(1, 4), gens(1)).tolist() == [[0.0] * 4]  # Q(0) = 0


# --------------------------------------------------------------------------- unbiasedness, variance
def test_qsgd_is_unbiased_within_hoeffding_and_meets_lemma_3_1():
    """M draws of Q(v) for one v: each entry lies in an interval of width N / s, so by Hoeffding's
    inequality |mean - v_j| >= 4 (N / s) / sqrt(M) has probability <= 2 exp(-32) ~ 3e-14. The exact
    variance sum_j (N/s)^2 p_j (1 - p_j) (p_j = r_j - l_j) is computed independently of the code,
    checked against the bound min(n / s^2, sqrt(n) / s) ||v||^2 and against the draws' mean
    squared error (each term lies in [0, n (N / s)^2]; the same Hoeffding margin)."""
    m, s = 4000, 3
    v = torch.tensor([0.9, -0.35, 0.2, 0.05, -0.6, 0.0, 0.33, -0.01], dtype=torch.float64)
    n, norm = v.numel(), float(v.norm())
    out = QSGD(s).compress_rows(v.repeat(m, 1), gens(m, seed=7))
    width = norm / s
    assert (out.mean(0) - v).abs().max() < 4 * width / math.sqrt(m)
    r = [s * abs(x) / norm for x in v.tolist()]
    exact = sum(width**2 * (x - math.floor(x)) * (1 - (x - math.floor(x))) for x in r)
    bound = min(n / s**2, math.sqrt(n) / s) * norm**2
    assert exact <= bound
    mse = float(((out - v) ** 2).sum(1).mean())
    assert abs(mse - exact) < 4 * n * width**2 / math.sqrt(m)


@pytest.mark.parametrize("s", [1, 2, 16])
def test_qsgd_draws_only_the_two_neighbouring_levels(s):
    """On 200 vectors (Gaussian, sparse, one-hot, float64) every entry of Q(v) is N sgn(v_j) l_j / s
    or N sgn(v_j) (l_j + 1) / s: with the unbiasedness above this two-point law is QSGD's, whose
    exact variance sum_j (N/s)^2 p_j (1 - p_j) is checked against Lemma 3.1's bound here."""
    g = torch.Generator().manual_seed(s)
    for i in range(200):
        n = int(torch.randint(1, 300, (1,), generator=g))
        v = torch.randn(n, generator=g, dtype=torch.float64)
        if i % 3 == 1:
            v = v * (torch.rand(n, generator=g) < 0.1)
        elif i % 3 == 2:
            v = torch.zeros(n, dtype=torch.float64)
            v[int(torch.randint(0, n, (1,), generator=g))] = -2.0
        norm = float(v.norm())
        q = QSGD(s).compress_rows(v.unsqueeze(0), gens(1, seed=i))[0]
        if norm == 0:
            assert q.eq(0).all()
            continue
        r = s * v.abs() / norm
        level = q.abs() * s / norm
        assert ((level - r.floor()).abs() < 1e-9).logical_or((level - r.floor() - 1).abs() < 1e-9).all()
        assert (q * v >= 0).all()  # the sign is v's
        p = r - r.floor()
        exact = float(((norm / s) ** 2 * p * (1 - p)).sum())
        assert exact <= min(n / s**2, math.sqrt(n) / s) * norm**2 * (1 + 1e-12)


def test_scaled_randk_is_unbiased_within_hoeffding():
    m = 4000
    v = torch.tensor([1.0, -2.0, 0.5, 3.0, -0.25, 0.0, 1.5, -1.0, 2.5, 0.75], dtype=torch.float64)
    out = RandK(0.2).compress_rows(v.repeat(m, 1), gens(m, seed=3))  # k = 2, n / k = 5
    width = 5 * v.abs()  # each entry is 0 or 5 v_j
    assert ((out.mean(0) - v).abs() <= 4 * width / math.sqrt(m)).all()
    # each index kept with probability k / n = 0.2
    freq = (out != 0).double().mean(0)[v != 0]
    assert ((freq - 0.2).abs() < 4 / math.sqrt(m)).all()


# --------------------------------------------------------------------------- bytes
@pytest.mark.parametrize("comp, n, b, expected", [
    (Identity(), 1000, 4, 4000),
    (Half(), 1001, 4, 2002),
    (Half(), 10, 8, 20),
    (TopK(0.01), 1000, 4, 10 * 4 + 10 * 4),
    (TopK(0.07), 100, 4, 7 * 8),  # 0.07 * 100 is 7.000000000000001 in floats; k = 7
    (TopK(0.001), 10, 4, 1 * 8),  # k = max(1, ceil(0.01)) = 1
    (TopK(0.5), 2**31, 4, 2**30 * 8),  # indices 0 .. 2^31 - 1 fit int32
    (TopK(0.5), 2**31 + 2, 4, (2**30 + 1) * 12),  # int64 indices
    (RandK(0.25), 1000, 8, 250 * 12),
    (QSGD(7), 1000, 4, 4 + 1000 * 4 // 8),  # 3 level bits + 1 sign bit
    (QSGD(1), 1001, 4, 4 + 251),  # 2 bits each: 2002 bits -> 251 bytes
    (QSGD(8), 8, 2, 2 + 5),  # levels 0..8: 4 bits + sign = 5 bits
    (QSGD(65535), 3, 4, 4 + 7),  # 16 level bits + 1 sign bit: 51 bits -> 7 bytes
    (Sign(), 1001, 4, 4 + 126),
    (Sign(), 8, 8, 8 + 1),
])
def test_payload_bytes_by_hand(comp, n, b, expected):
    assert comp.payload_bytes(n, b) == expected


def test_kept_and_index_bytes():
    assert [kept(r, 100) for r in (0.01, 0.07, 0.29, 0.1, 1e-9, 1.0)] == [1, 7, 29, 10, 1, 100]
    assert kept(0.3, 7) == 3  # ceil(2.1)
    assert index_bytes(2**31) == 4 and index_bytes(2**31 + 1) == 8


def test_upload_and_download_bytes_of_a_model():
    params = {"w": torch.zeros(30, 10), "b": torch.zeros(10)}  # n = 310 float32
    assert upload_bytes(TopK(0.1), params) == 31 * 8
    assert upload_bytes(TopK(0.1), params, control_variates=True) == 31 * 8 + 310 * 4  # c_i change uncompressed
    assert download_bytes(Half(), params) == 620
    assert upload_bytes(Identity(), params) == 1240  # = fedsim.devices.cost.model_bytes
    with pytest.raises(ValueError, match="one floating dtype"):
        upload_bytes(Half(), {"w": torch.zeros(3), "x": torch.zeros(3, dtype=torch.float64)})


# --------------------------------------------------------------------------- the batched transform
def test_flatten_order_and_unflatten_round_trip():
    d = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.arange(8.0).reshape(2, 2, 2) + 10}
    flat = flatten(d)
    assert flat.tolist() == [[0, 1, 2, 10, 11, 12, 13], [3, 4, 5, 14, 15, 16, 17]]
    back = unflatten(flat, d)
    assert all(torch.equal(back[k], d[k]) for k in d)


@pytest.mark.parametrize("comp", ALL, ids=lambda c: repr(c))
def test_dict_transform_keeps_shapes_and_dtypes(comp):
    d = {"w": torch.randn(3, 4, 5, dtype=torch.float64), "b": torch.randn(3, 5, dtype=torch.float64)}
    out = comp(d, gens(3) if comp.random else None)
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == {k: (v.shape, v.dtype) for k, v in d.items()}


def _cohort(c=6, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(c, 7, 9, generator=g, dtype=dtype), "b": torch.randn(c, 9, generator=g, dtype=dtype)}


@pytest.mark.parametrize("ef", [False, True])
@pytest.mark.parametrize("comp", ALL, ids=lambda c: repr(c))
def test_a_clients_result_does_not_depend_on_its_cohort(comp, ef):
    """Batched (six clients, some with residuals) == one client at a time == the cohort reversed."""
    d = _cohort()
    clients, keys = [4, 0, 7, 2, 9, 5], [3, 3, 3, 3, 3, 3]
    res0 = {0: {k: v[1] * 0.5 for k, v in _cohort(seed=1).items()}, 9: {k: v[4] for k, v in _cohort(seed=2).items()}}
    res0 = res0 if ef else {}
    cp = Compression(comp, ef)
    out, res = compress_cohort(cp, d, clients, keys, res0, seed=11)
    for i, cl in enumerate(clients):
        one, r1 = compress_cohort(cp, {k: v[i : i + 1] for k, v in d.items()}, [cl], [3], res0, seed=11)
        assert all(torch.equal(one[k][0], out[k][i]) for k in d), (cl, comp)
        if ef and not comp.lossless:  # none keeps no residual: it is 0
            assert all(torch.equal(r1[cl][k], res[cl][k]) for k in d)
    rev = list(reversed(range(6)))
    out_r, _ = compress_cohort(cp, {k: v[rev] for k, v in d.items()}, [clients[i] for i in rev], keys, res0, seed=11)
    assert all(torch.equal(out_r[k], out[k][rev]) for k in d)


def test_randomness_is_keyed_by_seed_client_and_key():
    d = _cohort(c=1)
    cp = Compression(QSGD(2))
    a = compress_cohort(cp, d, [3], [5], seed=1)[0]["w"]
    assert torch.equal(a, compress_cohort(cp, d, [3], [5], seed=1)[0]["w"])
    for clients, keys, seed in (([4], [5], 1), ([3], [6], 1), ([3], [5], 2)):
        assert not torch.equal(a, compress_cohort(cp, d, clients, keys, seed=seed)[0]["w"])


# --------------------------------------------------------------------------- error feedback
EXACT = [TopK(0.2), RandK(0.2, scaled=False), Half(), Identity()]
ROUNDED = [QSGD(4), Sign(), RandK(0.2, scaled=True)]


@pytest.mark.parametrize("comp", EXACT + ROUNDED, ids=lambda c: repr(c))
def test_error_feedback_applied_plus_residual_is_raw_plus_previous_residual(comp):
    """Every round: applied + e' = Delta + e, exactly for top-k, unscaled rand-k and fp16 (each
    entry of u = Delta + e is kept whole or left whole; fp16: u - fp16(u) is exact by Sterbenz's
    lemma), and within rounding for QSGD, sign and scaled rand-k (u - C(u) is rounded once):
    |applied + e' - u| <= 2 eps (|u| + |applied|) entrywise."""
    clients, res = [0, 1, 2, 3], {}
    cp = Compression(comp, error_feedback=True)
    eps = torch.finfo(torch.float32).eps
    for rnd in range(5):
        d = _cohort(c=4, seed=rnd)
        zero = {k: torch.zeros_like(v[0]) for k, v in d.items()}  # a client without a residual: 0
        prev = {i: res.get(i, zero) for i in clients}
        out, res = compress_cohort(cp, d, clients, [rnd] * 4, res, seed=0)
        for row, i in enumerate(clients):
            for k in d:
                u = d[k][row] + prev[i][k]
                total = out[k][row] + res.get(i, zero)[k]
                if comp in EXACT:
                    assert torch.equal(total, u), (rnd, i, k)
                else:
                    assert ((total - u).abs() <= 2 * eps * (u.abs() + out[k][row].abs())).all()


def test_error_feedback_accumulates_what_topk_leaves():
    """Hand-made: top-1 of (3, 1) sends 3 and keeps 1; next round 1 + 2.5 = 3.5 beats 2."""
    cp = Compression(TopK(0.5), error_feedback=True)
    out, res = compress_cohort(cp, {"x": rows([3.0, 1.0])}, [0], [0], {}, seed=0)
    assert out["x"].tolist() == [[3.0, 0.0]] and res[0]["x"].tolist() == [0.0, 1.0]
    out, res = compress_cohort(cp, {"x": rows([2.0, 2.5])}, [0], [1], res, seed=0)
    assert out["x"].tolist() == [[0.0, 3.5]] and res[0]["x"].tolist() == [2.0, 0.0]


def test_without_error_feedback_residuals_are_left_alone():
    before = {5: {"x": torch.ones(2)}}
    out, res = compress_cohort(Compression(TopK(0.5)), {"x": rows([3.0, 1.0])}, [5], [0], before, seed=0)
    assert out["x"].tolist() == [[3.0, 0.0]] and res == before and res is not before


def test_a_client_twice_in_one_cohort_is_compressed_in_row_order():
    cp = Compression(TopK(0.5), error_feedback=True)
    d = {"x": rows([3.0, 1.0], [2.0, 2.5])}
    both, res = compress_cohort(cp, d, [0, 0], [0, 1], {}, seed=0)
    o1, r1 = compress_cohort(cp, {"x": d["x"][:1]}, [0], [0], {}, seed=0)
    o2, r2 = compress_cohort(cp, {"x": d["x"][1:]}, [0], [1], r1, seed=0)
    assert torch.equal(both["x"], torch.cat([o1["x"], o2["x"]])) and torch.equal(res[0]["x"], r2[0]["x"])


def test_residuals_survive_a_checkpoint_and_resume_byte_identically(tmp_path):
    """Residuals are a plain {client: {name: tensor}}: saved and loaded (weights_only) mid-run, the
    rest of the run gives the same bytes as an uninterrupted one."""
    cp = Compression(QSGD(3), error_feedback=True)

    def rounds(start, stop, res):
        outs = []
        for rnd in range(start, stop):
            out, res = compress_cohort(cp, _cohort(c=3, seed=rnd), [0, 1, 2], [rnd] * 3, res, seed=5)
            outs.append(out)
        return outs, res

    straight, res_s = rounds(0, 4, {})
    first, res_mid = rounds(0, 2, {})
    torch.save(res_mid, tmp_path / "res.pt")
    loaded = torch.load(tmp_path / "res.pt", weights_only=True)
    second, res_r = rounds(2, 4, loaded)
    for a, b in zip(straight, first + second):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(res_s[i][k], res_r[i][k]) for i in res_s for k in res_s[i])


# --------------------------------------------------------------------------- downlink
def test_the_broadcast_is_one_draw_per_version():
    x = {"w": torch.randn(5, 4), "b": torch.randn(4)}
    a = compress_model(QSGD(2), x, seed=0, version=3)
    assert torch.equal(a["w"], compress_model(QSGD(2), x, seed=0, version=3)["w"])
    assert not torch.equal(a["w"], compress_model(QSGD(2), x, seed=0, version=4)["w"])
    h = compress_model(Half(), x, seed=0, version=0)
    assert all(torch.equal(h[k], x[k].half().float()) for k in x) and h["b"].shape == (4,)
    assert compress_model(Identity(), x, seed=0, version=0)["w"] is x["w"]
