"""WuKong's dense arch against TorchEasyRec's formulas (tzrec/modules/interaction.py) written out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.registry import build_model
from recpipe.models.wukong.dense import (
    FactorizationMachineBlock,
    LinearCompressBlock,
    WukongDense,
    WukongLayer,
    WukongLayerSpec,
)

ROOT = Path(__file__).resolve().parents[2]


def test_linear_compress_block_mixes_features_per_column():
    torch.manual_seed(0)
    block = LinearCompressBlock(3, 2)
    x = torch.randn(2, 3, 4)
    w = block.weight.detach()
    want = torch.zeros(2, 2, 4)
    for b in range(2):
        for j in range(2):
            for d in range(4):
                want[b, j, d] = sum(x[b, i, d] * w[i, j] for i in range(3))
    torch.testing.assert_close(block(x), want)


def test_fm_block_is_x_times_x_transposed_times_w_then_norm_mlp_linear():
    torch.manual_seed(1)
    block = FactorizationMachineBlock(dim=4, feature_num_in=3, feature_num_out=2, compressed_feature_num=2,
                                      mlp=MlpSpec((5,)))  # fmt: skip
    x = torch.randn(2, 3, 4)
    w = block.weight.detach()
    # inter[b, i, c] = Σ_j <x_i, x_j> · w[j, c]: each feature's dot products with the features, mixed C ways
    inter = torch.zeros(2, 3, 2)
    for b in range(2):
        for i in range(3):
            for c in range(2):
                inter[b, i, c] = sum(torch.dot(x[b, i], x[b, j]) * w[j, c] for j in range(3))
    flat = inter.reshape(2, 6)
    normed = (flat - flat.mean(1, keepdim=True)) / torch.sqrt(
        flat.var(1, unbiased=False, keepdim=True) + 1e-5
    )
    normed = normed * block.norm.weight + block.norm.bias
    lin = block.mlp.layers[0].linear
    h = torch.relu(normed @ lin.weight.T + lin.bias)
    want = (h @ block.out.weight.T + block.out.bias).reshape(2, 2, 4)
    torch.testing.assert_close(block(x), want)


def test_layer_is_layer_norm_of_fm_lcb_and_residual():
    torch.manual_seed(2)
    x = torch.randn(3, 5, 4)
    kept = WukongLayer(4, 5, WukongLayerSpec(2, 3, 2, MlpSpec((6,))))
    assert isinstance(kept.residual, torch.nn.Identity)  # 2 + 3 == 5 features: x itself
    want = torch.nn.functional.layer_norm(
        torch.cat([kept.fmb(x), kept.lcb(x)], 1) + x, (4,), kept.norm.weight, kept.norm.bias
    )
    torch.testing.assert_close(kept(x), want)
    projected = WukongLayer(4, 5, WukongLayerSpec(4, 4, 2, MlpSpec((6,))))
    assert isinstance(projected.residual, LinearCompressBlock)  # 8 != 5: a linear compression to 8
    want = torch.nn.functional.layer_norm(
        torch.cat([projected.fmb(x), projected.lcb(x)], 1) + projected.residual(x), (4,),
        projected.norm.weight, projected.norm.bias,
    )  # fmt: skip
    torch.testing.assert_close(projected(x), want)
    assert projected(x).shape == (3, 8, 4)


def test_dense_arch_puts_the_dense_mlp_first_and_flattens_the_last_layer():
    torch.manual_seed(3)
    keys = ["a", "b"]
    arch = WukongDense(keys, 3, 4, [WukongLayerSpec(2, 2, 2, MlpSpec((6,)))], MlpSpec((5,)), MlpSpec((4,)))
    dense, emb = torch.randn(2, 3), {"a": torch.randn(2, 4), "b": torch.randn(2, 4)}
    x = torch.stack([arch.bottom(dense), emb["a"], emb["b"]], 1)
    want = arch.logit(arch.final(arch.layers[0](x).reshape(2, 16))).squeeze(-1)
    torch.testing.assert_close(arch(dense, emb), want)
    with pytest.raises(ValueError, match="dense_mlp's last width 8 must equal the embedding dim 4"):
        WukongDense(keys, 3, 4, [WukongLayerSpec(2, 2, 2, MlpSpec((6,)))], MlpSpec((5,)), MlpSpec((8,)))


def test_built_from_the_small_config_and_refuses_ignored_dense_features():
    cfg = load_config(ROOT / "configs" / "wukong_criteo_small.yaml")
    model = build_model(build_feature_spec(cfg), cfg.model)
    assert len(model.dense.layers) == 2 and model.dense.final.in_features == 16 * 16
    no_dense = cfg.model.model_copy(update={"dense_mlp": None})
    with pytest.raises(ValueError, match="reads no dense feature, yet the features have 13 dense columns"):
        build_model(build_feature_spec(cfg), no_dense)
