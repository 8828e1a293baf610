"""LEAF's models: parameter counts computed by hand from LEAF's TensorFlow graphs, shapes, the
TensorFlow BasicLSTMCell equations, and batching across clients with torch.func.vmap."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, vmap

from fedsim.models.leaf import LeafLSTMCell, char_lstm, leaf_cnn


def _count(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_leaf_cnn_parameters_by_hand():
    # models/femnist/cnn.py: conv 5x5 1->32, conv 5x5 32->64 ("same"), 2x2 pools: 28 -> 14 -> 7,
    # dense 7*7*64 -> 2048, dense 2048 -> 62; weights plus one bias per output.
    conv1 = 5 * 5 * 1 * 32 + 32
    conv2 = 5 * 5 * 32 * 64 + 64
    dense = 7 * 7 * 64 * 2048 + 2048
    logits = 2048 * 62 + 62
    assert conv1 + conv2 + dense + logits == 6_603_710
    model = leaf_cnn((1, 28, 28), 62)
    assert _count(model) == 6_603_710
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 62)
    assert not list(model.buffers())


def test_char_lstm_parameters_by_hand_and_shapes():
    # models/shakespeare/stacked_lstm.py: embedding [80, 8]; two BasicLSTMCell(256): kernel
    # [(in + 256), 4*256] and bias [4*256]; dense 256 -> 80.
    emb = 80 * 8
    lstm1 = (8 + 256) * 4 * 256 + 4 * 256
    lstm2 = (256 + 256) * 4 * 256 + 4 * 256
    dense = 256 * 80 + 80
    assert emb + lstm1 + lstm2 + dense == 817_872
    model = char_lstm((80,), 80)
    assert _count(model) == 817_872
    tokens = torch.randint(0, 80, (4, 80))
    assert model(tokens).shape == (4, 80)
    # nn.LSTM keeps two biases per gate: 2 layers x 4 x 256 more
    assert _count(char_lstm((80,), 80, cell="torch")) == 817_872 + 2 * 4 * 256
    assert char_lstm((80,), 80, cell="torch")(tokens).shape == (4, 80)


def test_leaf_cell_is_tensorflows_basic_lstm_cell():
    torch.manual_seed(0)
    cell = LeafLSTMCell(3, 2)
    x, h, c = torch.randn(1, 3), torch.randn(1, 2), torch.randn(1, 2)
    w, b = cell.gates.weight.detach(), cell.gates.bias.detach()
    z = torch.cat([x, h], 1) @ w.T + b
    i, j, f, o = z[:, 0:2], z[:, 2:4], z[:, 4:6], z[:, 6:8]
    c_new = c * torch.sigmoid(f + 1.0) + torch.sigmoid(i) * torch.tanh(j)
    h_new = torch.tanh(c_new) * torch.sigmoid(o)
    h2, c2 = cell(x, (h, c))
    torch.testing.assert_close(c2, c_new)
    torch.testing.assert_close(h2, h_new)


@pytest.mark.parametrize("make, x, y", [
    (lambda: leaf_cnn((1, 28, 28), 62, dense=16), torch.randn(3, 2, 1, 28, 28), torch.randint(0, 62, (3, 2))),
    (lambda: char_lstm((6,), 80, units=8), torch.randint(0, 80, (3, 2, 6)), torch.randint(0, 80, (3, 2))),
])
def test_models_batch_across_clients_with_vmap(make, x, y):
    torch.manual_seed(0)
    model = make()
    params = {k: v.detach() for k, v in model.named_parameters()}
    stacked = {k: v.expand(3, *v.shape).clone() for k, v in params.items()}

    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xb,)), yb)

    batched = vmap(grad(loss))(stacked, x, y)
    for c in range(3):
        one = grad(loss)(params, x[c], y[c])
        for k in params:
            torch.testing.assert_close(batched[k][c], one[k], rtol=1e-4, atol=1e-6)


def test_the_mlp_width_option_is_refused_not_applied():
    with pytest.raises(TypeError):
        leaf_cnn((1, 28, 28), 62, hidden=200)
    with pytest.raises(TypeError):
        char_lstm((80,), 80, hidden=200)


def test_bad_input_shapes():
    with pytest.raises(ValueError, match="leaf_cnn: needs"):
        leaf_cnn((784,), 62)
    with pytest.raises(ValueError, match="char_lstm: needs token sequences"):
        char_lstm((1, 28, 28), 80)
    with pytest.raises(ValueError, match="cell must be"):
        char_lstm((80,), 80, cell="gru")
