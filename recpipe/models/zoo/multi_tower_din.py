"""MultiTowerDIN's declaration: its config section, the feature groups it reads and its builder
(the ``nn.Module`` is :class:`recpipe.models.multi_tower_din.MultiTowerDIN`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ConfigSection, MlpConfig, ModelSection, check_group_refs

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.multi_tower_din import DeepTower, DinTower, MultiTowerDIN


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

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """Every tower's group must be a defined feature group."""
        check_group_refs([t.group for t in self.towers] + [t.group for t in self.din_towers], groups)


Config = MultiTowerDinConfig


def build(spec: FeatureSpec, cfg: MultiTowerDinConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """MultiTowerDIN from the spec's feature groups and ``cfg`` (towers by group name).

    Args:
        spec (FeatureSpec): features, tables and groups.
        cfg (MultiTowerDinConfig): the model section.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Raises:
        ValueError: a tower over a group of the wrong type (deep vs sequence).
    """
    from recpipe.models.mlp import mlp_spec
    from recpipe.models.multi_tower_din import MultiTowerDIN

    towers, din_towers = tower_specs(spec, cfg.towers, cfg.din_towers)
    return MultiTowerDIN(
        spec.tables(),
        towers,
        din_towers,
        mlp_spec(cfg.final),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )


def tower_specs(
    spec: FeatureSpec, towers: Sequence[TowerConfig | Any], din_towers: Sequence[DinTowerConfig]
) -> tuple[list[DeepTower], list[DinTower]]:
    """The deep and DIN towers of a config, over the spec's feature groups (a tower's ``mlp`` may be
    ``None`` in a multi-task model: the group's embeddings as they are).

    Raises:
        ValueError: a tower over a group of the wrong type (deep vs sequence).
    """
    from recpipe.models.mlp import mlp_spec, optional_mlp_spec
    from recpipe.models.multi_tower_din import DeepTower, DinTower

    dense_names = spec.dense_names()
    deep = []
    for t in towers:
        group = spec.group(t.group)
        if group.type != "deep":
            raise ValueError(f"tower over group {t.group!r} needs a deep group, it is {group.type!r}")
        cols = tuple(dense_names.index(n) for n in group.dense)
        mlp = optional_mlp_spec(t.mlp)
        deep.append(DeepTower(group.name, tuple(group.sparse), mlp, cols))
    max_length = {s.name: s.max_length for s in spec.sequences}
    din = []
    for t in din_towers:
        group = spec.group(t.group)
        if group.type != "sequence":
            raise ValueError(f"DIN tower over group {t.group!r} needs a sequence group, it is {group.type!r}")
        parents = {spec.feature(h).sequence for h in group.history}
        length = max(max_length[p] for p in parents if p is not None)
        din.append(
            DinTower(
                group.name,
                tuple(group.query),
                tuple(group.history),
                mlp_spec(t.attn_mlp),
                t.attention,
                length,
                t.weighting,
            )
        )
    return deep, din
