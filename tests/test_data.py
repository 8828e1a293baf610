"""Synthetic(alpha, beta), digits, stand-ins and build_dataset."""

import numpy as np
import pytest
import torch

from fedsim.data import (
    DataNotFound,
    Dataset,
    PartitionSpec,
    build_dataset,
    digits,
    synthetic,
    synthetic_clients,
    vision_standin,
)

# ---------------------------------------------------------------- Synthetic(alpha, beta), FedProx


def test_synthetic_shape_and_sizes():
    parts = synthetic_clients(1.0, 1.0, seed=0)
    assert len(parts) == 30
    n_k = np.array([len(c.y) for c in parts])
    assert n_k.min() >= 50
    assert all(c.x.shape == (len(c.y), 60) and c.w.shape == (60, 10) and c.b.shape == (10,) for c in parts)
    d = synthetic(1.0, 1.0, seed=0)
    assert d.name == "synthetic" and d.num_classes == 10 and d.input_shape == (60,)
    assert d.mean is None and not d.augment
    np.testing.assert_array_equal(d.client_sizes, [int(0.9 * n) for n in n_k])  # 90/10 per client
    assert len(d.y_test) == int(np.sum(n_k - (0.9 * n_k).astype(int)))
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64


def test_synthetic_labels_are_argmax_of_each_clients_own_model():
    parts = synthetic_clients(1.0, 1.0, seed=4)
    for c in parts:
        logits = np.einsum("nd,dk->nk", c.x, c.w) + c.b
        np.testing.assert_array_equal(c.y, logits.argmax(axis=1))
    # The Dataset's rows are exactly the clients' samples: train block k, then test parts in order.
    d = synthetic(1.0, 1.0, seed=4)
    test_start = 0
    for k, c in enumerate(parts):
        xk = d.x_train[d.client_indices[k]].astype(np.float64)
        np.testing.assert_array_equal(d.y_train[d.client_indices[k]], (xk @ c.w + c.b).argmax(axis=1))
        rows = {r.tobytes() for r in c.x.astype(np.float32)}
        assert all(r.tobytes() in rows for r in d.x_train[d.client_indices[k]])
        n_test = len(c.y) - int(0.9 * len(c.y))
        assert all(r.tobytes() in rows for r in d.x_test[test_start : test_start + n_test])
        test_start += n_test


def test_synthetic_deterministic_under_seed():
    a, b, c = synthetic(0.5, 0.5, seed=11), synthetic(0.5, 0.5, seed=11), synthetic(0.5, 0.5, seed=12)
    for f in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert a.x_train.shape != c.x_train.shape or not np.array_equal(a.x_train, c.x_train)


def test_synthetic_priors_match_the_paper():
    # W_k, b_k ~ N(u_k, 1), u_k ~ N(0, alpha^2): the per-client mean of W_k's 600 entries is ~u_k,
    # so across clients its std is ~alpha. Likewise v_k ~ N(B_k, 1), B_k ~ N(0, beta^2).
    parts = synthetic_clients(5.0, 0.0, seed=1)
    assert 3.5 < np.std([c.w.mean() for c in parts]) < 7.0
    assert np.std([c.mean_x.mean() for c in parts]) < 0.5  # beta = 0: only the N(0, 1/60) noise
    assert all(abs(c.b.mean() - c.w.mean()) < 1.6 for c in parts)  # b_k shares W_k's mean u_k (sd 0.32)
    parts = synthetic_clients(0.0, 5.0, seed=1)
    assert np.std([c.w.mean() for c in parts]) < 0.2  # alpha = 0: W_k entries ~ N(0, 1)
    assert 3.5 < np.std([c.mean_x.mean() for c in parts]) < 7.0


def test_synthetic_feature_covariance_is_diag_power_law():
    parts = synthetic_clients(1.0, 1.0, seed=2)
    centred = np.concatenate([c.x - c.mean_x for c in parts])
    expected = np.array([(j + 1) ** -1.2 for j in range(60)])  # Sigma_jj = (j+1)^-1.2
    var = centred.var(axis=0)
    assert len(centred) > 5000
    np.testing.assert_allclose(var, expected, rtol=0.1)
    off = np.corrcoef(centred[:, :5].T)[np.triu_indices(5, 1)]
    assert np.abs(off).max() < 0.1


def test_synthetic_sizes_are_lognormal_4_2_plus_50():
    parts = synthetic_clients(1.0, 1.0, clients=400, dim=2, seed=3)
    extra = np.array([len(c.y) for c in parts]) - 50
    assert extra.min() >= 0
    assert abs(np.log(np.median(extra) + 0.5) - 4.0) < 0.4  # median of lognormal(4, 2) is e^4


def test_synthetic_iid_shares_one_model_and_zero_means():
    parts = synthetic_clients(1.0, 1.0, seed=0, iid=True)
    assert all(np.array_equal(c.w, parts[0].w) and not c.mean_x.any() for c in parts)
    assert synthetic(1.0, 1.0, iid=True).name == "synthetic-iid"


# ---------------------------------------------------------------- digits


def test_digits_split_and_scaling():
    d = digits(clients=5, partition=PartitionSpec("iid"), seed=0)
    assert d.name == "digits" and d.num_classes == 10 and d.input_shape == (1, 8, 8)
    assert len(d.y_train) + len(d.y_test) == 1797
    assert d.x_train.min() == 0.0 and d.x_train.max() == 1.0  # 0..16 divided by 16
    np.testing.assert_array_equal(d.x_train * 16, np.round(d.x_train * 16))
    # stratified: every class keeps round(0.2 * n_c) test samples (class sizes of load_digits: 174..183)
    n_c = np.bincount(np.concatenate([d.y_train, d.y_test]))
    np.testing.assert_array_equal(np.bincount(d.y_test), np.round(0.2 * n_c).astype(int))
    assert sum(d.client_sizes) == len(d.y_train)
    e = digits(clients=5, partition=PartitionSpec("iid"), seed=1)
    assert not np.array_equal(d.y_test, e.y_test) or not np.array_equal(d.x_test, e.x_test)


# ---------------------------------------------------------------- stand-ins and build_dataset


@pytest.mark.parametrize(
    "name,shape,classes,augment",
    [
        ("cifar10", (3, 32, 32), 10, True),
        ("cifar100", (3, 32, 32), 100, True),
        ("mnist", (1, 28, 28), 10, False),
        ("fashion_mnist", (1, 28, 28), 10, False),
        ("tinyimagenet", (3, 64, 64), 200, True),
    ],
)
def test_standin_has_the_datasets_shape_and_classes(name, shape, classes, augment):
    d = build_dataset(name, clients=4, partition=PartitionSpec("iid"), seed=0, standin=True, n_train=400, n_test=200)
    assert d.name == f"{name}-standin"
    assert d.input_shape == shape and d.num_classes == classes and d.augment is augment
    assert d.x_train.shape == (400, *shape) and d.x_test.shape == (200, *shape)
    assert d.x_train.min() >= 0.0 and d.x_train.max() <= 1.0
    assert len(d.mean) == len(d.std) == shape[0]
    assert d.y_train.max() < classes and sum(d.client_sizes) == 400


def test_standin_is_learnable_well_above_chance():
    x_tr, y_tr, x_te, y_te = vision_standin((3, 32, 32), 10, n_train=2000, n_test=1000, seed=5)
    mean, std = x_tr.mean(axis=(0, 2, 3), keepdims=True), x_tr.std(axis=(0, 2, 3), keepdims=True)
    xtr, xte = torch.tensor((x_tr - mean) / std), torch.tensor((x_te - mean) / std)
    ytr, yte = torch.tensor(y_tr), torch.tensor(y_te)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        idx = torch.randint(0, 2000, (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    assert acc > 0.35  # chance is 0.10


def test_standin_is_deterministic_and_balanced():
    a = vision_standin((3, 16, 16), 4, n_train=200, n_test=10, seed=1)
    b = vision_standin((3, 16, 16), 4, n_train=200, n_test=10, seed=1)
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))
    assert np.bincount(a[1]).tolist() == [50, 50, 50, 50]


def test_build_dataset_subsamples_and_partitions():
    d = build_dataset("digits", clients=6, partition=PartitionSpec("dirichlet", alpha=0.5, min_size=5), seed=0)
    assert len(d.client_indices) == 6 and d.client_sizes.min() >= 5
    s = build_dataset("synthetic", clients=12, partition=PartitionSpec(), seed=0, alpha=0.0, beta=0.0, dim=20)
    assert len(s.client_indices) == 12 and s.input_shape == (20,) and s.name == "synthetic"
    assert build_dataset("synthetic", clients=5, partition=PartitionSpec(), seed=0, iid=True).name == "synthetic-iid"
    small = build_dataset("digits", clients=3, partition=PartitionSpec(), seed=0, n_train=300, n_test=100)
    assert len(small.y_train) == 300 and len(small.y_test) == 100 and sum(small.client_sizes) == 300
    full = digits(clients=3, partition=PartitionSpec(), seed=0)
    half = build_dataset("digits", clients=3, partition=PartitionSpec(), seed=0, test_fraction=0.5)
    assert len(half.y_test) > len(full.y_test)


def test_build_dataset_errors(tmp_path):
    with pytest.raises(ValueError, match="quadratic"):
        build_dataset("quadratic", clients=2, partition=PartitionSpec(), seed=0)
    with pytest.raises(ValueError, match="data.name"):
        build_dataset("imagenet", clients=2, partition=PartitionSpec(), seed=0)
    with pytest.raises(DataNotFound, match=str(tmp_path)):
        build_dataset("cifar10", clients=2, partition=PartitionSpec(), seed=0, root=str(tmp_path))


def test_dataset_rejects_overlapping_clients_and_bad_dtypes():
    x = np.zeros((4, 2), np.float32)
    y = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="overlap"):
        Dataset("t", x, y, x, y, 2, (np.array([0, 1]), np.array([1, 2])))
    with pytest.raises(TypeError):
        Dataset("t", x.astype(np.float64), y, x, y, 2, (np.array([0, 1]),))
    d = Dataset("t", x, y, x, y, 2, (np.array([0, 1]), np.array([3])))
    np.testing.assert_array_equal(d.client_sizes, [2, 1])
