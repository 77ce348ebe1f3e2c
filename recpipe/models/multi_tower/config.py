"""MultiTower's config section (TorchEasyRec's ``multi_tower``): deep towers over feature groups and a final
MLP over their outputs, i.e. MultiTowerDIN without DIN towers (:mod:`recpipe.models.multi_tower.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, VariationalDropoutConfig, check_group_refs
from recpipe.models.multi_tower_din.config import TowerConfig


class MultiTowerConfig(ModelSection):
    """``model:`` of a MultiTower config.

    Args:
        towers (list[TowerConfig]): deep towers, one per ``deep`` feature group (at least one).
        final (MlpConfig): the MLP over the concatenated tower outputs.
        variational_dropout (VariationalDropoutConfig | None): drops each tower's features in training.

    Example::

        model:
          type: multi_tower
          towers:
            - {group: user, mlp: {hidden_units: [512, 256, 128]}}
            - {group: item, mlp: {hidden_units: [512, 256, 128]}}
          final: {hidden_units: [64]}

        # KJT of a batch of B=2 rows, keys × batch (user group: user_id; item group: adgroup_id):
        #   user_id:    [[7], [3]]      adgroup_id: [[41], [9]]
        # towers: (B, 128) each → concat (B, 256) → final (B, 64) → logits (B,)
    """

    type: Literal["multi_tower"]
    towers: list[TowerConfig] = Field(min_length=1)
    final: MlpConfig
    variational_dropout: VariationalDropoutConfig | None = None

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """Every tower's group must be a defined feature group."""
        check_group_refs([t.group for t in self.towers], groups)
