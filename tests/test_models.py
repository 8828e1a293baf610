"""Models: shapes, hand-counted parameters, no BatchNorm, and vmap over stacked client copies."""

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

from fedsim.models import MODELS, build_model, count_parameters

CASES = [
    ("logreg", (60,)),
    ("mlp", (1, 28, 28)),
    ("cnn", (1, 28, 28)),
    ("cnn", (3, 32, 32)),
    ("vgg11", (3, 32, 32)),
    ("vgg11", (3, 64, 64)),
    ("resnet18_gn", (3, 32, 32)),
    ("resnet18_gn", (3, 64, 64)),
    ("resnet18_gn", (1, 28, 28)),
]


@pytest.mark.parametrize("name,shape", CASES)
def test_output_shape(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape, 7).eval()
    with torch.no_grad():
        out = model(torch.rand(2, *shape))
    assert out.shape == (2, 7) and torch.isfinite(out).all()


def conv(c_in, c_out, k, bias=True):
    return c_in * c_out * k * k + (c_out if bias else 0)


def linear(d_in, d_out):
    return d_in * d_out + d_out


def gn(c):
    return 2 * c  # GroupNorm affine weight + bias


def resnet18_gn_count(c_in, classes):
    def block(i, o, stride):
        n = conv(i, o, 3, bias=False) + gn(o) + conv(o, o, 3, bias=False) + gn(o)
        if stride != 1 or i != o:
            n += conv(i, o, 1, bias=False) + gn(o)
        return n

    n = conv(c_in, 64, 3, bias=False) + gn(64)
    n += block(64, 64, 1) + block(64, 64, 1)
    n += block(64, 128, 2) + block(128, 128, 1)
    n += block(128, 256, 2) + block(256, 256, 1)
    n += block(256, 512, 2) + block(512, 512, 1)
    return n + linear(512, classes)


HAND_COUNTS = {
    ("logreg", (60,), 10): 60 * 10 + 10,
    ("mlp", (1, 28, 28), 10): (784 * 200 + 200) + (200 * 200 + 200) + (200 * 10 + 10),  # FedAvg 2NN: 199,210
    # FedAvg CNN on MNIST: 28 -> 14 -> 7 after the pools; the paper reports 1,663,370 parameters
    ("cnn", (1, 28, 28), 10): (1 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (64 * 7 * 7 * 512 + 512) + (512 * 10 + 10),
    ("cnn", (3, 32, 32), 10): (3 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (64 * 8 * 8 * 512 + 512) + (512 * 10 + 10),
    ("vgg11", (3, 32, 32), 10): (
        (3 * 64 * 9 + 64)
        + (64 * 128 * 9 + 128)
        + (128 * 256 * 9 + 256)
        + (256 * 256 * 9 + 256)
        + (256 * 512 * 9 + 512)
        + 3 * (512 * 512 * 9 + 512)
        + 2 * (512 * 512 + 512)
        + (512 * 10 + 10)
    ),
    ("resnet18_gn", (3, 32, 32), 10): resnet18_gn_count(3, 10),
    ("resnet18_gn", (3, 64, 64), 200): resnet18_gn_count(3, 200),
}


@pytest.mark.parametrize("key", list(HAND_COUNTS))
def test_parameter_counts_by_hand(key):
    name, shape, classes = key
    assert count_parameters(build_model(name, shape, classes)) == HAND_COUNTS[key]


def test_known_published_counts():
    assert HAND_COUNTS[("mlp", (1, 28, 28), 10)] == 199_210  # McMahan et al. 2017, 2NN
    assert HAND_COUNTS[("cnn", (1, 28, 28), 10)] == 1_663_370  # McMahan et al. 2017, CNN
    assert HAND_COUNTS[("resnet18_gn", (3, 32, 32), 10)] == 11_173_962  # CIFAR ResNet-18 (BN has as many)
    expected = linear(60, 32) + linear(32, 32) + linear(32, 10)
    assert count_parameters(build_model("mlp", (60,), 10, hidden=32)) == expected


@pytest.mark.parametrize("name", MODELS)
def test_no_batchnorm_and_groupnorm_has_two_groups(name):
    shape = (60,) if name in ("logreg", "mlp") else (3, 32, 32)
    model = build_model(name, shape, 10)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    gns = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert all(m.num_groups == 2 for m in gns)
    # resnet18_gn: stem 1 + 8 blocks x 2 + 3 downsampling shortcuts = 20 GroupNorms
    assert len(gns) == (1 + 8 * 2 + 3 if name == "resnet18_gn" else 0)
    assert sum(isinstance(m, nn.Dropout) for m in model.modules()) == (2 if name == "vgg11" else 0)


def test_vgg11_follows_fednova_classifier_and_init():
    model = build_model("vgg11", (3, 32, 32), 10)
    layers = [type(m).__name__ for m in model.classifier]
    assert layers == ["Dropout", "Linear", "ReLU", "Dropout", "Linear", "ReLU", "Linear"]
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    assert [m.out_channels for m in convs] == [64, 128, 256, 256, 512, 512, 512, 512]
    assert all(m.kernel_size == (3, 3) and m.padding == (1, 1) and not m.bias.any() for m in convs)


def test_invalid_requests():
    with pytest.raises(ValueError, match="vgg11"):
        build_model("vgg11", (1, 28, 28), 10)
    with pytest.raises(ValueError, match="model.name"):
        build_model("transformer", (3, 32, 32), 10)
    with pytest.raises(ValueError, match="cnn"):
        build_model("cnn", (60,), 10)


VMAP_CASES = [
    ("logreg", (60,)),
    ("mlp", (1, 28, 28)),
    ("cnn", (3, 32, 32)),
    ("vgg11", (3, 32, 32)),
    ("resnet18_gn", (3, 32, 32)),
]


@pytest.mark.parametrize("name,shape", VMAP_CASES)
def test_vmap_over_two_stacked_copies_matches_plain_forward(name, shape):
    torch.manual_seed(0)
    copies = [build_model(name, shape, 10).eval() for _ in range(2)]
    params, buffers = stack_module_state(copies)
    base = build_model(name, shape, 10).eval().to("meta")
    x = torch.rand(3, *shape)

    def forward(p, b, inputs):
        return functional_call(base, (p, b), (inputs,))

    with torch.no_grad():
        batched = vmap(forward, in_dims=(0, 0, None))(params, buffers, x)
        expected = torch.stack([m(x) for m in copies])
    assert batched.shape == (2, 3, 10)
    assert not torch.allclose(expected[0], expected[1])  # two different models
    torch.testing.assert_close(batched, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,shape", [("cnn", (3, 16, 16)), ("resnet18_gn", (3, 8, 8)), ("vgg11", (3, 32, 32))])
def test_vmap_per_client_gradients_and_train_mode_dropout(name, shape):
    torch.manual_seed(1)
    copies = [build_model(name, shape, 4) for _ in range(2)]
    params, buffers = stack_module_state(copies)
    base = build_model(name, shape, 4).to("meta")
    x, y = torch.rand(2, 2, *shape), torch.tensor([[0, 1], [2, 3]])  # a different batch per client

    def loss(p, b, xb, yb):
        return nn.functional.cross_entropy(functional_call(base, (p, b), (xb,)), yb)

    base.eval()
    grads = vmap(grad(loss), in_dims=(0, 0, 0, 0))(params, buffers, x, y)
    for i, model in enumerate(copies):
        model.eval().zero_grad()
        nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        for k, g in grads.items():
            torch.testing.assert_close(g[i], dict(model.named_parameters())[k].grad, rtol=1e-4, atol=1e-6)
    base.train()  # dropout under vmap needs an explicit randomness mode; the engine picks "different"
    out = vmap(lambda p, b, xb: functional_call(base, (p, b), (xb,)), randomness="different")(params, buffers, x)
    assert out.shape == (2, 2, 4)
