from __future__ import annotations

import pytest
import torch
from torch import nn

from recpipe.models.blocks.mlp import MLP, Dice, MlpSpec


def test_mlp_shapes_and_layers() -> None:
    mlp = MLP(272, [512, 256, 128])
    assert mlp.out_features == 128 and mlp.in_features == 272
    assert mlp(torch.randn(4, 272)).shape == (4, 128)
    assert mlp(torch.randn(2, 7, 272)).shape == (2, 7, 128)  # acts on the last dimension
    assert all(isinstance(layer.act, nn.ReLU) for layer in mlp.layers)
    assert (mlp(torch.randn(4, 272)) >= 0).all()


def test_mlp_options() -> None:
    mlp = MLP.from_spec(8, MlpSpec((16, 4), activation="dice", batch_norm=True, dropout=0.2))
    layer = mlp.layers[0]
    assert isinstance(layer.norm, nn.BatchNorm1d) and isinstance(layer.act, Dice)
    assert isinstance(layer.dropout, nn.Dropout) and layer.dropout.p == 0.2
    mlp.eval()
    x = torch.randn(3, 5, 8)
    # Batch norm over all leading dims: a (3, 5, 8) input equals its (15, 8) flattening.
    torch.testing.assert_close(mlp(x).reshape(15, 4), mlp(x.reshape(15, 8)))


def test_dice_interpolates_between_identity_and_alpha() -> None:
    dice = Dice(3).eval()
    x = torch.tensor([[1.0, -2.0, 0.0]])
    # Fresh running stats (mean 0, var 1), alpha 0: p·x with p = sigmoid(x / sqrt(1 + eps)).
    torch.testing.assert_close(dice(x), torch.sigmoid(x) * x)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"in_features": 0, "hidden_units": [4]}, "in_features"),
        ({"in_features": 4, "hidden_units": []}, "hidden_units"),
        ({"in_features": 4, "hidden_units": [4], "activation": "tanh"}, "unknown activation"),
        ({"in_features": 4, "hidden_units": [4], "dropout": 1.0}, "dropout"),
    ],
)
def test_mlp_errors(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        MLP(**kwargs)


def test_mlp_on_meta() -> None:
    mlp = MLP(8, [4], device=torch.device("meta"))
    assert all(p.is_meta for p in mlp.parameters())
