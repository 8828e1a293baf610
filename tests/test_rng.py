"""fedsim.rng.stream: the generator numpy's SeedSequence makes of the entropy list
[seed mod 2**64, crc32(purpose), *keys], whatever path builds it."""

import zlib

import numpy as np
import pytest

from fedsim.rng import seed_int, stream


def _by_list(seed, purpose, *keys):
    entropy = [int(seed) & 0xFFFFFFFFFFFFFFFF, zlib.crc32(purpose.encode("utf-8")), *keys]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


@pytest.mark.parametrize("args", [
    (0, "batches"), (0, "batches", 0, 0), (7, "select", 3), (-1, "speed", 5),
    (2**32 - 1, "a", 2**32 - 1, 2**32), (2**63 + 5, "synthetic-client", 2**40, 0),
    (12345, "", 2**100, 0, 1), (1, "é", 0),
])
def test_stream_is_numpys_seed_sequence_of_the_entropy_list(args):
    a, b = stream(*args), _by_list(*args)
    assert np.array_equal(a.integers(0, 2**63, 16), b.integers(0, 2**63, 16))
    assert np.array_equal(a.standard_normal(5), b.standard_normal(5))


def test_streams_differ_by_every_key_and_purpose():
    draws = {tuple(stream(*args).integers(0, 2**63, 2)) for args in
             [(0, "a", 0), (1, "a", 0), (0, "b", 0), (0, "a", 1), (0, "a", 0, 1), (0, "a", 2)]}
    assert len(draws) == 6


def test_a_negative_key_is_numpys_error():
    with pytest.raises(ValueError, match="non-negative"):
        stream(0, "a", -1)


def test_seed_int_is_the_streams_first_draw():
    assert seed_int(3, "dropout", 4, 5) == int(_by_list(3, "dropout", 4, 5).integers(0, 2**63 - 1))
