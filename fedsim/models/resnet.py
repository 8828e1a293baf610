"""ResNet-18 (He et al. 2016), CIFAR variant, with GroupNorm instead of BatchNorm (FedLADA, Sun et al.;
GroupNorm for federated learning: Hsieh et al. 2020)."""

from __future__ import annotations

from torch import nn
from torch.nn import functional as F

GN_GROUPS = 2


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(GN_GROUPS, channels)


class BasicBlock(nn.Module):
    """Two 3x3 convs with GroupNorm; 1x1 conv + GroupNorm shortcut when the shape changes."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.gn1 = _norm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.gn2 = _norm(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), _norm(planes))

    def forward(self, x):
        out = F.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18GN(nn.Module):
    """3x3 stem (64 channels, stride 1, no max pool), stages of 2 BasicBlocks with 64/128/256/512
    channels (strides 1/2/2/2), adaptive average pool to 1x1, Linear(512, classes)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.gn1 = _norm(64)
        stages, in_planes = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1)))
            in_planes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x):
        out = F.relu(self.gn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(self.pool(out).flatten(1))


def resnet18_gn(num_classes: int = 10, in_channels: int = 3) -> ResNet18GN:
    """ResNet-18 with GroupNorm(2 groups); any input of at least 8x8 (64x64 for TinyImageNet)."""
    return ResNet18GN(num_classes, in_channels)
