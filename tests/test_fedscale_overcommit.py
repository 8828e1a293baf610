"""FedScale's over-commitment count (issue 28, FedScale wording): int(K F) in floating point, as its
aggregator's select_participants computes it; fedsim's own rule is ceil(F K) of the written decimal."""

import math

import pytest

from fedsim.clock.policy import overcommit_size
from fedsim.clock.overcommit import fedscale_overcommit_size


@pytest.mark.parametrize("k, factor, fedscale, fedsim", [
    (7, 1.3, 9, 10),     # the case: 9.1
    (10, 1.3, 13, 13),   # 13.000000000000002 truncated
    (1, 1.3, 1, 2),
    (3, 1.5, 4, 5),      # 4.5
    (4, 1.5, 6, 6),
    (100, 1.15, 114, 115),  # 114.99999999999999 in floating point: FedScale selects 114
    (5, 1.0, 5, 5),
])
def test_fedscale_truncates_the_float_product(k, factor, fedscale, fedsim):
    assert fedscale_overcommit_size(factor, k) == fedscale == int(k * factor)
    assert overcommit_size(factor, k) == fedsim


def test_never_fewer_than_k():
    for k in range(1, 300):
        for f in (1.0, 1.0000001, 1.01, 1.1, 1.3, 2.0, 100.0):
            assert fedscale_overcommit_size(f, k) >= k
            assert fedscale_overcommit_size(f, k) == math.floor(k * f)


def test_devices_doc_states_the_fedscale_policies_and_counts(tmp_path):
    """devices.md: fedscale semantics take every synchronous policy, overcommit included (it runs),
    and the page names both counts, not "no overcommitment policy" (issue 28)."""
    from pathlib import Path

    import fedsim

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "devices.md").read_text().split())
    assert "no overcommitment policy" not in text and "a few hundred" not in text
    assert "(`window`, `wait`, `deadline`, `overcommit`)" in text and "`fedsim.clock.overcommit.fedscale_overcommit_size`" in text
    assert "K = 7, F = 1.3: 10 against 9" in text and overcommit_size(1.3, 7) == 10 and fedscale_overcommit_size(1.3, 7) == 9
    assert "`filter_less` argument (default 32)" in text and "about 2.7 KB more" in text
    (tmp_path / "t.csv").write_text("client,start,end,online,speed\n0,0,100,1,1\n1,0,100,1,2\n2,0,100,1,3\n")
    plan = fedsim.schedule({"data": {"name": "quadratic", "clients": 3, "dim": 1}, "rounds": 2,
                            "round": {"policy": "overcommit", "local_steps": 2, "clients_per_round": 2},
                            "system": {"trace": str(tmp_path / "t.csv"), "trace_semantics": "fedscale"}})
    assert plan.clients.groupby("round").size().tolist() == [fedscale_overcommit_size(1.3, 2)] * 2  # int(2.6) = 2
