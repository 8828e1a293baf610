"""Models for fedsim. None uses BatchNorm (all run under ``torch.func.vmap`` across clients)."""

from __future__ import annotations

import math

from torch import nn

from fedsim.models.resnet import resnet18_gn
from fedsim.models.vgg import vgg11

MODELS = ("logreg", "mlp", "cnn", "vgg11", "resnet18_gn")

__all__ = ["MODELS", "build_model", "cnn", "count_parameters", "logreg", "mlp", "resnet18_gn", "vgg11"]


def logreg(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Multinomial logistic regression: flatten + Linear (FedProx's model for Synthetic, Li et al. 2020)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def mlp(input_shape: tuple[int, ...], num_classes: int, hidden: int = 200) -> nn.Module:
    """Two hidden ReLU layers of ``hidden`` units (the "2NN" of McMahan et al. 2017, hidden=200)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedAvg CNN (McMahan et al. 2017, Sec. 3): two 5x5 convs (32, 64 channels, "same" padding),
    each followed by ReLU and 2x2 max pooling, then a 512-unit ReLU layer and the output layer.
    On 1x28x28 input it has 1,663,370 parameters, the count the paper reports."""
    c, h, w = _image_shape(input_shape, "cnn")
    if h < 4 or w < 4:
        raise ValueError(f"cnn: input {input_shape} is smaller than 4x4")
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (h // 4) * (w // 4), 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def _image_shape(input_shape: tuple[int, ...], model: str) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ValueError(f"{model}: needs (C, H, W) images, got input shape {tuple(input_shape)}")
    return tuple(int(d) for d in input_shape)  # type: ignore[return-value]


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, hidden: int = 200) -> nn.Module:
    """Build a freshly initialized model.

    Args:
        name: ``logreg | mlp | cnn | vgg11 | resnet18_gn``.
        input_shape: Shape of one example, e.g. ``(3, 32, 32)`` or ``(60,)``.
        num_classes: Output logits.
        hidden: Width of the ``mlp`` hidden layers.

    Returns:
        The module (initialized from torch's global RNG: seed it first with ``torch.manual_seed``).
    """
    input_shape = tuple(int(d) for d in input_shape)
    if name == "logreg":
        return logreg(input_shape, num_classes)
    if name == "mlp":
        return mlp(input_shape, num_classes, hidden)
    if name == "cnn":
        return cnn(input_shape, num_classes)
    if name == "vgg11":
        c, h, w = _image_shape(input_shape, "vgg11")
        return vgg11(num_classes, in_channels=c, input_hw=(h, w))
    if name == "resnet18_gn":
        c, _, _ = _image_shape(input_shape, "resnet18_gn")
        return resnet18_gn(num_classes, in_channels=c)
    raise ValueError(f"model.name: must be one of {', '.join(MODELS)}, got {name!r}")


def count_parameters(model: nn.Module) -> int:
    """Total number of parameter entries."""
    return sum(p.numel() for p in model.parameters())
