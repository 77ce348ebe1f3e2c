"""SimpleMultiTask's head: each task's tower (MLP, then a logit) over the same input, by hand."""

from __future__ import annotations

from pathlib import Path

import torch

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.blocks.multitask import TowerSpec
from recpipe.models.registry import build_model
from recpipe.models.simple_multi_task.model import SimpleMultiTaskHead

ROOT = Path(__file__).resolve().parents[2]


def test_every_task_tower_reads_the_same_input():
    torch.manual_seed(0)
    head = SimpleMultiTaskHead(5, [TowerSpec("ctr", MlpSpec((3,))), TowerSpec("cvr", MlpSpec((4,)))])
    x = torch.randn(6, 5)
    want = []
    for mlp, out in zip(head.towers.mlps, head.towers.outputs):
        lin = mlp.layers[0].linear
        h = torch.relu(x @ lin.weight.T + lin.bias)
        want.append(h @ out.weight.T + out.bias)
    torch.testing.assert_close(head(x), torch.cat(want, dim=1))


def test_built_from_the_small_config():
    cfg = load_config(ROOT / "configs" / "simple_multi_task_taobao_small.yaml")
    model = build_model(build_feature_spec(cfg), cfg.model)
    assert type(model.dense.head).__name__ == "SimpleMultiTaskHead" and model.task_names == ["ctr", "cvr"]
