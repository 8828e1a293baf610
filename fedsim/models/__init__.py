"""Models for fedsim. None uses BatchNorm (all run under ``torch.func.vmap`` across clients).

Every model here is a factory ``factory(input_shape, num_classes, **options) -> nn.Module``,
registered by name in :data:`fedsim.registries.MODELS` as a user's model would be;
:func:`build_model` looks the name up there.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from typing import Any

from fedsim.errors import ScenarioError
from fedsim.factory_options import call_factory, takes_option
from fedsim.limits import MAX_MODEL_PARAMETERS
from fedsim.models import resnet as _resnet
from fedsim.models import vgg as _vgg

#: fedsim's own models (registered in :data:`fedsim.registries.MODELS`).
MODELS = ("logreg", "mlp", "cnn", "vgg11", "resnet18_gn")

__all__ = ["MODELS", "build_model", "call_factory", "check_size", "cnn", "count_parameters", "logreg", "mlp", "resnet18_gn", "two_conv_layers",
           "vgg11"]


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
        *two_conv_layers(c),
        nn.Linear(64 * (h // 4) * (w // 4), 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def two_conv_layers(channels: int) -> list[nn.Module]:
    """The convolutional part of McMahan et al.'s CNN (also LEAF's FEMNIST CNN): two 5x5 convs of
    32 and 64 channels ("same" padding), each followed by ReLU and 2x2 max pooling, then flatten."""
    return [
        nn.Conv2d(channels, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    ]


def _image_shape(input_shape: tuple[int, ...], model: str) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ValueError(f"{model}: needs (C, H, W) images, got input shape {tuple(input_shape)}")
    return tuple(int(d) for d in input_shape)  # type: ignore[return-value]


def vgg11(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """VGG-11 (Simonyan & Zisserman 2015) without BatchNorm, for (C, H, W) images of side >= 32."""
    c, h, w = _image_shape(input_shape, "vgg11")
    return _vgg.vgg11(num_classes, in_channels=c, input_hw=(h, w))


def resnet18_gn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-18 with GroupNorm (Hsieh et al. 2020), for (C, H, W) images."""
    c, _, _ = _image_shape(input_shape, "resnet18_gn")
    return _resnet.resnet18_gn(num_classes, in_channels=c)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """Build a freshly initialized model registered as ``name``.

    Args:
        name: A name in :data:`fedsim.registries.MODELS` (built-in: ``logreg | mlp | cnn | vgg11 |
            resnet18_gn``).
        input_shape: Shape of one example, e.g. ``(3, 32, 32)`` or ``(60,)``.
        num_classes: Output logits.
        **options: The factory's own options (``mlp``: ``hidden``, default 200). An option the
            factory does not take is an error, except ``hidden``, which only factories taking it get.

    Returns:
        The module (initialized from torch's global RNG: seed it first with ``torch.manual_seed``).

    Raises:
        ScenarioError: more than ``MAX_MODEL_PARAMETERS`` parameters (a built-in model is counted
            on torch's meta device before anything is allocated), or a built-in model that does
            not fit the data (``model.name: ...``).
    """
    from fedsim.registries import MODELS as registry
    from fedsim.scenario.model_options import is_builtin

    factory = registry.get(name)
    if "hidden" in options and not takes_option(factory, "hidden"):
        options = {k: v for k, v in options.items() if k != "hidden"}
    args = (tuple(int(d) for d in input_shape), num_classes)
    what = f"model {name!r}"
    if is_builtin(name):  # counted on the meta device first: nothing allocated, no random number drawn
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            check_size(_built(factory, args, options, what), what)
        return _built(factory, args, options, what)
    return check_size(call_factory(factory, args, options, what, "model.options"), what)


def _built(factory, args: tuple, options: dict, what: str) -> nn.Module:
    """A built-in model; its refusal of the data (a ValueError: ``leaf_cnn`` on flat features) is
    one line naming ``model.name``."""
    try:
        return call_factory(factory, args, options, what, "model.options")
    except ValueError as err:
        raise ScenarioError(f"model.name: {err}") from None


def check_size(module: nn.Module, what: str, path: str = "model.name") -> nn.Module:
    """``module`` when it has at most ``MAX_MODEL_PARAMETERS`` parameters, else ScenarioError
    naming ``path``; anything but an ``nn.Module`` passes through for its caller to name."""
    if not isinstance(module, nn.Module):
        return module
    n = count_parameters(module)
    if n > MAX_MODEL_PARAMETERS:
        raise ScenarioError(f"{path}: {what} has {n:,} parameters for this data, more than "
                            f"{MAX_MODEL_PARAMETERS:,} (MAX_MODEL_PARAMETERS)")
    return module


def count_parameters(model: nn.Module) -> int:
    """Total number of parameter entries."""
    return sum(p.numel() for p in model.parameters())
