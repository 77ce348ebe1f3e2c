"""What the multi-task models (MMoE, DBMTL, PLE) share: their towers over feature groups (deep towers,
optionally without an MLP, and DIN towers, as in MultiTowerDIN), their task towers, one per label, and the
builder that puts a multi-task head on MultiTowerDIN's towers.

A multi-task model's ``task_towers`` name the labels they predict, in ``data.label_fields`` order
(TorchEasyRec's ``task_towers[].label_name``), each with its loss weight (``weight``). The model's output is
one logit per task, ``(B, T)``; the loss is ``Σ_t weight_t · BCE_t``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ConfigSection, MlpConfig, ModelSection, check_group_refs
from recpipe.models.zoo.multi_tower_din import DinTowerConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.multi_tower_din import MultiTowerDIN
    from recpipe.models.multitask_dense import TowerSpec


class InputTowerConfig(ConfigSection):
    """A deep tower over one ``deep`` feature group; without ``mlp`` the group's embeddings (and dense
    columns) go to the experts as they are (TorchEasyRec's multi-task models read the group directly)."""

    group: str
    mlp: MlpConfig | None = None


class TaskTowerConfig(ConfigSection):
    """One task (TorchEasyRec's ``task_towers[]``).

    Args:
        name (str): the task (``ctr``, ``cvr``); metrics, gates and outputs are named after it.
        label (str): its label column, one of ``data.label_fields`` (same order as the towers).
        mlp (MlpConfig | None): the tower's MLP.
        weight (float): the task's loss weight.
        relation_tower_names (list[str]): DBMTL only: earlier towers this one depends on.
        relation_mlp (MlpConfig | None): DBMTL only: the MLP over own + related towers' outputs.
    """

    name: str
    label: str
    mlp: MlpConfig | None = None
    weight: float = Field(1.0, gt=0.0)
    relation_tower_names: list[str] = Field(default_factory=list)
    relation_mlp: MlpConfig | None = None


class MultiTaskSection(ModelSection):
    """The parts every multi-task model's section has (see each model's module for its own)."""

    towers: list[InputTowerConfig] = Field(default_factory=list)
    din_towers: list[DinTowerConfig] = Field(default_factory=list)
    task_towers: list[TaskTowerConfig] = Field(min_length=2)

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """Every tower's group must be a defined feature group; task names must be distinct."""
        if not self.towers and not self.din_towers:
            raise ValueError(f"model {self.type}: needs at least one tower (towers or din_towers)")
        check_group_refs([t.group for t in self.towers] + [t.group for t in self.din_towers], groups)
        names = [t.name for t in self.task_towers]
        if len(set(names)) != len(names):
            raise ValueError(f"model {self.type}: task tower names must be distinct, got {names}")

    def check_labels(self, labels: Sequence[str]) -> None:
        """The task towers' labels are the data's label columns, in the same order."""
        mine = [t.label for t in self.task_towers]
        if mine != list(labels):
            raise ValueError(
                f"model {self.type}: task_towers predict labels {mine}, data.label_fields is {list(labels)} "
                "(one task tower per label, in the same order)"
            )

    def task_names(self) -> list[str]:
        return [t.name for t in self.task_towers]

    def task_weights(self) -> list[float]:
        return [t.weight for t in self.task_towers]


def tower_spec(t: TaskTowerConfig, with_relations: bool) -> TowerSpec:
    """A task tower's :class:`~recpipe.models.multitask_dense.TowerSpec` (relations: DBMTL only)."""
    from recpipe.models.mlp import optional_mlp_spec
    from recpipe.models.multitask_dense import TowerSpec

    if not with_relations and (t.relation_tower_names or t.relation_mlp is not None):
        raise ValueError(f"task tower {t.name!r}: relation_tower_names / relation_mlp are DBMTL's")
    return TowerSpec(
        t.name,
        optional_mlp_spec(t.mlp),
        tuple(t.relation_tower_names),
        optional_mlp_spec(t.relation_mlp),
    )


def build_multitask(
    spec: FeatureSpec,
    cfg: MultiTaskSection,
    head: Callable[[int], nn.Module],
    device: torch.device | None = None,
) -> MultiTowerDIN:
    """MultiTowerDIN's embeddings and towers with ``head(width)`` instead of its final MLP: logits ``(B, T)``.

    The model carries ``task_names`` and ``task_weights`` (the training loss reads them)."""
    from recpipe.models.multi_tower_din import MultiTowerDIN
    from recpipe.models.zoo.multi_tower_din import tower_specs

    if spec.labels != [t.label for t in cfg.task_towers]:
        raise ValueError(
            f"model {cfg.type}: task_towers predict {[t.label for t in cfg.task_towers]}, the features' labels "
            f"are {spec.labels}"
        )
    towers, din_towers = tower_specs(spec, cfg.towers, cfg.din_towers)
    model = MultiTowerDIN(
        spec.tables(),
        towers,
        din_towers,
        None,
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
        head=head,
    )
    model.task_names = cfg.task_names()
    model.task_weights = cfg.task_weights()
    return model
