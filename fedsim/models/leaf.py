"""LEAF's reference models (Caldas et al. 2018; github.com/TalwalkarLab/leaf, models/).

- ``leaf_cnn``: ``models/femnist/cnn.py`` -- two 5x5 "same" convolutions (32, 64 channels), each
  ReLU + 2x2 max pooling, a 2048-unit ReLU layer, the output layer. 6,603,710 parameters on
  1x28x28 input with 62 classes.
- ``char_lstm``: ``models/shakespeare/stacked_lstm.py`` -- an 8-dimensional character embedding,
  two stacked LSTM layers of 256 units (TensorFlow's ``BasicLSTMCell``: one bias per gate, forget
  bias 1.0 added in the cell), a dense layer from the last time step's output to the classes.
  817,872 parameters for 80 characters, as LEAF's TensorFlow graph.

Both are plain modules without buffers; ``char_lstm``'s default cell is written with
``nn.Linear`` and a loop over time steps, so ``torch.func.vmap`` batches it across clients.
``char_lstm(..., cell="torch")`` uses ``nn.LSTM`` instead (cuDNN on a GPU; two biases per gate,
819,920 parameters, no forget bias; engines may not batch it across clients).
"""

from __future__ import annotations

import torch
from torch import nn

from fedsim.models import two_conv_layers

__all__ = ["CharLSTM", "LeafLSTMCell", "char_lstm", "leaf_cnn"]


def leaf_cnn(input_shape: tuple[int, ...], num_classes: int, *, dense: int = 2048) -> nn.Module:
    """LEAF's FEMNIST CNN (``models/femnist/cnn.py``) for ``(C, H, W)`` input; ``dense``: LEAF's 2048.

    (Named ``dense``, not ``hidden``, so that the ``model.hidden`` default of the MLP cannot
    resize it silently.)
    """
    if len(input_shape) != 3:
        raise ValueError(f"leaf_cnn: needs (C, H, W) images, got input shape {tuple(input_shape)}")
    c, h, w = (int(d) for d in input_shape)
    if h < 4 or w < 4:
        raise ValueError(f"leaf_cnn: input {tuple(input_shape)} is smaller than 4x4")
    return nn.Sequential(
        *two_conv_layers(c),
        nn.Linear(64 * (h // 4) * (w // 4), dense),
        nn.ReLU(),
        nn.Linear(dense, num_classes),
    )


class LeafLSTMCell(nn.Module):
    """TensorFlow's ``BasicLSTMCell`` (LEAF's cell): gates ``i, j, f, o`` from one linear map of
    ``[input, h]`` with one bias; ``c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)``,
    ``h' = tanh(c') * sigmoid(o)``."""

    def __init__(self, input_size: int, hidden: int, forget_bias: float = 1.0):
        super().__init__()
        self.hidden = hidden
        self.forget_bias = forget_bias
        self.gates = nn.Linear(input_size + hidden, 4 * hidden)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        i, j, f, o = self.gates(torch.cat([x, h], dim=-1)).chunk(4, dim=-1)
        c = c * torch.sigmoid(f + self.forget_bias) + torch.sigmoid(i) * torch.tanh(j)
        return torch.tanh(c) * torch.sigmoid(o), c


class CharLSTM(nn.Module):
    """Embedding -> stacked LSTM -> dense on the last step: ``int64 (batch, length)`` -> ``(batch, classes)``."""

    def __init__(self, vocab: int, num_classes: int, *, embed: int = 8, hidden: int = 256, layers: int = 2,
                 cell: str = "leaf"):
        super().__init__()
        if cell not in ("leaf", "torch"):
            raise ValueError(f"char_lstm: cell must be 'leaf' or 'torch', got {cell!r}")
        self.cell = cell
        self.hidden = hidden
        self.embedding = nn.Embedding(vocab, embed)
        if cell == "leaf":
            self.cells = nn.ModuleList(LeafLSTMCell(embed if k == 0 else hidden, hidden) for k in range(layers))
        else:
            self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)  # (batch, length, embed)
        if self.cell == "torch":
            return self.out(self.lstm(x)[0][:, -1])
        for cell in self.cells:
            h = c = x.new_zeros(x.shape[0], self.hidden)
            steps = []
            for t in range(x.shape[1]):
                h, c = cell(x[:, t], (h, c))
                steps.append(h)
            x = torch.stack(steps, dim=1)
        return self.out(x[:, -1])


def char_lstm(input_shape: tuple[int, ...], num_classes: int, *, vocab: int | None = None, embed: int = 8,
              units: int = 256, layers: int = 2, cell: str = "leaf") -> nn.Module:
    """LEAF's Shakespeare model (``models/shakespeare/stacked_lstm.py``) for ``(length,)`` token input.

    Args:
        input_shape: ``(length,)``, the sequence length (80 for Shakespeare).
        num_classes: Output classes (the next character); also the vocabulary unless ``vocab`` is given.
        vocab: Embedding rows (LEAF: the same 80 characters as the classes).
        embed, units, layers: LEAF: 8, 256, 2 (``units``, not ``hidden``: the MLP's ``model.hidden``
            default cannot resize it silently).
        cell: ``"leaf"`` (TensorFlow BasicLSTMCell, vmap-able) or ``"torch"`` (``nn.LSTM``).
    """
    if len(input_shape) != 1:
        raise ValueError(f"char_lstm: needs token sequences (length,), got input shape {tuple(input_shape)}")
    return CharLSTM(vocab or num_classes, num_classes, embed=embed, hidden=units, layers=layers, cell=cell)
