"""fedsim.clock.keyed against a pure-Python transcription of its documented rule (SplitMix64's
finalizer, Steele, Lea and Flood 2014, on Python integers mod 2**64): exact, on every broadcast."""

import math
import zlib

import numpy as np
import pytest

from fedsim.clock.keyed import keyed_exponential, keyed_uniform

M = 2**64


def mix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) % M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % M
    return z ^ (z >> 31)


def uniform(seed: int, purpose: str, client: int, k: int) -> float:
    head = mix(mix(seed % M) ^ zlib.crc32(purpose.encode()))
    h = mix(mix(head ^ (client % M)) ^ (k % M))
    return ((h >> 11) + 0.5) / 2.0**53


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5, -3])
def test_uniforms_are_the_rule_exactly(seed):
    clients, ks = np.array([0, 1, 5, 2**40, -2]), np.array([0, 3, 1, 9, 2])
    got = keyed_uniform(seed, "availability", clients, ks)
    assert got.tolist() == [uniform(seed, "availability", int(c), int(k)) for c, k in zip(clients, ks)]
    grid = keyed_uniform(seed, "x", np.arange(3)[:, None], np.arange(4)[None, :])
    assert grid.shape == (3, 4)
    assert grid.tolist() == [[uniform(seed, "x", c, k) for k in range(4)] for c in range(3)]
    assert keyed_uniform(seed, "x", 4, np.arange(3)).tolist() == [uniform(seed, "x", 4, k) for k in range(3)]


def test_exponentials_are_minus_mean_log_u_on_every_broadcast():
    means = np.array([2.0, 0.5, 300.0])
    got = keyed_exponential(means, 1, "availability", np.arange(3), 1)
    assert got.tolist() == [-m * math.log(uniform(1, "availability", c, 1)) for c, m in enumerate(means)]
    wide = keyed_exponential(np.array([[1.0], [2.0]]), 1, "a", np.arange(3), 0)  # mean of more dimensions
    assert wide.tolist() == [[-m * math.log(uniform(1, "a", c, 0)) for c in range(3)] for m in (1.0, 2.0)]
