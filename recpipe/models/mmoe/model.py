"""MMoE's builder: MultiTowerDIN's towers under a MMoE head (:mod:`recpipe.models.blocks.multitask`)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.mlp import mlp_spec, optional_mlp_spec
from recpipe.models.blocks.multitask import MmoeHead
from recpipe.models.mmoe.config import MmoeConfig
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.multitask.model import build_multitask, tower_spec


def build(spec: FeatureSpec, cfg: MmoeConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """MMoE over the spec's feature groups (see :func:`~recpipe.models.multitask.model.build_multitask`)."""
    towers = [tower_spec(t, with_relations=False) for t in cfg.task_towers]
    gate = optional_mlp_spec(cfg.gate_mlp)
    return build_multitask(
        spec, cfg, lambda width: MmoeHead(width, mlp_spec(cfg.expert_mlp), cfg.num_experts, towers, gate, device),
        device,
    )  # fmt: skip
