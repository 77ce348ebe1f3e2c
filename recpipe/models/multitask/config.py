"""What the multi-task models (MMoE, DBMTL, PLE) share: their towers over feature groups (deep towers,
optionally without an MLP, and DIN towers, as in MultiTowerDIN), their task towers, one per label, and the
builder that puts a multi-task head on MultiTowerDIN's towers (:mod:`recpipe.models.multitask.model`).

A multi-task model's ``task_towers`` name the labels they predict, in ``data.label_fields`` order
(TorchEasyRec's ``task_towers[].label_name``), each with its loss weight (``weight``). The model's output is
one logit per task, ``(B, T)``; the loss is ``Σ_t weight_t · loss_t``, each task's loss (``loss``: BCE,
binary focal loss, or JRC on a two-class tower) over its rows weighted by its task space (``task_space_indicator_label``,
``in_task_space_weight``, ``out_task_space_weight``), plus the variational dropout's term when the model has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import (
    BceLossConfig,
    ConfigSection,
    LossConfig,
    MlpConfig,
    ModelSection,
    VariationalDropoutConfig,
    check_group_refs,
)
from recpipe.models.multi_tower_din.config import DinTowerConfig


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
        loss (LossConfig): ``{type: bce}`` (default), ``{type: focal, gamma: 2.0, alpha: 0.5}``
            (:class:`~recpipe.config.sections.FocalLossConfig`) or, with ``num_class: 2``,
            ``{type: jrc, session: user_id, alpha: 0.5}`` (:class:`~recpipe.config.sections.JrcLossConfig`).
        num_class (int): 1 (default): the tower ends in ``Linear(·, 1)``; 2: in ``Linear(·, 2)``, logits
            ``(l0, l1)``, as TorchEasyRec's ``num_class: 2`` tower, and the task's logit (what evaluation, gates,
            export and serving see) is ``l1 - l0``, so ``sigmoid(l1 - l0) = softmax(l0, l1)[1]``; with ``bce``
            that is TorchEasyRec's two-class ``softmax_cross_entropy`` (equal to BCE on ``l1 - l0``), with ``jrc``
            the loss reads ``l0`` and ``l1`` apart.
        relation_tower_names (list[str]): DBMTL only: earlier towers this one depends on.
        relation_mlp (MlpConfig | None): DBMTL only: the MLP over own + related towers' outputs.
        task_space_indicator_label (str | None): a label of ``data.label_fields`` splitting the rows into this
            task's space (that label > 0) and the rest (TorchEasyRec's ``task_space_indicator_label``, e.g. a
            CVR task's space is the clicked rows).
        in_task_space_weight (float): the loss weight of a row in the task's space (default 1).
        out_task_space_weight (float): the loss weight of a row outside it (default 1; 0 leaves those rows out).
            Each task's rows are weighted ``sample weight · (in or out)``, normalized by their sum, as
            TorchEasyRec's ``MultiTaskRank.loss`` does (tzrec/models/multi_task_rank.py).
    """

    name: str
    label: str
    mlp: MlpConfig | None = None
    weight: float = Field(1.0, gt=0.0)
    loss: LossConfig = Field(default_factory=BceLossConfig)
    num_class: Literal[1, 2] = 1
    relation_tower_names: list[str] = Field(default_factory=list)
    relation_mlp: MlpConfig | None = None
    task_space_indicator_label: str | None = None
    in_task_space_weight: float = Field(1.0, ge=0.0)
    out_task_space_weight: float = Field(1.0, ge=0.0)

    @model_validator(mode="after")
    def _classes(self) -> TaskTowerConfig:
        # TorchEasyRec asserts the same pairs (tzrec/models/rank_model.py, _init_loss_impl)
        if self.loss.type == "jrc" and self.num_class != 2:
            raise ValueError(f"task tower {self.name!r}: a jrc loss needs num_class: 2 (its logits l0, l1)")
        if self.loss.type == "focal" and self.num_class != 1:
            raise ValueError(f"task tower {self.name!r}: a focal loss needs num_class: 1 (one logit)")
        return self

    @model_validator(mode="after")
    def _task_space(self) -> TaskTowerConfig:
        if self.task_space_indicator_label is None and (
            self.in_task_space_weight,
            self.out_task_space_weight,
        ) != (
            1.0,
            1.0,
        ):
            raise ValueError(
                f"task tower {self.name!r}: in_task_space_weight / out_task_space_weight are set but "
                "task_space_indicator_label is not (which label says a row is in the task's space?)"
            )
        return self


class MultiTaskSection(ModelSection):
    """The parts every multi-task model's section has (see each model's module for its own).

    ``variational_dropout`` (:class:`~recpipe.config.sections.VariationalDropoutConfig`) drops the features of
    the towers' groups in training, each DIN tower's output counting as one more feature (TorchEasyRec's
    multi-task models read one DEEP group, its sequence encoders' outputs appended to it)."""

    towers: list[InputTowerConfig] = Field(default_factory=list)
    din_towers: list[DinTowerConfig] = Field(default_factory=list)
    task_towers: list[TaskTowerConfig] = Field(min_length=2)
    variational_dropout: VariationalDropoutConfig | None = None

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
        for t in self.task_towers:
            if t.task_space_indicator_label is not None and t.task_space_indicator_label not in mine:
                raise ValueError(
                    f"model {self.type}: task tower {t.name!r}'s task_space_indicator_label "
                    f"{t.task_space_indicator_label!r} is not one of data.label_fields {mine}"
                )

    def task_names(self) -> list[str]:
        return [t.name for t in self.task_towers]

    def task_weights(self) -> list[float]:
        return [t.weight for t in self.task_towers]

    def task_losses(self) -> list[tuple[float, float] | None]:
        """Per task, the focal loss's ``(gamma, alpha)``, or None for binary cross-entropy."""
        return [(t.loss.gamma, t.loss.alpha) if t.loss.type == "focal" else None for t in self.task_towers]

    def task_jrc(self) -> list[tuple[str, float] | None]:
        """Per task, the jrc loss's ``(session feature, alpha)``, or None."""
        return [(t.loss.session, t.loss.alpha) if t.loss.type == "jrc" else None for t in self.task_towers]

    def task_spaces(self) -> list[tuple[int, float, float] | None]:
        """Per task, ``(index of its indicator label among the tasks' labels, in weight, out weight)``, or None
        for a task without a task space."""
        labels = [t.label for t in self.task_towers]
        return [
            None
            if t.task_space_indicator_label is None
            else (labels.index(t.task_space_indicator_label), t.in_task_space_weight, t.out_task_space_weight)
            for t in self.task_towers
        ]
