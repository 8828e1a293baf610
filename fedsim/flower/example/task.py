"""The example's model and data: a 64-32-10 MLP on scikit-learn's 8x8 digits, 1,797 images.

The images are shuffled once (seed 0); the last 297 are the server's test set, the first 1,500
are split into ``num-partitions`` equal IID partitions (partition i: rows i, i + P, i + 2P, ...),
each cut 80/20 into train and local test. Written as a Flower user writes a task module: nothing
here knows about fedsim."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["Net", "load_partition", "load_server_test", "train", "test", "get_weights", "set_weights"]

_DATA: tuple[np.ndarray, np.ndarray] | None = None


def _digits() -> tuple[np.ndarray, np.ndarray]:
    global _DATA
    if _DATA is None:
        from sklearn.datasets import load_digits

        d = load_digits()
        order = np.random.default_rng(0).permutation(len(d.target))
        _DATA = (d.data[order] / 16.0).astype(np.float32), d.target[order].astype(np.int64)
    return _DATA


def load_partition(partition_id: int, num_partitions: int):
    """(x_train, y_train, x_test, y_test) of one partition, as tensors."""
    x, y = _digits()
    idx = np.arange(partition_id, 1500, num_partitions)
    cut = int(len(idx) * 0.8)
    tr, te = idx[:cut], idx[cut:]
    t = torch.from_numpy
    return t(x[tr]), t(y[tr]), t(x[te]), t(y[te])


def load_server_test():
    x, y = _digits()
    return torch.from_numpy(x[1500:]), torch.from_numpy(y[1500:])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 32), nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def get_weights(net: nn.Module) -> list[np.ndarray]:
    return [v.detach().cpu().numpy().copy() for v in net.state_dict().values()]


def set_weights(net: nn.Module, arrays: list[np.ndarray]) -> None:
    net.load_state_dict({k: torch.from_numpy(np.asarray(a).copy()) for k, a in zip(net.state_dict(), arrays)})


def train(net, x, y, steps: int, lr: float, batch_size: int, seed: int, proximal_mu: float = 0.0) -> float:
    """``steps`` SGD steps on minibatches drawn with ``seed``; FedProx's term when mu > 0. Returns
    the mean training loss."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    start = [p.detach().clone() for p in net.parameters()]
    total = 0.0
    for _ in range(steps):
        batch = torch.randint(0, len(y), (batch_size,), generator=g)
        loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
        if proximal_mu > 0:
            loss = loss + proximal_mu / 2 * sum(((p - s) ** 2).sum() for p, s in zip(net.parameters(), start))
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total / max(steps, 1)


@torch.no_grad()
def test(net, x, y) -> tuple[float, float]:
    out = net(x)
    return float(nn.functional.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())
