"""SimpleMultiTask's builder: MultiTowerDIN's towers under :class:`SimpleMultiTaskHead`, the task towers alone.

TorchEasyRec declares the message (``SimpleMultiTask { repeated TaskTower task_towers }``) and tests
``MultiTaskRank``'s loss with it (tzrec/models/multi_task_rank_test.py) but registers no model class for it; its
converter maps EasyRec's SimpleMultiTask to it (tzrec/tools/convert_easyrec_config_to_tzrec_config.py), whose
model is this one: every task's tower (its MLP, then a logit) over the same input group."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.multitask import TaskTowers, TowerSpec
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.multitask.model import build_multitask, tower_spec
from recpipe.models.simple_multi_task.config import SimpleMultiTaskConfig


class SimpleMultiTaskHead(nn.Module):
    """Every task's tower over the same ``x``: ``(B, in_features) -> (B, T)`` logits.

    Example::

        head = SimpleMultiTaskHead(272, [TowerSpec("ctr", MlpSpec((64,))), TowerSpec("cvr", MlpSpec((64,)))])
        head(torch.randn(8, 272)).shape   # (8, 2)
    """

    def __init__(
        self, in_features: int, towers: Sequence[TowerSpec], device: torch.device | None = None
    ) -> None:
        super().__init__()
        self.towers = TaskTowers([in_features] * len(towers), towers, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.towers([x] * len(self.towers.names))


def build(spec: FeatureSpec, cfg: SimpleMultiTaskConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """SimpleMultiTask over the spec's groups (see :func:`~recpipe.models.multitask.model.build_multitask`)."""
    towers = [tower_spec(t, with_relations=False) for t in cfg.task_towers]
    return build_multitask(spec, cfg, lambda width: SimpleMultiTaskHead(width, towers, device), device)
