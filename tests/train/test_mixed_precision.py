"""``train.mixed_precision`` (TorchEasyRec's train_config.mixed_precision "BF16" / "FP16"): the training forward
after the lookups runs under torch.autocast of that type (the dense arch's matmuls in bf16 / fp16), the loss
in float32, parameters and gradients float32; a few trainer steps under bf16 learn like float32."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.models.registry import build_model
from recpipe.models.train_model import TrainModel
from recpipe.train.data import StepBatches, normalize_step_weights
from recpipe.train.step import PipelineStep


def _batch(taobao):
    spec = build_feature_spec(load_config(taobao["config"]))
    sb = next(iter(StepBatches(taobao["train"], spec, 64)))
    return next(iter(normalize_step_weights([sb], 1, None)))


def _step(taobao, mixed_precision):
    cfg = load_config(taobao["config"])
    torch.manual_seed(0)
    spec = build_feature_spec(cfg)
    return PipelineStep(TrainModel(build_model(spec, cfg.model)), 1, mixed_precision)


@pytest.mark.parametrize(
    ("mixed_precision", "dtype"), [(None, torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_the_dense_arch_runs_under_autocast(taobao, mixed_precision, dtype):
    step = _step(taobao, mixed_precision)
    seen: list[torch.dtype] = []
    linears = [m for m in step.model.dense.modules() if isinstance(m, nn.Linear)]
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(o.dtype)) for m in linears]
    batch = _batch(taobao)
    loss, (logits, *_) = step(batch)
    for h in hooks:
        h.remove()
    assert seen and set(seen) == {dtype}
    assert loss.dtype == logits.dtype == torch.float32
    loss.backward()
    grads = [p.grad for p in step.model.dense.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 for g in grads)
    assert all(p.dtype == torch.float32 for p in step.model.dense.parameters())
    if mixed_precision is not None:  # close to the float32 step
        ref_loss, _ = _step(taobao, None)(batch)
        assert loss.item() == pytest.approx(ref_loss.item(), rel=0.05)


def test_an_unknown_type_is_refused(taobao):
    with pytest.raises(ValueError, match="mixed_precision 'fp8' is not one of bf16, fp16 or None"):
        _step(taobao, "fp8")


@pytest.mark.slow
def test_the_trainer_learns_under_bf16(taobao, tmp_path):
    overrides = {"data.batch_size": 64, "train.log_every_steps": 1, "train.max_steps": 30}
    losses = {}
    for mp in (None, "bf16"):
        cfg = load_config(taobao["config"], {**overrides, "train.mixed_precision": mp})
        assert cfg.train.mixed_precision == mp
        out = tmp_path / str(mp)
        train(cfg, build_feature_spec(cfg), taobao["train"], None, out)
        recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        losses[mp] = [r["loss"] for r in recs if "loss" in r]
    bf16, fp32 = losses["bf16"], losses[None]
    assert len(bf16) == len(fp32) == 30 and bf16 != fp32  # the autocast ran
    assert sum(bf16[-10:]) < 0.8 * sum(bf16[:10])  # it learns
    assert sum(bf16[-10:]) == pytest.approx(sum(fp32[-10:]), rel=0.1)
