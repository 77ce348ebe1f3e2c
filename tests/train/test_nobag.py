"""recpipe.train.nobag: unpooled CPU lookups with the gather forward and segment-sum backward give FBGEMM's own
outputs, weights and optimizer state, step after step (shared tables, repeated ids, empty rows, a changed
learning rate); what it cannot serve keeps FBGEMM's path; an id outside its table is refused; and a DIN
trained under DMP on CPU uses it."""

from __future__ import annotations

import fbgemm_gpu  # noqa: F401  (torch.ops.fbgemm)
import pytest
import torch
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    OptimType,
    SplitTableBatchedEmbeddingBagsCodegen,
)

from recpipe.train.nobag import use_segment_backward

ROWS = [50, 7, 30]  # three tables; features 0 and 1 share table 0 (a history's id and the candidate's)
FEATURE_TABLE_MAP = [0, 0, 1, 2]  # TorchRec's order: a table's features next to each other
D = 8


def _tbe(
    optimizer: OptimType, pooling: PoolingMode = PoolingMode.NONE, **kw: object
) -> SplitTableBatchedEmbeddingBagsCodegen:
    torch.manual_seed(0)
    kw = ({"eps": 1e-3} if optimizer != OptimType.EXACT_SGD else {}) | kw
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(r, D, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in ROWS],
        feature_table_map=FEATURE_TABLE_MAP,
        optimizer=optimizer,
        learning_rate=0.3,
        pooling_mode=pooling,
        **kw,
    )


def _batch(seed: int, batch: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (len(FEATURE_TABLE_MAP) * batch,), generator=g)
    lengths[1] = 0  # an empty history
    ids = [
        torch.randint(
            0,
            ROWS[FEATURE_TABLE_MAP[f]] // 3,
            (int(lengths[f * batch : (f + 1) * batch].sum()),),
            generator=g,
        )
        for f in range(len(FEATURE_TABLE_MAP))
    ]  # few distinct ids: repeats within and across rows and features
    return torch.cat(ids), torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


def _state(tbe: SplitTableBatchedEmbeddingBagsCodegen) -> list[torch.Tensor]:
    weights = [w.clone() for w in tbe.split_embedding_weights()]
    if tbe.optimizer == OptimType.EXACT_SGD:
        return weights
    return weights + [s[0].clone() for s in tbe.split_optimizer_states()]


@pytest.mark.parametrize(
    "optimizer", [OptimType.EXACT_ADAGRAD, OptimType.EXACT_ROWWISE_ADAGRAD, OptimType.EXACT_SGD]
)
def test_outputs_weights_and_state_are_fbgemms_step_after_step(optimizer):
    theirs, ours = _tbe(optimizer), _tbe(optimizer)
    assert use_segment_backward(ours) == 1 and use_segment_backward(ours) == 0  # once
    for step in range(6):
        if step == 3:  # a schedule changes the learning rate between steps
            theirs.set_learning_rate(0.05)
            ours.set_learning_rate(0.05)
        indices, offsets = _batch(step)
        upstream = torch.randn(indices.numel(), D, generator=torch.Generator().manual_seed(100 + step))
        out_theirs, out_ours = theirs(indices, offsets), ours(indices, offsets)
        exact = {"rtol": 0, "atol": 0} if step == 0 else {"rtol": 1e-5, "atol": 1e-6}  # then rounding apart
        torch.testing.assert_close(out_ours, out_theirs, **exact)
        (out_theirs * upstream).sum().backward()
        (out_ours * upstream).sum().backward()
        for a, b in zip(_state(ours), _state(theirs), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert _state(ours)[0].ne(_state(_tbe(optimizer))[0]).any()  # it did train


def test_no_grad_lookups_leave_the_tables_alone():
    tbe = _tbe(OptimType.EXACT_ADAGRAD)
    use_segment_backward(tbe)
    before = _state(tbe)
    with torch.no_grad():
        out = tbe(*_batch(0))
    assert not out.requires_grad
    for a, b in zip(_state(tbe), before, strict=True):
        assert torch.equal(a, b)


def test_what_it_cannot_serve_keeps_fbgemms_path():
    pooled = _tbe(OptimType.EXACT_ADAGRAD, PoolingMode.SUM)
    other = SplitTableBatchedEmbeddingBagsCodegen(  # an optimizer whose update it does not implement
        [(10, D, EmbeddingLocation.HOST, ComputeDevice.CPU)],
        optimizer=OptimType.EMAINPLACE_ROWWISE_ADAGRAD,
        pooling_mode=PoolingMode.NONE,
    )
    clipped = _tbe(OptimType.EXACT_ADAGRAD, gradient_clipping=True, max_gradient=1.0)
    assert [use_segment_backward(m) for m in (pooled, other, clipped)] == [0, 0, 0]
    # weighted lookups go to FBGEMM's forward
    tbe = _tbe(OptimType.EXACT_ADAGRAD)
    use_segment_backward(tbe)
    calls = []
    original = tbe._fbgemm_forward
    tbe._fbgemm_forward = lambda *a, **k: calls.append(1) or original(*a, **k)
    indices, offsets = _batch(1)
    weights = torch.rand(indices.numel(), generator=torch.Generator().manual_seed(3))
    got = tbe(indices, offsets, per_sample_weights=weights)
    assert calls == [1]
    assert torch.equal(got, _tbe(OptimType.EXACT_ADAGRAD)(indices, offsets, per_sample_weights=weights))


def test_an_id_outside_its_table_is_refused_naming_it():
    tbe = _tbe(OptimType.EXACT_ADAGRAD)
    use_segment_backward(tbe)
    indices, offsets = _batch(2)
    first_of_feature_2 = int(offsets[12])
    assert int(offsets[18]) > first_of_feature_2  # feature 2 has ids in this batch
    indices[first_of_feature_2] = 7  # its table (1) has 7 rows
    with pytest.raises(IndexError, match="id 7 of feature 2 is outside its table of 7 rows"):
        tbe(indices, offsets)
    with pytest.raises(ValueError, match="offsets for 4 features"):
        tbe(indices, offsets[:-1])


def test_a_sequence_table_sharded_on_cpu_gets_it_and_trains():
    from torchrec import EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor

    from recpipe.config import OptimizerConfig
    from recpipe.train.dist import init_distributed, plan_sharding, shard_model, shutdown
    from recpipe.train.nobag import _tbes
    from recpipe.train.optim import apply_sparse_optimizer

    class Sequence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            table = EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["f"])
            self.ec = EmbeddingCollection(tables=[table])

        def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
            return self.ec(kjt)["f"].values().sum()

    env = init_distributed()
    try:
        torch.manual_seed(0)
        model = Sequence()
        apply_sparse_optimizer(model, OptimizerConfig(type="adagrad", lr=0.1), "cpu")
        plan, _ = plan_sharding(model, env, {})
        dmp = shard_model(model, env, plan)
        (tbe,) = [t for t in _tbes(dmp) if t.pooling_mode == PoolingMode.NONE]
        assert hasattr(tbe, "_segment_layout")
        before = tbe.weights_host.view(-1, 4).clone()
        kjt = KeyedJaggedTensor.from_lengths_sync(["f"], torch.tensor([3, 3, 1]), torch.tensor([2, 1]))
        dmp(kjt).backward()
        after = tbe.weights_host.view(-1, 4)
        # ids 3 (twice) and 1 moved by Adagrad's first step on their summed gradient (2, then 1): -lr·g/|g|
        torch.testing.assert_close(
            after[[1, 3]] - before[[1, 3]], torch.full((2, 4), -0.1), atol=1e-6, rtol=0
        )
        assert torch.equal(after[[0, 2, 4]], before[[0, 2, 4]])
    finally:
        shutdown(env)
