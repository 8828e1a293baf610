"""docs/extending.md's statements of the selection-rule and compressor contracts (issue 38
defect 4), against the code: the fields it names, the class variables, the payload bound and
fractional bytes."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from fedsim import limits
from fedsim.clock.selection import Observations, Request
from fedsim.compression import Compressor
from fedsim.compression.apply import check_compression
from fedsim.compression.section import check_payload

ROOT = Path(__file__).resolve().parent.parent
EXT = (ROOT / "docs" / "extending.md").read_text()
SELECTION = EXT.split("## Your selection rule", 1)[1].split("\n## ", 1)[0]
COMPRESSOR = EXT.split("## Your compressor", 1)[1].split("\n## ", 1)[0]


def test_the_selection_section_names_every_field_of_request_and_observations():
    for cls in (Request, Observations):
        for f in fields(cls):
            if not f.name.startswith("_"):
                assert f"`{f.name}" in SELECTION, (cls.__name__, f.name)
    assert "`Picked(clients, counts, weights)`" in SELECTION and "`Picked.of(clients, p)`" in SELECTION
    assert "read-only" in SELECTION and "registered name" in SELECTION


@pytest.mark.parametrize("flag", ["random", "lossless", "overflows"])
def test_the_compressor_flags_are_class_variables_named_in_the_docs(flag):
    assert f"`{flag}`" in COMPRESSOR
    assert flag not in {f.name for f in fields(Compressor)}  # a ClassVar, not a dataclass field
    assert getattr(Compressor, flag) is False


class Fractional(Compressor):
    def payload_bytes(self, n, b):
        return n * b / 3  # an average: not whole bytes

    def compress_rows(self, rows, gens):
        return rows.clone()


def test_fractional_payload_bytes_are_allowed_up_to_the_bound():
    assert "fractional bytes are allowed" in COMPRESSOR
    assert check_payload(Fractional(), 7, 4, "algorithm.compression", "third") == 28 / 3
    assert limits.MAX_PAYLOAD_BYTES == 10**15 and "`MAX_PAYLOAD_BYTES`, 1e15" in COMPRESSOR
    check_compression(Fractional(), {"x": torch.zeros(7)})
    with pytest.raises(ValueError, match="must be at most 1e\\+15 bytes"):
        check_payload(Fractional(), 3 * 10**15, 8, "algorithm.compression", "third")
    assert re.search(r"above 1e15", COMPRESSOR)
