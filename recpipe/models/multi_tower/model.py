"""MultiTower's builder: the :class:`~recpipe.models.multi_tower_din.model.MultiTowerDIN` module with no DIN
tower, so training, evaluation and every export backend take it as they take MultiTowerDIN."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.multi_tower.config import MultiTowerConfig
from recpipe.models.multi_tower_din import model as multi_tower_din
from recpipe.models.multi_tower_din.config import MultiTowerDinConfig


def build(
    spec: FeatureSpec, cfg: MultiTowerConfig, device: torch.device | None = None
) -> multi_tower_din.MultiTowerDIN:
    """MultiTower from the spec's feature groups and ``cfg``: MultiTowerDIN's builder with no DIN tower.

    Raises:
        ValueError: a tower over a group that is not a ``deep`` group.
    """
    din_cfg = MultiTowerDinConfig(
        type="multi_tower_din",
        towers=cfg.towers,
        din_towers=[],
        final=cfg.final,
        variational_dropout=cfg.variational_dropout,
    )
    return multi_tower_din.build(spec, din_cfg, device=device)
