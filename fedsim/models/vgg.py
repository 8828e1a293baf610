"""VGG-11 without batch norm, as in FedNova's experiments (Wang et al. 2020; JYWa/FedNova models/vgg.py)."""

from __future__ import annotations

import math

from torch import nn

VGG11_CFG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    """3x3 conv (padding 1) + ReLU stacks with 2x2 max pools, then a 512-512-classes classifier
    with dropout (p = 0.5). An adaptive average pool to 1x1 (identity on 32x32 input, where the
    features are already 1x1) lets larger images through with the same classifier."""

    def __init__(self, cfg: tuple[int | str, ...], num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(c, int(v), kernel_size=3, padding=1), nn.ReLU()]
                c = int(v)
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Dropout(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, num_classes),
        )
        for m in self.modules():  # the authors' init: conv weights N(0, 2 / (k*k*out)), zero bias
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_out))
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def vgg11(num_classes: int = 10, in_channels: int = 3, input_hw: tuple[int, int] = (32, 32)) -> VGG:
    """VGG-11 (configuration "A") without batch norm; needs images of at least 32x32."""
    if min(input_hw) < 32:
        raise ValueError(f"vgg11: needs images of at least 32x32 (5 max pools), got {input_hw}")
    return VGG(VGG11_CFG, num_classes, in_channels)
