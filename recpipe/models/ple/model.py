"""PLE's builder: MultiTowerDIN's towers under a PLE head (:mod:`recpipe.models.blocks.multitask`)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.mlp import mlp_spec
from recpipe.models.blocks.multitask import ExtractionSpec, PleHead
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.multitask.model import build_multitask, tower_spec
from recpipe.models.ple.config import PleConfig


def build(spec: FeatureSpec, cfg: PleConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """PLE over the spec's feature groups (see :func:`~recpipe.models.multitask.model.build_multitask`)."""
    towers = [tower_spec(t, with_relations=False) for t in cfg.task_towers]
    layers = [
        ExtractionSpec(
            n.share_num,
            n.expert_num_per_task,
            mlp_spec(n.share_expert_net or n.task_expert_net),  # unused without shared experts
            mlp_spec(n.task_expert_net),
        )
        for n in cfg.extraction_networks
    ]
    return build_multitask(spec, cfg, lambda width: PleHead(width, layers, towers, device), device)
