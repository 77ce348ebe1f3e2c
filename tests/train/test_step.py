"""PipelineStep: traceable down to the embedding collections (so TrainPipelineSparseDist can start their
input all-to-all a batch ahead), same loss and logits as TrainModel."""

import torch
from torchrec.distributed.train_pipeline.tracing import Tracer

from recpipe.config import load_config
from recpipe.models.registry import build_model
from recpipe.models.train_model import TrainModel
from recpipe.train.data import StepBatches, normalize_step_weights
from recpipe.train.step import PipelineStep


def _step(taobao, world_size=1):
    cfg = load_config(taobao["config"])
    torch.manual_seed(0)
    return PipelineStep(TrainModel(build_model(cfg_spec(taobao), cfg.model)), world_size)


def cfg_spec(taobao):
    from recpipe.features.build import build_feature_spec

    return build_feature_spec(load_config(taobao["config"]))


def test_embedding_collections_are_called_on_batch_sparse_in_the_traced_graph(taobao):
    step = _step(taobao)
    # Leaves as TorchRec's pipeline makes them after sharding: modules without sharded children; here
    # the unsharded collections stand in for the sharded ones.
    leaves = ["train_model.model.embeddings.ebc", "train_model.model.embeddings.ec", "rest"]
    graph = Tracer(leaf_modules=leaves).trace(step)
    calls = {n.target: n for n in graph.nodes if n.op == "call_module"}
    assert set(calls) == set(leaves)
    for name in leaves[:2]:
        (arg,) = calls[name].args
        assert arg.op == "call_function" and arg.args[1] == "sparse"  # getattr(batch, "sparse")
        assert arg.args[0].op == "placeholder"


def test_loss_and_logits_equal_train_models(taobao):
    step = _step(taobao)
    sb = next(iter(StepBatches(taobao["train"], cfg_spec(taobao), 64)))
    ref_loss, ref_logits = step.train_model(sb.batch)
    batch = next(iter(normalize_step_weights([sb], 1, None)))
    loss, (logits, labels, weights, share) = step(batch)
    torch.testing.assert_close(logits, ref_logits)
    torch.testing.assert_close(loss, ref_loss)  # weights 1/64 each: the same mean
    assert torch.equal(labels, batch.labels) and weights is batch.weights and share == loss.detach()
    # the collections got their own forwards back
    for p in step.paths:
        assert "forward" not in step.train_model.get_submodule(p).__dict__


def test_loss_is_scaled_by_world_size_for_torchrecs_gradient_averaging(taobao):
    step1, step2 = _step(taobao, 1), _step(taobao, 2)
    sb = next(iter(StepBatches(taobao["train"], cfg_spec(taobao), 64)))
    batch = next(iter(normalize_step_weights([sb], 1, None)))
    l1, out1 = step1(batch)
    l2, out2 = step2(batch)
    torch.testing.assert_close(l2, 2 * l1)
    torch.testing.assert_close(out2[3], out1[3])  # the logged share is not scaled
