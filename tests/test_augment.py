"""Batched random crop (zero padding 4) + horizontal flip on the device (fedsim.engine.augment).

The reference is independent of the implementation: numpy zero-padding (np.pad), slicing of the
crop window and [..., ::-1] for the flip, image by image.
"""

import numpy as np
import pytest
import torch

from fedsim.engine.augment import augment_batch, augment_draws
from fedsim.rng import stream

PAD = 4


pytestmark = pytest.mark.usefixtures("one_thread")


def reference(img: np.ndarray, dx: int, dy: int, flip: bool, pad: int = PAD) -> np.ndarray:
    """torchvision's RandomCrop(padding=pad) at offset (dy, dx), then RandomHorizontalFlip."""
    c, h, w = img.shape
    padded = np.pad(img, ((0, 0), (pad, pad), (pad, pad)))  # zeros
    crop = padded[:, dy : dy + h, dx : dx + w]
    return crop[:, :, ::-1] if flip else crop


def hand_image(c: int, h: int, w: int) -> np.ndarray:
    """Every pixel distinct and non-zero, so any misplaced or zero-filled pixel shows."""
    return (np.arange(c * h * w, dtype=np.float32).reshape(c, h, w) + 1.0) / 10.0


def test_every_offset_and_flip_matches_numpy_pixel_by_pixel():
    # all 9 x 9 offsets x 2 flips at once, on a non-square image (rows and columns distinguishable)
    c, h, w = 3, 6, 10
    img = hand_image(c, h, w)
    combos = [(dx, dy, f) for dx in range(2 * PAD + 1) for dy in range(2 * PAD + 1) for f in (False, True)]
    n = len(combos)
    x = torch.as_tensor(np.broadcast_to(img, (n, c, h, w)).copy())
    dx = torch.tensor([a for a, _, _ in combos])
    dy = torch.tensor([b for _, b, _ in combos])
    flip = torch.tensor([f for _, _, f in combos])
    out = augment_batch(x, dx, dy, flip).numpy()
    for i, (a, b, f) in enumerate(combos):
        np.testing.assert_array_equal(out[i], reference(img, a, b, f), err_msg=f"dx={a} dy={b} flip={f}")


def test_shapes_dtype_and_leading_dims():
    # (clients, batch, C, H, W) with one draw per image, as train.py calls it
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.standard_normal((2, 5, 3, 32, 32)), dtype=torch.float32)
    dx, dy, flip = (torch.as_tensor(a) for a in augment_draws(stream(0, "augment", 0, 0), (2, 5)))
    out = augment_batch(x, dx, dy, flip)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    # per image it is the numpy reference
    for i in range(2):
        for j in range(5):
            ref = reference(x[i, j].numpy(), int(dx[i, j]), int(dy[i, j]), bool(flip[i, j]))
            np.testing.assert_array_equal(out[i, j].numpy(), ref)
    # one channel (MNIST-shaped) and a 64x64 TinyImageNet-shaped image
    for shape in [(4, 1, 28, 28), (3, 3, 64, 64)]:
        xs = torch.ones(shape)
        z = torch.zeros(shape[0], dtype=torch.long)
        assert augment_batch(xs, z, z, z.bool()).shape == shape


def test_center_crop_is_identity_and_flip_only_mirrors_columns():
    c, h, w = 2, 5, 7
    img = hand_image(c, h, w)
    x = torch.as_tensor(img).unsqueeze(0)
    centre = torch.tensor([PAD])
    same = augment_batch(x, centre, centre, torch.tensor([False]))[0].numpy()
    np.testing.assert_array_equal(same, img)
    mirrored = augment_batch(x, centre, centre, torch.tensor([True]))[0].numpy()
    np.testing.assert_array_equal(mirrored, img[:, :, ::-1])
    for r in range(h):  # each row keeps its own pixels (rows never move), columns reversed
        np.testing.assert_array_equal(mirrored[:, r, :], img[:, r, ::-1])
        assert set(mirrored[:, r, :].ravel()) == set(img[:, r, :].ravel())
    for ch in range(c):  # channels are not mixed
        np.testing.assert_array_equal(mirrored[ch], img[ch, :, ::-1])


def test_corner_offsets_fill_zero_padding():
    img = hand_image(1, 8, 8)
    x = torch.as_tensor(img).unsqueeze(0)
    zero = torch.tensor([0])
    out = augment_batch(x, zero, zero, torch.tensor([False]))[0, 0].numpy()
    # window starts at the padded corner: image shifted by 4 down and right, zeros above and left
    assert (out[:PAD, :] == 0).all() and (out[:, :PAD] == 0).all()
    np.testing.assert_array_equal(out[PAD:, PAD:], img[0, : 8 - PAD, : 8 - PAD])
    far = torch.tensor([2 * PAD])
    out = augment_batch(x, far, far, torch.tensor([False]))[0, 0].numpy()
    assert (out[-PAD:, :] == 0).all() and (out[:, -PAD:] == 0).all()
    np.testing.assert_array_equal(out[: 8 - PAD, : 8 - PAD], img[0, PAD:, PAD:])


def test_draws_are_keyed_and_cover_the_range():
    a = augment_draws(stream(7, "augment", 3, 11), (50, 32))
    b = augment_draws(stream(7, "augment", 3, 11), (50, 32))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    other = augment_draws(stream(7, "augment", 4, 11), (50, 32))
    assert not np.array_equal(a[0], other[0])
    dx, dy, flip = a
    assert dx.shape == dy.shape == flip.shape == (50, 32)
    assert set(np.unique(dx)) == set(range(2 * PAD + 1)) == set(np.unique(dy))
    assert flip.dtype == bool and 0.4 < flip.mean() < 0.6
    # prefix-stable: the first steps do not depend on how many steps are drawn (chunking)
    short = augment_draws(stream(7, "augment", 3, 11), (20, 32))
    for u, v in zip(a, short):
        np.testing.assert_array_equal(u[:20], v)
    # same draws -> the same images
    x = torch.as_tensor(np.random.default_rng(1).standard_normal((50, 32, 3, 8, 8)), dtype=torch.float32)
    t = [torch.as_tensor(v) for v in a]
    assert torch.equal(augment_batch(x, *t), augment_batch(x, *[torch.as_tensor(v) for v in b]))


def test_normalized_with_black_fill_equals_torchvision_pipeline():
    """fedsim augments normalized images; with fill = -mean/std (a black raw pixel) the result is
    torchvision's pad(0) -> crop -> hflip -> normalize on the raw image."""
    import torchvision.transforms.functional as TF

    mean, std = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
    m, s = torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1)
    raw = torch.rand(12, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    dx, dy, flip = (torch.as_tensor(a) for a in augment_draws(stream(5, "augment", 0, 0), (12,)))
    out = augment_batch((raw - m) / s, dx, dy, flip, fill=-m.view(3) / s.view(3))
    for i in range(12):
        ref = TF.crop(TF.pad(raw[i], [PAD], fill=0), int(dy[i]), int(dx[i]), 32, 32)
        ref = TF.hflip(ref) if flip[i] else ref
        torch.testing.assert_close(out[i], TF.normalize(ref, mean, std), rtol=0, atol=1e-5)
    # the padded border is exactly the fill value
    zero = torch.zeros(1, dtype=torch.long)
    corner = augment_batch(((raw - m) / s)[:1], zero, zero, zero.bool(), fill=-m.view(3) / s.view(3))
    torch.testing.assert_close(corner[0, :, :PAD, :], (-m / s).expand(3, PAD, 32))


# ----------------------------------------------------------------------------- in training
def _workload(augment: bool):
    from fedsim.engine.workload import build_workload
    from fedsim.scenario import parse_scenario

    sc = parse_scenario(
        {
            "seed": 3,
            "data": {"name": "cifar10", "standin": True, "n_train": 120, "n_test": 10, "clients": 3, "augment": augment},
            "model": {"name": "logreg"},
            "round": {"policy": "wait", "local_steps": 3},
            "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 8},
        }
    )
    from fedsim.algorithms.spec import resolve

    return sc, build_workload(sc, torch.device("cpu"), torch.float32), resolve(sc.algorithm)


def _deltas(work, spec, chunk):
    from fedsim.algorithms.algorithm import algorithm
    from fedsim.engine.train import Task, train_cohort

    tasks = [Task(0, 3, 5), Task(1, 2, 6), Task(2, 3, 7)]
    res = train_cohort(work, algorithm(spec), dict(work.init_params), tasks, round_lr=0.1, seed=3, chunk=chunk)
    return res.deltas


def test_training_augmentation_is_seeded_and_chunking_invariant():
    _, work, spec = _workload(True)
    assert work.augment and work.x_train.shape[1:] == (3, 32, 32)
    # padding value: a black raw pixel after the dataset's normalization, -mean / std
    from fedsim.data import PartitionSpec, build_dataset

    ds = build_dataset("cifar10", clients=3, partition=PartitionSpec(), seed=3, standin=True, n_train=120, n_test=10)
    expect = -torch.tensor(ds.mean) / torch.tensor(ds.std)
    torch.testing.assert_close(work.pad_fill, expect.float())
    d1 = _deltas(work, spec, chunk=3)
    d2 = _deltas(work, spec, chunk=3)
    for k in d1:  # same seed and keys: bit-identical
        assert torch.equal(d1[k], d2[k])
    d3 = _deltas(work, spec, chunk=1)  # draws keyed per client, not per chunk
    for k in d1:
        torch.testing.assert_close(d1[k], d3[k], rtol=1e-5, atol=1e-6)
    _, plain, _ = _workload(False)
    assert not plain.augment and plain.pad_fill is None
    d0 = _deltas(plain, spec, chunk=3)
    assert not torch.allclose(d0["1.weight"], d1["1.weight"])  # augmentation really was applied


def test_augment_on_flat_features_is_a_scenario_error():
    from fedsim.engine.workload import build_workload
    from fedsim.scenario import ScenarioError, parse_scenario

    sc = parse_scenario(
        {"data": {"name": "synthetic", "clients": 2, "augment": True}, "model": {"name": "logreg"},
         "round": {"policy": "wait", "local_steps": 1}}
    )
    with pytest.raises(ScenarioError, match="data.augment"):
        build_workload(sc, torch.device("cpu"), torch.float32)
