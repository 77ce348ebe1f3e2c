"""The cross models' layers against TorchEasyRec's formulas written out by hand on tiny inputs: DCN's cross
layer, DCNv2's low-rank cross layer, xDeepFM's CIN, MaskNet's mask block and its parallel / serial module,
and the dense archs' shapes."""

from __future__ import annotations

import pytest
import torch

from recpipe.models.blocks.cross import CompressedInteraction, CrossNet, CrossNetV2
from recpipe.models.blocks.group_input import GroupColumns, GroupConcat
from recpipe.models.blocks.masknet import MaskBlock, MaskNetModule, MaskNetSpec
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.dcn_v2.dense import DcnDense
from recpipe.models.mask_net.dense import MaskNetDense
from recpipe.models.xdeepfm.dense import XDeepFMDense


def test_one_dcn_cross_layer_is_x0_times_xw_plus_b_plus_x():
    cross = CrossNet(3, num_layers=1)
    with torch.no_grad():
        cross.w[0].weight.copy_(torch.tensor([[1.0, 0.5, -1.0]]))
        cross.b[0].copy_(torch.tensor([0.1, 0.2, 0.3]))
    x0 = torch.tensor([[1.0, 2.0, 3.0]])
    # x·w = 1 + 1 - 3 = -1; x0·(-1) + b + x0 = [0.1, 0.2, 0.3]
    torch.testing.assert_close(cross(x0), torch.tensor([[0.1, 0.2, 0.3]]))


def test_two_dcn_cross_layers_feed_x_l_and_keep_x0():
    torch.manual_seed(0)
    cross = CrossNet(4, num_layers=2)
    x0 = torch.randn(5, 4)
    w = [cross.w[i].weight[0] for i in range(2)]
    x1 = x0 * (x0 @ w[0]).unsqueeze(1) + cross.b[0] + x0
    x2 = x0 * (x1 @ w[1]).unsqueeze(1) + cross.b[1] + x1
    torch.testing.assert_close(cross(x0), x2)


def test_dcn_cross_init_is_xavier_weights_and_zero_bias():
    cross = CrossNet(429, num_layers=3)
    bound = (6 / (429 + 1)) ** 0.5
    assert all(b.abs().sum() == 0 for b in cross.b)
    assert all(w.weight.abs().max() <= bound for w in cross.w)


def test_one_low_rank_cross_layer_is_x0_times_v_u_x_plus_c_plus_x():
    cross = CrossNetV2(2, num_layers=1, low_rank=1)
    with torch.no_grad():
        cross.u[0].weight.copy_(torch.tensor([[1.0, 1.0]]))  # U: (1, 2)
        cross.v[0].weight.copy_(torch.tensor([[2.0], [-1.0]]))  # V: (2, 1)
        cross.v[0].bias.copy_(torch.tensor([0.5, 0.0]))
    x0 = torch.tensor([[1.0, 3.0]])
    # U x = 4; V(4) + c = [8.5, -4]; x0 ⊙ that + x0 = [8.5 + 1, -12 + 3]
    torch.testing.assert_close(cross(x0), torch.tensor([[9.5, -9.0]]))
    assert cross.u[0].bias is None  # TorchEasyRec's u_kernels have no bias


def test_cin_layer_is_a_weighted_sum_of_field_products_summed_over_d():
    torch.manual_seed(1)
    b, f, d, sizes = 3, 2, 4, [3, 2]
    cin = CompressedInteraction(f, sizes)
    x0 = torch.randn(b, f, d)
    out, x = [], x0
    for conv in cin.layers:
        w, bias = conv.weight[:, :, 0], conv.bias  # (H_k, H_{k-1}·F)
        h = x.shape[1]
        nxt = torch.zeros(b, w.shape[0], d)
        for k in range(w.shape[0]):
            for i in range(h):
                for j in range(f):
                    nxt[:, k] += w[k, i * f + j] * x[:, i] * x0[:, j]
            nxt[:, k] += bias[k]
        out.append(nxt.sum(dim=2))
        x = nxt
    torch.testing.assert_close(cin(x0), torch.cat(out, dim=1))
    assert cin(x0).shape == (b, sum(sizes))


def test_mask_block_masks_its_input_by_the_embedding_then_ln_relu():
    torch.manual_seed(2)
    block = MaskBlock(4, 6, hidden_dim=3, aggregation_dim=5)
    x, m = torch.randn(2, 4), torch.randn(2, 6)
    g1, g2 = block.mask_generator[0], block.mask_generator[2]
    mask = g2(torch.relu(g1(m)))
    ffn = block.ffn[0]
    want = torch.relu(torch.nn.functional.layer_norm(ffn(x * mask), (3,)))  # LayerNorm at its init (1, 0)
    torch.testing.assert_close(block(x, m), want)


def test_mask_net_parallel_concatenates_and_serial_chains():
    torch.manual_seed(3)
    emb = torch.randn(4, 6)
    par = MaskNetModule(6, MaskNetSpec(2, hidden_dim=5, reduction_ratio=2.0, aggregation_dim=None))
    normed = torch.nn.functional.layer_norm(emb, (6,))
    want = torch.cat([blk(normed, emb) for blk in par.blocks], dim=1)
    torch.testing.assert_close(par(emb), want)
    assert par.blocks[0].mask_generator[0].out_features == 12  # int(6 · 2.0)
    ser = MaskNetModule(
        6, MaskNetSpec(2, hidden_dim=5, reduction_ratio=2.0, aggregation_dim=None, parallel=False)
    )
    torch.testing.assert_close(ser(emb), ser.blocks[1](ser.blocks[0](normed, emb), emb))
    assert ser.blocks[1].mask_generator[0].out_features == 10  # int(5 · 2.0): its input is the 5-wide hidden
    top = MaskNetModule(6, MaskNetSpec(2, 5, None, 7, MlpSpec((8, 4))))
    assert top(emb).shape == (4, 4) and top.blocks[0].mask_generator[0].out_features == 7


def test_mask_block_without_a_width_is_refused():
    with pytest.raises(ValueError, match="reduction_ratio or aggregation_dim"):
        MaskNetModule(6, MaskNetSpec(1, 5, None, None))


def _embeddings(keys, dim, b=3):
    return {k: torch.randn(b, dim) for k in keys}


def test_dense_archs_read_the_group_and_end_in_one_logit():
    torch.manual_seed(4)
    keys, dims = ("a", "b"), {"a": 4, "b": 4, "a__wide": 2, "b__wide": 2}
    cols = GroupColumns(keys, (1,))
    dense, emb = torch.randn(3, 2), _embeddings(keys, 4) | _embeddings(("a__wide", "b__wide"), 2)
    dcn = DcnDense(cols, dims, 2, CrossNetV2(9, 2, 3), MlpSpec((4,)), deep=MlpSpec((5,)))
    x0 = torch.cat([emb["a"], emb["b"], dense[:, [1]]], dim=1)
    want = dcn.logit(dcn.final(torch.cat([dcn.cross(x0), dcn.deep(x0)], dim=1))).squeeze(-1)
    torch.testing.assert_close(dcn(dense, emb), want)
    assert dcn.logit.bias is None and dcn.input_names() == ["dense", "a", "b"]
    mask = MaskNetDense(GroupConcat(cols, dims, 2), MaskNetSpec(2, 4, 1.0, None, MlpSpec((3,))))
    assert mask(dense, emb).shape == (3,)
    x = XDeepFMDense(["a__wide", "b__wide"], cols, dims, 2, [3, 2], MlpSpec((4,)), MlpSpec((4,)))
    assert x(dense, emb).shape == (3,) and x.input_names() == ["dense", "a__wide", "b__wide", "a", "b"]
    with pytest.raises(ValueError, match="one embedding dim"):
        XDeepFMDense(["a__wide", "a"], cols, dims, 2, [3], MlpSpec((4,)), MlpSpec((4,)))
