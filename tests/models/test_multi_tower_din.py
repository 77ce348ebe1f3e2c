from __future__ import annotations

import pytest
import torch
from model_batches import capped_spec, dense_inputs, din_batch, train_losses
from torch.export import Dim

from recpipe.models.blocks.din import DinAttention, MeanPoolSequence, PaddedDinAttention
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.protocol import DenseArchModule
from recpipe.models.registry import build_model


@pytest.fixture(scope="module")
def din_model(din_spec, din_cfg) -> MultiTowerDIN:
    # Full-size tables (1.1M user rows): built once for the module.
    torch.manual_seed(0)
    return build_model(din_spec, din_cfg.model).eval()


def test_structure_follows_the_config(din_model, din_spec) -> None:
    assert isinstance(din_model, MultiTowerDIN)
    deep = din_spec.group("deep").sparse
    assert din_model.dense.towers["deep"].in_features == 16 * len(deep) == 256
    assert [layer.linear.out_features for layer in din_model.dense.towers["deep"].layers] == [128, 64, 32]
    assert isinstance(din_model.dense.din["seq"], DinAttention) and din_model.dense.din["seq"].dim == 48
    assert din_model.dense.final.in_features == 32 + 48
    assert din_model.dense_input_names() == ["dense", *deep, "seq__query", "seq__values", "seq__offsets"]


def test_sparse_arch_outputs_and_forward_is_dense_of_sparse(din_model, din_spec) -> None:
    batch = din_batch(din_spec, 16, torch.Generator().manual_seed(1))
    emb = din_model.sparse_arch(batch.sparse)
    assert list(emb) == din_model.dense_input_names()[1:]
    lengths = batch.sparse["click_50_seq__adgroup_id"].lengths()
    assert emb["seq__query"].shape == (16, 48)
    assert emb["seq__values"].shape == (int(lengths.sum()), 48)  # jagged: real items only
    assert emb["seq__offsets"].dtype == torch.int64
    assert emb["seq__offsets"].tolist() == [0, *lengths.cumsum(0).tolist()]
    # The query's adgroup part is the target's pooled adgroup embedding (shared table).
    torch.testing.assert_close(emb["seq__query"][:, :16], emb["adgroup_id"])
    logits = din_model(batch.dense, batch.sparse)
    assert logits.shape == (16,)
    torch.testing.assert_close(logits, din_model.dense_arch(batch.dense, emb))
    torch.testing.assert_close(logits, din_model.predict(batch))


def test_padded_mode_gives_the_same_logits(din_spec, din_cfg) -> None:
    spec = capped_spec(din_spec)
    torch.manual_seed(0)
    jagged = build_model(spec, din_cfg.model)
    padded = build_model(
        spec,
        din_cfg.model.model_copy(
            update={"din_towers": [din_cfg.model.din_towers[0].model_copy(update={"attention": "padded"})]}
        ),
    )
    assert (
        isinstance(padded.dense.din["seq"], PaddedDinAttention) and padded.dense.din["seq"].max_length == 100
    )
    padded.load_state_dict(jagged.state_dict())
    batch = din_batch(spec, 32, torch.Generator().manual_seed(2))
    torch.testing.assert_close(jagged.predict(batch), padded.predict(batch), rtol=1e-5, atol=1e-6)
    mean_pool = build_model(
        spec,
        din_cfg.model.model_copy(
            update={"din_towers": [din_cfg.model.din_towers[0].model_copy(update={"attention": "mean_pool"})]}
        ),
    )
    assert isinstance(mean_pool.dense.din["seq"], MeanPoolSequence)


def test_multi_tower_din_trains(din_spec, din_cfg) -> None:
    # The config's FeatureSpec with tables capped at 1000 rows (ids stay < 64), so a step is cheap.
    spec = capped_spec(din_spec)
    torch.manual_seed(0)
    model = build_model(spec, din_cfg.model)
    gen = torch.Generator().manual_seed(0)
    batches = [din_batch(spec, 256, gen) for _ in range(6)]

    def check_logits(logits: torch.Tensor) -> None:
        assert logits.shape == (256,) and not logits.requires_grad

    losses = train_losses(model, batches, 36, check_logits)
    first, last = sum(losses[:6]) / 6, sum(losses[-6:]) / 6
    assert last < 0.85 * first, (first, last)


def test_dense_arch_exports_with_dynamic_batch_and_values(din_model, din_spec) -> None:
    gen = torch.Generator().manual_seed(3)
    small, large = din_batch(din_spec, 5, gen), din_batch(din_spec, 11, gen)
    dense_part = DenseArchModule(din_model)
    batch, values = Dim("batch", min=1), Dim("values", min=0)
    shapes = []
    for name in din_model.dense_input_names():
        if name.endswith("__values"):
            shapes.append({0: values})
        elif name.endswith("__offsets"):
            shapes.append({0: batch + 1})
        else:
            shapes.append({0: batch})
    with torch.no_grad():
        program = torch.export.export(
            dense_part, dense_inputs(din_model, large), dynamic_shapes={"inputs": tuple(shapes)}
        )
        exported = program.module()
        for b in (small, large):
            inputs = dense_inputs(din_model, b)
            assert inputs[-1].shape[0] == b.batch_size + 1
            torch.testing.assert_close(exported(*inputs), din_model.predict(b), rtol=1e-5, atol=1e-6)


def test_dense_arch_exports_to_onnx(din_model, din_spec, tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    gen = torch.Generator().manual_seed(4)
    small, large = din_batch(din_spec, 3, gen), din_batch(din_spec, 9, gen)
    names = din_model.dense_input_names()
    batch, values = Dim("batch", min=1), Dim("values", min=0)
    shapes = tuple(
        {0: values} if n.endswith("__values") else {0: batch + 1} if n.endswith("__offsets") else {0: batch}
        for n in names
    )
    with torch.no_grad():
        program = torch.onnx.export(
            DenseArchModule(din_model),
            dense_inputs(din_model, large),
            dynamic_shapes={"inputs": shapes},
            input_names=names,
            dynamo=True,
            verbose=False,
        )
    program.save(str(tmp_path / "dense.onnx"))
    session = ort.InferenceSession(str(tmp_path / "dense.onnx"))
    assert [i.name for i in session.get_inputs()] == names
    for b in (small, large):
        feed = {n: x.numpy() for n, x in zip(names, dense_inputs(din_model, b))}
        (logits,) = session.run(None, feed)
        torch.testing.assert_close(
            torch.from_numpy(logits), din_model.predict(b).detach(), rtol=1e-4, atol=1e-5
        )


def test_dense_module_holds_no_embedding_table(din_model) -> None:
    dense_part = DenseArchModule(din_model)
    names = [n for n, _ in dense_part.named_parameters()]
    assert names and not any("embedding" in n for n in names)
    assert sum(p.numel() for p in dense_part.parameters()) < 200_000
