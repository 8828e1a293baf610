"""Client splits: coverage, disjointness, determinism, and the skew each split promises."""

import numpy as np
import pytest

from fedsim.data import PartitionSpec, class_counts, partition

NAMES = ["iid", "dirichlet", "dirichlet_equal", "shards", "powerlaw"]


def balanced_labels(classes: int = 10, per_class: int = 200) -> np.ndarray:
    return np.repeat(np.arange(classes), per_class)


def max_class_share(labels, parts, classes=10) -> float:
    """Mean over clients of the share of the client's most common class (1/classes = no skew)."""
    counts = class_counts(labels, parts, classes)
    return float(np.mean(counts.max(axis=1) / counts.sum(axis=1)))


@pytest.mark.parametrize("name", NAMES)
def test_split_is_disjoint_sorted_int64_and_covers_all(name):
    labels = balanced_labels()
    parts = partition(labels, 20, PartitionSpec(name=name), seed=3)
    assert len(parts) == 20
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint
    assert len(allidx) == len(labels)  # 2000 = 20 * 100: dirichlet_equal also uses everything here
    assert allidx.min() >= 0 and allidx.max() < len(labels)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_split_other_seed_differs(name):
    labels = balanced_labels()
    spec = PartitionSpec(name=name, alpha=0.3)
    a = partition(labels, 10, spec, seed=7)
    b = partition(labels, 10, spec, seed=7)
    c = partition(labels, 10, spec, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_iid_sizes_differ_by_at_most_one_and_classes_mixed():
    labels = balanced_labels()
    parts = partition(labels, 7, PartitionSpec("iid"), seed=0)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 2000
    assert max_class_share(labels, parts) < 0.25  # ~0.1 expected for a shuffled split


def test_dirichlet_min_size_and_cap_rule():
    labels = balanced_labels(10, 100)
    for seed in range(5):
        parts = partition(labels, 16, PartitionSpec("dirichlet", alpha=0.1, min_size=10), seed=seed)
        sizes = np.array([len(p) for p in parts])
        assert sizes.min() >= 10
        # a client stops receiving once it holds >= n/m = 62.5 samples, so it can overshoot that by
        # at most the samples of a single class (100)
        assert sizes.max() < 1000 / 16 + 100


def test_dirichlet_skew_grows_as_alpha_falls():
    labels = balanced_labels()
    skew = {}
    for a in (0.1, 100):
        skew[a] = max_class_share(labels, partition(labels, 20, PartitionSpec("dirichlet", alpha=a), seed=0))
    assert skew[100] < 0.2  # near the balanced 0.1
    assert skew[0.1] > 0.5  # most clients are dominated by one class
    assert skew[0.1] > skew[100] + 0.3


def test_dirichlet_gives_up_with_clear_error():
    labels = balanced_labels(10, 10)  # 100 samples; 10 clients x min 10 needs an exact 10/10/.../10 split
    with pytest.raises(ValueError, match="dirichlet: no split with >= 10 samples per client after 1000 tries"):
        partition(labels, 10, PartitionSpec("dirichlet", alpha=0.05, min_size=10), seed=0)
    with pytest.raises(ValueError, match="exceeds"):
        partition(labels, 11, PartitionSpec("dirichlet", min_size=10), seed=0)


def test_dirichlet_equal_sizes_equal_and_skew_grows_as_alpha_falls():
    labels = balanced_labels()
    for n_clients in (20, 30):  # 2000/30 leaves 20 samples unused
        parts = partition(labels, n_clients, PartitionSpec("dirichlet_equal", alpha=0.5), seed=1)
        assert {len(p) for p in parts} == {2000 // n_clients}
        assert len(np.unique(np.concatenate(parts))) == n_clients * (2000 // n_clients)
    low = max_class_share(labels, partition(labels, 20, PartitionSpec("dirichlet_equal", alpha=0.1), 0))
    high = max_class_share(labels, partition(labels, 20, PartitionSpec("dirichlet_equal", alpha=100), 0))
    assert high < 0.2 and low > 0.4 and low > high + 0.25


def test_dirichlet_equal_refills_from_remaining_classes():
    # 90 samples of class 0, 10 of class 1; a flat prior wants ~half class 1 per client but only 10
    # exist: once class 1 runs out, every later draw goes to class 0, and nothing is lost.
    labels = np.array([0] * 90 + [1] * 10)
    parts = partition(labels, 10, PartitionSpec("dirichlet_equal", alpha=1000.0), seed=0)
    assert [len(p) for p in parts] == [10] * 10
    counts = class_counts(labels, parts, 2)
    assert counts[:, 1].sum() == 10 and counts[:, 0].sum() == 90
    assert counts[0, 1] >= 3  # the first client, drawn with a ~50/50 prior, did get class 1 samples
    assert counts[-1, 1] == 0  # class 1 was exhausted before the last client


def test_shards_give_exactly_classes_per_client_labels_when_shards_are_pure():
    labels = balanced_labels(10, 30)  # 10 clients x 1 or 5 clients x 2 -> 10 class-pure shards
    for n_clients, k in ((5, 2), (10, 1)):
        parts = partition(labels, n_clients, PartitionSpec("shards", classes_per_client=k), seed=2)
        assert all(len(np.unique(labels[p])) == k for p in parts)
        assert all(len(p) == 30 * k for p in parts)


def test_shards_never_exceed_classes_per_client_labels():
    labels = balanced_labels(10, 100)  # 50 clients x 2 = 100 shards of 10, 10 per class: all pure
    parts = partition(labels, 50, PartitionSpec("shards", classes_per_client=2), seed=4)
    assert all(1 <= len(np.unique(labels[p])) <= 2 for p in parts)


def test_powerlaw_sizes_unequal_and_at_least_min_size():
    labels = balanced_labels()
    parts = partition(labels, 20, PartitionSpec("powerlaw", power=1.5, min_size=20), seed=0)
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == 2000 and sizes.min() >= 20
    assert sizes.max() >= 3 * sizes.min()
    assert max_class_share(labels, parts) < 0.6  # samples themselves are drawn iid


def test_class_counts_by_hand():
    labels = np.array([0, 1, 1, 2, 2, 2])
    counts = class_counts(labels, (np.array([0, 3]), np.array([1, 2, 4, 5])), 4)
    np.testing.assert_array_equal(counts, [[1, 0, 1, 0], [0, 2, 2, 0]])
    assert counts.dtype == np.int64


def test_spec_validation():
    with pytest.raises(ValueError, match="partition.name"):
        PartitionSpec(name="nope")
    with pytest.raises(ValueError, match="partition.alpha"):
        PartitionSpec(alpha=0)
    with pytest.raises(ValueError, match="cannot split"):
        partition(np.zeros(3, dtype=np.int64), 4, PartitionSpec(), 0)
