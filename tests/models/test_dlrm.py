from __future__ import annotations

import pytest
import torch
from model_batches import capped_spec, dense_inputs, dlrm_batch, train_losses
from torch.export import Dim
from torchrec.models.dlrm import InteractionArch

from recpipe.models.blocks.interaction import DotInteraction, interaction_width
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.dlrm.dense import over_arch_width
from recpipe.models.dlrm.model import DLRM
from recpipe.models.protocol import DenseArchModule
from recpipe.models.registry import build_model


def test_interaction_equals_naive_double_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    batch, num_sparse, dim = 5, 4, 3
    dense = torch.randn(batch, dim, generator=gen)
    sparse = torch.randn(batch, num_sparse, dim, generator=gen)
    out = DotInteraction(num_sparse)(dense, sparse)

    vectors = [dense] + [sparse[:, i] for i in range(num_sparse)]
    naive = [dense]
    for i in range(len(vectors)):
        for j in range(i + 1, len(vectors)):
            naive.append((vectors[i] * vectors[j]).sum(1, keepdim=True))
    expected = torch.cat(naive, dim=1)
    assert out.shape == (batch, interaction_width(num_sparse, dim)) == (batch, dim + 10)
    torch.testing.assert_close(out, expected)
    # Same layout as TorchRec's InteractionArch (row-major strict upper triangle).
    torch.testing.assert_close(out, InteractionArch(num_sparse)(dense, sparse))


def test_interaction_gradients_match_torchrec() -> None:
    gen = torch.Generator().manual_seed(1)
    dense = torch.randn(6, 8, generator=gen)
    sparse = torch.randn(6, 26, 8, generator=gen)
    grads = []
    for module in (DotInteraction(26), InteractionArch(26)):
        d, s = dense.clone().requires_grad_(True), sparse.clone().requires_grad_(True)
        module(d, s).pow(2).sum().backward()
        grads.append((d.grad, s.grad))
    torch.testing.assert_close(grads[0], grads[1])


def test_interaction_on_meta_then_materialized() -> None:
    inter = DotInteraction(3, device=torch.device("meta"))
    inter.to_empty(device="cpu")
    inter.reset_parameters()  # what DistributedModelParallel does after materializing
    dense, sparse = torch.randn(2, 4), torch.randn(2, 3, 4)
    torch.testing.assert_close(inter(dense, sparse), DotInteraction(3)(dense, sparse))


def test_dense_arch_width_must_equal_embedding_dim(dlrm_spec) -> None:
    keys = ["C1", "C2", "C3"]
    with pytest.raises(ValueError, match=r"dense arch output width 8 must equal the embedding dim 16"):
        DLRM(dlrm_spec.tables(), keys, 13, MlpSpec((32, 8)), MlpSpec((16,)), device=torch.device("meta"))


def test_over_arch_width_check_names_both_numbers(dlrm_spec) -> None:
    keys = [f"C{i}" for i in range(1, 27)]
    # The seed's pitfall: a hard-coded width that forgot the dense vector and the dense/sparse pairs.
    with pytest.raises(ValueError, match=r"over arch input width 325 .* interaction output width 367"):
        DLRM(
            dlrm_spec.tables(),
            keys,
            13,
            MlpSpec((64, 16)),
            MlpSpec((16,)),
            over_in_features=26 * 25 // 2,
            device=torch.device("meta"),
        )
    model = DLRM(
        dlrm_spec.tables(),
        keys,
        13,
        MlpSpec((64, 16)),
        MlpSpec((16,)),
        over_in_features=367,
        device=torch.device("meta"),
    )
    assert model.dense.over.in_features == 367


def test_arch_with_sparse_feeds_the_raw_embeddings_to_the_over_arch(dlrm_spec) -> None:
    keys = ["C1", "C2", "C3"]
    kwargs = {"device": torch.device("cpu")}
    width = over_arch_width(3, 16, arch_with_sparse=True)
    assert width == interaction_width(3, 16) + 3 * 16 == 16 + 6 + 48
    with pytest.raises(
        ValueError, match=r"over arch input width 22 .* width 70 \(= .* \+ F·D raw embeddings"
    ):
        DLRM(dlrm_spec.tables(), keys, 13, MlpSpec((64, 16)), MlpSpec((8,)), over_in_features=22,
             arch_with_sparse=True, device=torch.device("meta"))  # fmt: skip
    torch.manual_seed(0)
    model = DLRM(
        capped_spec(dlrm_spec, 100).tables(),
        keys,
        13,
        MlpSpec((16,)),
        MlpSpec((8,)),
        arch_with_sparse=True,
        **kwargs,
    )
    assert model.dense.over.in_features == width
    dense = torch.randn(4, 13)
    emb = {k: torch.randn(4, 16) for k in keys}
    # The over arch's input is [dense vector, pairwise dots, C1, C2, C3]: check by hand.
    seen = []
    model.dense.over.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    model.dense_arch(dense, emb)
    bottom = model.dense.bottom(dense)
    stacked = torch.stack([emb[k] for k in keys], dim=1)
    expected = torch.cat([model.dense.interaction(bottom, stacked), *(emb[k] for k in keys)], dim=1)
    torch.testing.assert_close(seen[0], expected)


def test_dlrm_forward_is_dense_of_sparse(dlrm_spec, dlrm_cfg) -> None:
    torch.manual_seed(0)
    model = build_model(dlrm_spec, dlrm_cfg.model)  # full-size tables (26 x 100k rows)
    assert isinstance(model, DLRM)
    assert model.dense_input_names() == ["dense", *[f"C{i}" for i in range(1, 27)]]
    batch = dlrm_batch(dlrm_spec, 64, torch.Generator().manual_seed(0))
    emb = model.sparse_arch(batch.sparse)
    assert list(emb) == model.dense_input_names()[1:]
    assert all(v.shape == (64, 16) for v in emb.values())
    assert torch.equal(emb["C26"][0], torch.zeros(16))  # no id in row 0: an empty bag pools to zeros
    logits = model(batch.dense, batch.sparse)
    assert logits.shape == (64,)
    torch.testing.assert_close(logits, model.dense_arch(batch.dense, emb))
    torch.testing.assert_close(logits, model.predict(batch))


def test_dlrm_trains(dlrm_spec, dlrm_cfg) -> None:
    # The config's FeatureSpec with tables capped at 1000 rows (ids stay < 8), so a step is cheap.
    spec = capped_spec(dlrm_spec)
    torch.manual_seed(0)
    model = build_model(spec, dlrm_cfg.model)
    gen = torch.Generator().manual_seed(0)
    batches = [dlrm_batch(spec, 256, gen) for _ in range(6)]

    def check_logits(logits: torch.Tensor) -> None:
        assert logits.shape == (256,)

    losses = train_losses(model, batches, 30, check_logits)
    first, last = sum(losses[:6]) / 6, sum(losses[-6:]) / 6
    assert last < 0.7 * first, (first, last)


def test_dlrm_dense_arch_exports_with_dynamic_batch(dlrm_spec, dlrm_cfg) -> None:
    spec = capped_spec(dlrm_spec)
    model = build_model(spec, dlrm_cfg.model).eval()
    names = model.dense_input_names()
    small, large = (
        dlrm_batch(spec, 3, torch.Generator().manual_seed(1)),
        dlrm_batch(spec, 7, torch.Generator()),
    )
    dense_part = DenseArchModule(model)
    assert not any("embedding" in n for n, _ in dense_part.named_parameters())
    batch = Dim("batch", min=1)
    with torch.no_grad():
        program = torch.export.export(
            dense_part,
            dense_inputs(model, large),
            dynamic_shapes={"inputs": tuple({0: batch} for _ in names)},
        )
        for b in (small, large):
            torch.testing.assert_close(
                program.module()(*dense_inputs(model, b)), model.predict(b), rtol=1e-5, atol=1e-6
            )


def test_interaction_scripts_and_traces() -> None:
    # The one-bmm backward is an autograd.Function, which TorchScript and tracers cannot hold: both
    # must fall back to the plain bmm and compute the same values.
    inter = DotInteraction(4)
    dense = torch.randn(3, 5, requires_grad=True)
    sparse = torch.randn(3, 4, 5)
    expected = inter(dense, sparse)
    torch.testing.assert_close(torch.jit.script(inter)(dense, sparse), expected)
    torch.testing.assert_close(torch.jit.trace(inter, (dense, sparse))(dense, sparse), expected)
