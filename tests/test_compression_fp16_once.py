"""fp16 of a float64 update rounds once (issue 38 defect 2): each entry is the float16 nearest to
the float64 value itself (ties to even), not to its float32 rounding. fedsim rounds a CPU tensor
with numpy's float64 -> float16 cast and a tensor on another device by rounding to odd in torch
(run here on the CPU). References: an exact rational rounding (edge cases and 3,000 random
values, both paths) and numpy's cast (one rounding, ``npy_double_to_half``) for the torch path on
200,005 random values."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from fedsim.compression.fp16 import Half, to_half_by_odd_rounding

MAX_HALF = 65504


def nearest_half(x: float) -> float:
    """The float16 nearest to ``x`` (exact rationals; ties to the even significand), +-inf from
    65520 up (the midpoint of 65504 and the next, 65536, rounds to even: up, to inf)."""
    if x == 0 or math.isinf(x):
        return x
    q = Fraction(x)
    s, a = (-1 if q < 0 else 1), abs(q)
    e = max(math.floor(math.log2(a)), -14)  # subnormals share the spacing of 2^-14's binade
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -14)
    ulp = Fraction(2) ** (e - 10)
    n, r = divmod(a, ulp)
    if r > ulp / 2 or (r == ulp / 2 and n % 2 == 1):
        n += 1
    v = n * ulp
    return s * math.inf if v > MAX_HALF else s * float(v)


EDGES = [65519.999999999, -65519.999999999, 65520.0, 65504.0, 65519.0, 65536.0,
         1 + 2**-11, 1 + 2**-11 + 2**-40, 1 + 2**-11 - 2**-40, 1 + 3 * 2**-11, 1 + 3 * 2**-11 - 2**-45,
         2**-25, 2**-25 + 2**-70, -(2**-25 + 2**-70), 3 * 2**-25, 3 * 2**-25 - 2**-70, 2**-24,
         2**-14 * (1 + 2**-11), 2**-14 * (1 + 2**-11) + 2**-60, 1e-300, 1e300, -1e300, 0.0, -0.0]


def _random(n, seed):
    g = np.random.default_rng(seed)
    return g.standard_normal(n) * np.exp(g.uniform(-25, 12, n))


PATHS = {"cpu (numpy)": lambda v: Half().compress_rows(v, None),
         "other devices (odd rounding)": lambda v: to_half_by_odd_rounding(v).to(torch.float64)}


@pytest.mark.parametrize("path", PATHS)
def test_random_values_are_the_nearest_half_computed_exactly(path):
    v = np.concatenate([_random(2_000, 5), np.nextafter(65520.0, 0) - np.arange(1000) * 1e-9])
    out = PATHS[path](torch.from_numpy(v)[None])[0].tolist()
    assert out == [nearest_half(x) for x in v.tolist()]


@pytest.mark.parametrize("path", PATHS)
def test_edge_cases_are_the_nearest_half_computed_exactly(path):
    v = torch.tensor(EDGES, dtype=torch.float64)
    out = PATHS[path](v[None])[0].tolist()
    want = [nearest_half(x) for x in EDGES]
    assert out == want
    assert out[0] == MAX_HALF and out[1] == -MAX_HALF  # the docs' promise: magnitudes below 65520 stay finite
    assert math.copysign(1, out[-1]) == -1  # -0 keeps its sign


def test_200005_random_float64_values_round_once_as_numpy_does():
    v = np.concatenate([_random(200_000, 38),
                        [65519.999999999, -65519.999999999, 1 + 2**-11 + 2**-40, 2**-25 + 2**-70, 70000.0]])
    assert len(v) == 200_005
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns when a cast overflows to inf
        want = v.astype(np.float16).astype(np.float64)
    for path in PATHS.values():
        out = path(torch.from_numpy(v).reshape(5, -1)).reshape(-1).numpy()
        assert np.array_equal(out, want)
    # the same values through float32 first disagree: the double rounding this replaces
    twice = torch.from_numpy(v).to(torch.float32).to(torch.float16).to(torch.float64).numpy()
    assert (twice != want).sum() > 0


def test_nan_and_inf_pass_and_float32_is_unchanged():
    v = torch.tensor([[math.nan, math.inf, -math.inf, 1.0]], dtype=torch.float64)
    out = Half().compress_rows(v, None)[0]
    assert math.isnan(out[0]) and out[1:].tolist() == [math.inf, -math.inf, 1.0]
    w = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0)) * 1000
    assert torch.equal(Half().compress_rows(w, None), w.to(torch.float16).to(torch.float32))
