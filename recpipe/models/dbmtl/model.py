"""DBMTL's builder: MultiTowerDIN's towers under a DBMTL head (:mod:`recpipe.models.blocks.multitask`)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.mlp import optional_mlp_spec as spec_of
from recpipe.models.blocks.multitask import DbmtlHead
from recpipe.models.dbmtl.config import DbmtlConfig
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.multitask.model import build_multitask, tower_spec


def build(spec: FeatureSpec, cfg: DbmtlConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """DBMTL over the spec's feature groups (see :func:`~recpipe.models.multitask.model.build_multitask`)."""
    towers = [tower_spec(t, with_relations=True) for t in cfg.task_towers]
    return build_multitask(
        spec, cfg,
        lambda width: DbmtlHead(
            width, towers, spec_of(cfg.bottom_mlp), spec_of(cfg.expert_mlp), cfg.num_experts,
            spec_of(cfg.gate_mlp), device,
        ),
        device,
    )  # fmt: skip
