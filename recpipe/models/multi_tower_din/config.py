"""MultiTowerDIN's config section, its tower sections (MultiTower and the multi-task models use them too) and
the feature groups it reads (the module and its builder: :mod:`recpipe.models.multi_tower_din.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import (
    ConfigSection,
    MlpConfig,
    ModelSection,
    VariationalDropoutConfig,
    check_group_refs,
)


class TowerConfig(ConfigSection):
    """A deep tower: an MLP over one ``deep`` feature group."""

    group: str
    mlp: MlpConfig


class DinTowerConfig(ConfigSection):
    """A DIN tower over one ``sequence`` feature group."""

    group: str
    attn_mlp: MlpConfig
    # "jagged" computes attention on real items only; "padded" is the reference formula (benchmarks).
    attention: Literal["jagged", "padded", "mean_pool"] = "jagged"
    # How scores become weights: "softmax" over the row's items (TorchEasyRec), or "sigmoid" per item
    # (unnormalized, DIN paper §4.3: keeps how strongly the history matches the candidate).
    weighting: Literal["softmax", "sigmoid"] = "softmax"


class MultiTowerDinConfig(ModelSection):
    """``model:`` of a MultiTowerDIN config.

    Args:
        towers (list[TowerConfig]): deep towers, by feature group.
        din_towers (list[DinTowerConfig]): DIN towers, by sequence feature group.
        final (MlpConfig): the MLP over all tower outputs.
        variational_dropout (VariationalDropoutConfig | None): drops each deep tower's features in training
            (:class:`~recpipe.models.blocks.variational_dropout.VariationalDropout`; DIN towers read sequence
            groups, which TorchEasyRec leaves out).

    Example::

        model:
          type: multi_tower_din
          towers: [{group: deep, mlp: {hidden_units: [512, 256, 128]}}]
          din_towers: [{group: seq, attn_mlp: {hidden_units: [256, 64]}}]
          final: {hidden_units: [64]}
    """

    type: Literal["multi_tower_din"]
    towers: list[TowerConfig]
    din_towers: list[DinTowerConfig]
    final: MlpConfig
    variational_dropout: VariationalDropoutConfig | None = None

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """Every tower's group must be a defined feature group."""
        check_group_refs([t.group for t in self.towers] + [t.group for t in self.din_towers], groups)
