"""The builder the multi-task models (MMoE, DBMTL, PLE) share: MultiTowerDIN's embeddings and towers with a
multi-task head (:mod:`recpipe.models.blocks.multitask`) instead of its final MLP."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.mlp import optional_mlp_spec
from recpipe.models.blocks.multitask import TowerSpec
from recpipe.models.multi_tower_din.model import MultiTowerDIN, dropout_lambda, tower_specs
from recpipe.models.multitask.config import MultiTaskSection, TaskTowerConfig


def tower_spec(t: TaskTowerConfig, with_relations: bool) -> TowerSpec:
    """A task tower's :class:`~recpipe.models.blocks.multitask.TowerSpec` (relations: DBMTL only)."""
    if not with_relations and (t.relation_tower_names or t.relation_mlp is not None):
        raise ValueError(f"task tower {t.name!r}: relation_tower_names / relation_mlp are DBMTL's")
    return TowerSpec(
        t.name,
        optional_mlp_spec(t.mlp),
        tuple(t.relation_tower_names),
        optional_mlp_spec(t.relation_mlp),
        t.num_class,
    )


def build_multitask(
    spec: FeatureSpec,
    cfg: MultiTaskSection,
    head: Callable[[int], nn.Module],
    device: torch.device | None = None,
) -> MultiTowerDIN:
    """MultiTowerDIN's embeddings and towers with ``head(width)`` instead of its final MLP: logits ``(B, T)``.

    The model carries ``task_names``, ``task_weights`` and, when a task has one, ``task_spaces``
    (:meth:`MultiTaskSection.task_spaces`), ``task_losses`` (a focal loss: :meth:`MultiTaskSection.task_losses`)
    and ``task_jrc`` (a jrc loss's session feature and alpha: :meth:`MultiTaskSection.task_jrc`); the training
    loss reads them."""
    if spec.task_labels != [t.label for t in cfg.task_towers]:
        raise ValueError(
            f"model {cfg.type}: task_towers predict {[t.label for t in cfg.task_towers]}, the features' task "
            f"labels are {spec.task_labels}"
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
        item_floats=spec.item_float_keys(),
        variational_dropout=dropout_lambda(cfg.variational_dropout),
    )
    model.task_names = cfg.task_names()
    model.task_weights = cfg.task_weights()
    if any(space is not None for space in cfg.task_spaces()):
        model.task_spaces = cfg.task_spaces()
    if any(loss is not None for loss in cfg.task_losses()):
        model.task_losses = cfg.task_losses()
    jrc = cfg.task_jrc()
    if any(j is not None for j in jrc):
        floats = set(spec.item_float_keys())
        for t, j in zip(cfg.task_towers, jrc):
            if j is not None and (j[0] not in spec.sparse_keys() or j[0] in floats):
                raise ValueError(
                    f"task tower {t.name!r}: the jrc loss's session {j[0]!r} is not an id feature of the model; "
                    f"its sparse features: {[k for k in spec.sparse_keys() if k not in floats]}"
                )
        model.task_jrc = jrc
    return model
