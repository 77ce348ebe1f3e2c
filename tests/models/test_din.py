from __future__ import annotations

import pytest
import torch

from recpipe.models.blocks.din import (
    SCORE_CHUNK,
    DinAttention,
    MeanPoolSequence,
    PaddedDinAttention,
    pad_jagged,
    segment_ids,
)

DIM = 12
HIDDEN = [32, 16]


def _jagged(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.long)
    query = torch.randn(len(lengths), DIM, generator=gen)
    values = torch.randn(int(offsets[-1]), DIM, generator=gen)
    return query, values, offsets


def _randomize(module: torch.nn.Module, seed: int = 1) -> None:
    # Non-zero biases and weights large enough that the scores differ visibly between items.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


# Lengths 0, 1, 5 and 100 mixed in one batch, with a few more random ones.
LENGTHS = [5, 0, 100, 1, 0, 37, 1, 5, 100, 2, 0, 13]


@pytest.mark.parametrize("weighting", ["softmax", "sigmoid"])
@pytest.mark.parametrize(
    ("first_layer", "grad_rtol"),
    [("auto", 1e-3), ("folded", 1e-3), ("per_row", 1e-3), ("accumulate", 1e-3), ("concat", 1e-4)],
)
def test_jagged_equals_padded_outputs_and_gradients(
    first_layer: str, grad_rtol: float, weighting: str
) -> None:
    torch.manual_seed(0)
    jagged = DinAttention(DIM, HIDDEN, first_layer=first_layer, weighting=weighting)
    _randomize(jagged)
    padded = PaddedDinAttention(DIM, HIDDEN, max_length=100, weighting=weighting)
    padded.load_state_dict(jagged.state_dict())  # same parameter layout

    query, values, offsets = _jagged(LENGTHS)
    outs, grads = [], []
    for module in (jagged, padded):
        q = query.clone().requires_grad_(True)
        v = values.clone().requires_grad_(True)
        module.zero_grad()
        out = module(q, v, offsets)
        # A non-uniform upstream gradient so every output element matters.
        (out * torch.linspace(-1.0, 2.0, out.numel()).view_as(out)).sum().backward()
        outs.append(out.detach())
        grads.append({"query": q.grad, "values": v.grad, **{n: p.grad for n, p in module.named_parameters()}})

    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    assert outs[0].abs().sum() > 0
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert grads[0][name].abs().sum() > 0, name
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=grad_rtol, atol=1e-5, msg=name)


def test_attention_weights_are_a_softmax_over_real_items() -> None:
    # With every score equal the output is the plain mean of the row's items.
    attn = DinAttention(DIM, HIDDEN)
    with torch.no_grad():
        for p in attn.parameters():
            p.zero_()
    query, values, offsets = _jagged([3, 1, 0])
    out = attn(query, values, offsets)
    torch.testing.assert_close(out[0], values[0:3].mean(0))
    torch.testing.assert_close(out[1], values[3])
    assert torch.equal(out[2], torch.zeros(DIM))


def test_sigmoid_weighting_is_unnormalized() -> None:
    # Each item weighs sigmoid(its score) on its own: with every score 0 each weighs 1/2, so the
    # output is half the sum of the row's items (a softmax would give their mean).
    attn = DinAttention(DIM, HIDDEN, weighting="sigmoid")
    with torch.no_grad():
        for p in attn.parameters():
            p.zero_()
    query, values, offsets = _jagged([3, 1, 0])
    out = attn(query, values, offsets)
    torch.testing.assert_close(out[0], 0.5 * values[0:3].sum(0))
    torch.testing.assert_close(out[1], 0.5 * values[3])
    assert torch.equal(out[2], torch.zeros(DIM))
    # The weights depend on the candidate: two rows with the same history, different queries.
    _randomize(attn)
    q = torch.randn(2, DIM)
    v = torch.randn(4, DIM)
    both = attn(q, torch.cat([v, v]), torch.tensor([0, 4, 8]))
    assert not torch.allclose(both[0], both[1])
    for module_cls in (DinAttention, PaddedDinAttention):
        with pytest.raises(ValueError, match="unknown attention weighting 'tanh'"):
            module_cls(DIM, HIDDEN, weighting="tanh")


@pytest.mark.parametrize("module_cls", [DinAttention, PaddedDinAttention, MeanPoolSequence])
def test_empty_history_gives_zero_vector(module_cls) -> None:
    module = module_cls(DIM) if module_cls is MeanPoolSequence else module_cls(DIM, HIDDEN)
    _randomize(module)
    query, values, offsets = _jagged([0, 4, 0])
    out = module(query, values, offsets)
    assert torch.equal(out[0], torch.zeros(DIM)) and torch.equal(out[2], torch.zeros(DIM))
    assert out[1].abs().sum() > 0
    # A batch without any history item (T = 0) works too.
    query, values, offsets = _jagged([0, 0])
    values.requires_grad_(True)
    out = module(query, values, offsets)
    assert out.shape == (2, DIM) and torch.equal(out, torch.zeros(2, DIM))
    if out.requires_grad:  # MeanPoolSequence has no parameters and T = 0 values
        out.sum().backward()


def test_rows_do_not_leak_into_each_other() -> None:
    attn = DinAttention(DIM, HIDDEN)
    _randomize(attn)
    query, values, offsets = _jagged([4, 2, 7], seed=3)
    full = attn(query, values, offsets)
    alone = attn(query[1:2], values[4:6], torch.tensor([0, 2]))
    torch.testing.assert_close(full[1:2], alone)


def test_first_layer_variants_agree_and_validate() -> None:
    query, values, offsets = _jagged(LENGTHS, seed=5)
    ref = DinAttention(DIM, HIDDEN, first_layer="concat")
    _randomize(ref)
    for variant in ("folded", "per_row", "accumulate", "auto"):
        other = DinAttention(DIM, HIDDEN, first_layer=variant)
        other.load_state_dict(ref.state_dict())
        for grad in (True, False):  # auto: per_row while autograd records, accumulate without
            with torch.set_grad_enabled(grad):
                torch.testing.assert_close(
                    other(query, values, offsets), ref(query, values, offsets), rtol=1e-5, atol=1e-6
                )
    with pytest.raises(ValueError, match="first_layer"):
        DinAttention(DIM, HIDDEN, first_layer="split")


@pytest.mark.parametrize("chunk", [1, 7, SCORE_CHUNK])
@pytest.mark.parametrize("hidden", [[32, 16], [24, 16, 8]])
@pytest.mark.parametrize("weighting", ["softmax", "sigmoid"])
@pytest.mark.parametrize("keep", [True, False])
def test_chunked_attention_matches_per_row_at_any_chunk(
    monkeypatch, chunk: int, hidden: list[int], weighting: str, keep: bool
) -> None:
    # auto trains a ReLU MLP through _ReluAttention (scores, weights and pooling with a hand-written backward,
    # chunk by chunk); per_row is plain autograd. Chunk boundaries fall inside rows at 1 and 7 items. The
    # backward reads the first layer's activations kept from the forward, or (over the limit) recomputes them.
    monkeypatch.setattr("recpipe.models.blocks.din.SCORE_CHUNK", chunk)
    if not keep:
        monkeypatch.setattr("recpipe.models.blocks.din.KEEP_FIRST_LAYER", 0)
    query, values, offsets = _jagged(LENGTHS, seed=7)
    ref = DinAttention(DIM, hidden, first_layer="per_row", weighting=weighting)
    _randomize(ref)
    chunked = DinAttention(DIM, hidden, weighting=weighting)
    chunked.load_state_dict(ref.state_dict())
    assert chunked._use_chunked() and not ref._use_chunked()
    grads = []
    for module in (chunked, ref):
        q = query.clone().requires_grad_(True)
        v = values.clone().requires_grad_(True)
        out = module(q, v, offsets)
        (out * torch.linspace(-1.0, 2.0, out.numel()).view_as(out)).sum().backward()
        grads.append({"out": out.detach(), "query": q.grad, "values": v.grad})
        grads[-1].update({n: p.grad for n, p in module.named_parameters()})
    for name in grads[1]:
        assert grads[1][name].abs().sum() > 0, name
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-5, msg=name)


def test_chunked_scores_only_for_eager_relu_training() -> None:
    assert not DinAttention(DIM, HIDDEN, activation="dice")._use_chunked()
    assert not DinAttention(DIM, HIDDEN, first_layer="folded")._use_chunked()
    with torch.no_grad():
        assert not DinAttention(DIM, HIDDEN)._use_chunked()
    with torch.autocast("cpu", dtype=torch.float16):
        assert not DinAttention(DIM, HIDDEN)._use_chunked()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 training takes it, in bf16
        assert DinAttention(DIM, HIDDEN)._use_chunked()


@pytest.mark.parametrize(("chunk", "keep"), [(7, True), (7, False), (SCORE_CHUNK, True)])
def test_bf16_chunked_attention_is_as_close_to_float32_as_the_plain_bf16_ops(
    monkeypatch, chunk: int, keep: bool
) -> None:
    # Under CPU autocast to bfloat16 _ReluAttention runs the MLP's GEMMs in bf16, its sums over chunks and the
    # weighting and pooling in float32; the plain per_row ops under the same autocast (bf16 scores into the
    # softmax) and float32 are the references. The parameters' gradients reach the float32 parameters in float32.
    monkeypatch.setattr("recpipe.models.blocks.din.SCORE_CHUNK", chunk)
    if not keep:
        monkeypatch.setattr("recpipe.models.blocks.din.KEEP_FIRST_LAYER", 0)
    query, values, offsets = _jagged(LENGTHS, seed=8)
    ref = DinAttention(DIM, HIDDEN, first_layer="per_row")
    _randomize(ref)
    chunked = DinAttention(DIM, HIDDEN)
    chunked.load_state_dict(ref.state_dict())
    runs = []
    for module, bf16 in ((chunked, True), (ref, True), (ref, False)):
        q = query.clone().requires_grad_(True)
        v = values.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            assert module._use_chunked() == (module is chunked)
            out = module(q, v, offsets)
        (out.float() * torch.linspace(-1.0, 2.0, out.numel()).view_as(out)).sum().backward()
        got = {"out": out.detach().float(), "query": q.grad, "values": v.grad}
        got.update({n: p.grad for n, p in module.named_parameters()})
        module.zero_grad(set_to_none=True)
        runs.append(got)
    chunked_bf16, plain_bf16, fp32 = runs
    for name, want in fp32.items():
        assert chunked_bf16[name].dtype == want.dtype == torch.float32, name
        # No further from float32 than the plain bf16 ops (which round the scores to bf16 before the softmax),
        # and near them. The score layer's bias has no gradient in exact arithmetic (a softmax ignores a shift
        # of every score): both bf16 paths give rounding noise there, the fused one less.
        err, plain_err = (float((got[name] - want).abs().max()) for got in (chunked_bf16, plain_bf16))
        assert err <= 1.05 * plain_err + 1e-6, (name, err, plain_err)
        if name != "attn_out.bias":
            scale = float(want.abs().max())
            torch.testing.assert_close(
                chunked_bf16[name], plain_bf16[name], rtol=0.0, atol=0.06 * scale, msg=name
            )
    torch.testing.assert_close(
        chunked_bf16["out"], fp32["out"], rtol=0.0, atol=0.05 * float(fp32["out"].abs().max())
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_first_layer_variants_agree_under_autocast(dtype: torch.dtype) -> None:
    # The accumulate GEMMs run in place, which autocast does not cast: the mixed-precision eval path.
    query, values, offsets = _jagged(LENGTHS, seed=6)
    ref = DinAttention(DIM, HIDDEN, first_layer="concat")
    _randomize(ref)
    other = DinAttention(DIM, HIDDEN, first_layer="accumulate")
    other.load_state_dict(ref.state_dict())
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        got, want = other(query, values, offsets), ref(query, values, offsets)
    torch.testing.assert_close(got.float(), want.float(), rtol=0.05, atol=0.05)


def test_mean_pool_sequence() -> None:
    query, values, offsets = _jagged([2, 0, 3])
    out = MeanPoolSequence(DIM)(query, values, offsets)
    torch.testing.assert_close(out[0], values[:2].mean(0))
    torch.testing.assert_close(out[2], values[2:].mean(0))
    assert torch.equal(out[1], torch.zeros(DIM))


def test_segment_ids_and_pad_jagged() -> None:
    offsets = torch.tensor([0, 3, 3, 4])
    assert segment_ids(offsets, 4).tolist() == [0, 0, 0, 2]
    values = torch.arange(8.0).view(4, 2)
    padded = pad_jagged(values, offsets, max_length=2)  # row 0 is truncated to 2 items
    expected = torch.tensor([[[0.0, 1.0], [2.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]], [[6.0, 7.0], [0.0, 0.0]]])
    assert torch.equal(padded, expected)
