"""The shared-history DIN attention (one user × B candidates): ``forward_shared(query, history)`` equals the jagged
attention over the history tiled B times, for every attention kind, weighting and activation, an empty and a
one-item history; MultiTowerDIN's dense arch likewise (``forward_shared``); its bf16 GEMMs (``gemm_dtype``) close
to float32, for a plain ReLU MLP only. Its export is tested with the RTP backend's
(tests/export/test_shared_history.py)."""

from __future__ import annotations

import pytest
import torch
from model_batches import din_batch

from recpipe.models.blocks.din import DinAttention, MeanPoolSequence, PaddedDinAttention
from recpipe.models.blocks.din_shared import (
    low_precision_ok,
    relu_low,
    shared_first_layer,
    shared_history_attention,
)
from recpipe.models.multi_tower_din.dense import PadQuery
from recpipe.models.registry import build_model

DIM = 12


def _randomize(module: torch.nn.Module, seed: int = 1, scale: float = 0.5) -> None:
    # Weights large enough that the items' scores differ visibly (else every weight is ~1/T and a wrong
    # pairing of candidate and item could pass).
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)


def _tiled(module: torch.nn.Module, query: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
    batch, items = query.shape[0], history.shape[0]
    return module(query, history.repeat(batch, 1), torch.arange(batch + 1) * items)


def _inputs(batch: int, items: int, dim: int = DIM, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, dim, generator=gen), torch.randn(items, dim, generator=gen)


@pytest.mark.parametrize("weighting", ["softmax", "sigmoid"])
@pytest.mark.parametrize("activation", ["relu", "dice", "sigmoid"])
@pytest.mark.parametrize("items", [0, 1, 7, 100])
def test_shared_history_equals_the_tiled_jagged_attention(
    weighting: str, activation: str, items: int
) -> None:
    attn = DinAttention(DIM, [32, 16], activation=activation, weighting=weighting).eval()
    _randomize(attn)
    query, history = _inputs(9, items)
    with torch.no_grad():
        want = _tiled(attn, query, history)
        got = attn.forward_shared(query, history)
    assert got.shape == (9, DIM)
    # float32: the sums are grouped differently; over 100 items at these large weights either is ~5e-6 off the
    # float64 result (the shared one no further than the tiled one).
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # in float64 the same function to rounding: the math, not a tolerance, agrees
        attn64, q64, s64 = attn.double(), query.double(), history.double()
        torch.testing.assert_close(
            attn64.forward_shared(q64, s64), _tiled(attn64, q64, s64), rtol=0, atol=1e-12
        )
    if items == 0:
        assert torch.equal(got, torch.zeros(9, DIM))  # an empty history pools to zeros, as a jagged empty row
    elif items > 1:
        assert not torch.allclose(got[0], got[1])  # each candidate its own weights, not one row broadcast


def test_the_first_layer_is_the_linear_over_every_pair() -> None:
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(8, 4 * DIM, generator=gen), torch.randn(8, generator=gen)
    query, history = _inputs(5, 4)
    q = query.unsqueeze(1).expand(5, 4, DIM)
    s = history.unsqueeze(0).expand(5, 4, DIM)
    want = torch.nn.functional.linear(torch.cat([q, s, q - s, q * s], dim=2), weight, bias)  # (B, T, H)
    got = shared_first_layer(weight, bias, query, history)
    torch.testing.assert_close(got.view(5, 4, 8), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("weighting", ["softmax", "sigmoid"])
@pytest.mark.parametrize("items", [0, 1, 68])
def test_bf16_gemms_stay_close_to_float32(weighting: str, items: int) -> None:
    attn = DinAttention(DIM, [32, 16], weighting=weighting).eval()
    # Scores of a few units (at _randomize's default, tens: bf16's relative 2^-9 is then a visible absolute error
    # in the softmax's exponent)
    _randomize(attn, scale=0.2)
    query, history = _inputs(50, items)
    with torch.no_grad():
        want = attn.forward_shared(query, history)
        attn.shared_gemm_dtype = torch.bfloat16
        got = attn.forward_shared(query, history)
        # the class default (float32) is back once the attribute goes: export.shared.gemm_dtype's restore
        del attn.shared_gemm_dtype
        assert torch.equal(attn.forward_shared(query, history), want)
    assert got.dtype == torch.float32 and got.shape == (50, DIM)
    if items == 0:
        assert torch.equal(got, torch.zeros(50, DIM))
        return
    # bf16 keeps 8 bits of mantissa: ~0.3% of the pooled scale here, bounded at 1%
    scale = want.abs().max()
    assert (got - want).abs().max() <= 0.01 * scale
    if items > 1:
        assert not torch.equal(got, want)  # the GEMMs did run in bf16


def test_bf16_gemms_need_a_plain_relu_mlp() -> None:
    for activation in ("dice", "sigmoid", "gelu"):
        attn = DinAttention(DIM, [16], activation=activation)
        assert not low_precision_ok(attn.attn_mlp)
        with pytest.raises(ValueError, match="plain ReLU"):
            shared_history_attention(
                attn.attn_mlp, attn.attn_out, "softmax", *_inputs(3, 4), gemm_dtype=torch.bfloat16
            )
    assert low_precision_ok(DinAttention(DIM, [16, 8]).attn_mlp)


def test_relu_low_is_relu_of_bf16() -> None:
    x = torch.tensor([-3.5, -0.0, 0.0, 1e-30, -1e-30, 2.0, float("inf"), float("-inf")]).to(torch.bfloat16)
    x = torch.cat([x, torch.randn(1000).to(torch.bfloat16)])
    h = x.clone()
    got = relu_low(h)
    assert got.dtype == torch.bfloat16 and got.data_ptr() == h.data_ptr()  # in place
    assert torch.equal(got, torch.relu(x))
    assert not torch.signbit(got).any()  # -0.0 and the negatives become +0.0


def test_padded_mean_pool_and_padded_query_share_the_history_too() -> None:
    query, history = _inputs(6, 9)
    padded = PaddedDinAttention(DIM, [16], max_length=5).eval()  # truncates the 9 items to 5, as FG would
    _randomize(padded)
    pad_query = PadQuery(DinAttention(DIM, [16]), 4).eval()
    _randomize(pad_query)
    with torch.no_grad():
        for module, q in ((padded, query), (MeanPoolSequence(DIM), query), (pad_query, query[:, :-4])):
            torch.testing.assert_close(
                module.forward_shared(q, history), _tiled(module, q, history), rtol=1e-5, atol=1e-6
            )
        mean = MeanPoolSequence(DIM)
        assert torch.equal(mean.forward_shared(query, history[:0]), torch.zeros(6, DIM))


def test_the_dense_arch_scores_shared_histories_as_tiled_rows(din_spec, din_cfg) -> None:
    torch.manual_seed(0)
    model = build_model(din_spec, din_cfg.model).eval()
    batch = din_batch(din_spec, 16, torch.Generator().manual_seed(1))
    with torch.no_grad():
        emb = model.sparse_arch(batch.sparse)
    offsets = emb["seq__offsets"]
    user = int(torch.argmax(offsets[1:] - offsets[:-1]))  # the longest history in the batch
    history = emb["seq__values"][offsets[user] : offsets[user + 1]]
    assert history.shape[0] > 1
    tiled = dict(emb, seq__values=history.repeat(16, 1), seq__offsets=torch.arange(17) * history.shape[0])
    shared = {k: v for k, v in emb.items() if k != "seq__offsets"} | {"seq__values": history}
    dense = model.dense_module()
    assert dense.shared_history_input_names() == [n for n in model.dense_input_names() if n != "seq__offsets"]
    with torch.no_grad():
        want = dense(batch.dense, tiled)
        got = dense.forward_shared(batch.dense, shared)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert len(set(want.round(decimals=4).tolist())) > 1  # the candidates differ
