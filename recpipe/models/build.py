"""Builders: turn a FeatureSpec and the model section of the config into constructor arguments."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from recpipe.config import DlrmConfig, MlpConfig, MultiTowerDinConfig
from recpipe.features.spec import FeatureSpec
from recpipe.models.dlrm import DLRM
from recpipe.models.embedding import EmbeddingInit
from recpipe.models.mlp import MlpSpec
from recpipe.models.multi_tower_din import DeepTower, DinTower, MultiTowerDIN


def mlp_spec(cfg: MlpConfig) -> MlpSpec:
    return MlpSpec(tuple(cfg.hidden_units), cfg.activation, cfg.batch_norm, cfg.dropout)


def _pooling(spec: FeatureSpec) -> dict[str, str]:
    return {f.name: f.pooling for f in spec.sparse}


def build_multi_tower_din(
    spec: FeatureSpec, cfg: MultiTowerDinConfig, device: torch.device | None = None
) -> MultiTowerDIN:
    """MultiTowerDIN from the spec's feature groups and ``cfg`` (towers by group name)."""
    dense_names = spec.dense_names()
    towers = []
    for t in cfg.towers:
        group = spec.group(t.group)
        if group.type != "deep":
            raise ValueError(f"tower over group {t.group!r} needs a deep group, it is {group.type!r}")
        cols = tuple(dense_names.index(n) for n in group.dense)
        towers.append(DeepTower(group.name, tuple(group.sparse), mlp_spec(t.mlp), cols))
    max_length = {s.name: s.max_length for s in spec.sequences}
    din_towers = []
    for t in cfg.din_towers:
        group = spec.group(t.group)
        if group.type != "sequence":
            raise ValueError(f"DIN tower over group {t.group!r} needs a sequence group, it is {group.type!r}")
        parents = {spec.feature(h).sequence for h in group.history}
        length = max(max_length[p] for p in parents if p is not None)
        din_towers.append(
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
    return MultiTowerDIN(
        spec.tables(),
        towers,
        din_towers,
        mlp_spec(cfg.final),
        dense_in_features=spec.dense_dim,
        pooling=_pooling(spec),
        device=device,
    )


def build_dlrm(spec: FeatureSpec, cfg: DlrmConfig, device: torch.device | None = None) -> DLRM:
    """DLRM over ``cfg.sparse_group``'s keys and all of ``Batch.dense``."""
    group = spec.group(cfg.sparse_group)
    if group.dense:
        raise ValueError(f"DLRM sparse group {group.name!r} lists dense features {group.dense}")
    return DLRM(
        spec.tables(),
        list(group.sparse),
        spec.dense_dim,
        dense_arch=mlp_spec(cfg.dense_mlp),
        over_arch=mlp_spec(cfg.over_mlp),
        pooling=_pooling(spec),
        embedding_init=EmbeddingInit(cfg.embedding_init, cfg.embedding_init_scale),
        arch_with_sparse=cfg.arch_with_sparse,
        device=device,
    )


MODELS: dict[str, Callable[..., nn.Module]] = {
    "multi_tower_din": build_multi_tower_din,
    "dlrm": build_dlrm,
}


def build_model(
    spec: FeatureSpec, model_cfg: MultiTowerDinConfig | DlrmConfig, device: torch.device | str | None = None
) -> nn.Module:
    """Build the model ``model_cfg.type`` names (see :data:`MODELS`) on ``device`` (default ``cpu``;
    ``meta`` builds without allocating, for DistributedModelParallel to shard).

    Example::

        cfg = load_config("configs/din_taobao_small.yaml")
        model = build_model(build_feature_spec(cfg), cfg.model)   # MultiTowerDIN
    """
    if model_cfg.type not in MODELS:
        raise ValueError(f"unknown model type {model_cfg.type!r}; known: {sorted(MODELS)}")
    return MODELS[model_cfg.type](
        spec, model_cfg, device=torch.device(device) if device is not None else None
    )
