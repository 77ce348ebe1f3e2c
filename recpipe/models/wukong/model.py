"""WuKong (TorchEasyRec's ``tzrec/models/wukong.py``): one group's embeddings, of one dim, and optionally the
dense features through an MLP as one more feature, through a stack of WuKong layers, a final MLP, a logit.
The dense arch lives in :mod:`recpipe.models.wukong.dense` (plain torch).

Where recpipe differs: TorchEasyRec's ``dense_mlp`` reads group ``dense``; recpipe's reads ``Batch.dense``,
every dense feature (as its DLRM does; the importer checks group ``dense`` lists them all)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.embedding import EmbeddingGroup
from recpipe.models.blocks.mlp import mlp_spec, optional_mlp_spec
from recpipe.models.wukong.config import WukongConfig
from recpipe.models.wukong.dense import WukongDense, WukongLayerSpec


def build(spec: FeatureSpec, cfg: WukongConfig, device: torch.device | None = None) -> SplitModel:
    """WuKong over ``cfg.sparse_group``'s ids (and ``Batch.dense`` through ``dense_mlp``).

    Raises:
        ValueError: the sparse group lists dense features or ids of different dims; dense features without a
            ``dense_mlp`` (they would be ignored) or a ``dense_mlp`` without dense features.

    Example::

        model = build(spec, cfg.model)       # cfg: configs like examples/wukong_criteo.config imported
        model(torch.randn(2, 13), kjt).shape # (2,) logits
    """
    group = spec.group(cfg.sparse_group)
    if group.dense:
        raise ValueError(f"WuKong sparse group {group.name!r} lists dense features {group.dense}")
    if not group.sparse:
        raise ValueError(f"WuKong sparse group {group.name!r} has no sparse feature")
    if cfg.dense_mlp is None and spec.dense_dim:
        raise ValueError(
            f"WuKong without dense_mlp reads no dense feature, yet the features have {spec.dense_dim} dense "
            "columns: add a dense_mlp (ending at the embedding dim) or drop them"
        )
    if cfg.dense_mlp is not None and not spec.dense_dim:
        raise ValueError("WuKong dense_mlp needs dense features; there are none")
    keys = list(group.sparse)
    embeddings = EmbeddingGroup(spec.tables(), keys, [], spec.pooling(), device=device)
    dims = {k: embeddings.embedding_dim(k) for k in keys}
    if len(set(dims.values())) != 1:
        raise ValueError(f"WuKong needs one embedding dim for all sparse features, got {dims}")
    layers = [
        WukongLayerSpec(
            layer.lcb_feature_num,
            layer.fmb_feature_num,
            layer.compressed_feature_num,
            mlp_spec(layer.feature_num_mlp),
        )
        for layer in cfg.wukong_layers
    ]
    dense = WukongDense(
        keys,
        spec.dense_dim,
        next(iter(dims.values())),
        layers,
        mlp_spec(cfg.final),
        optional_mlp_spec(cfg.dense_mlp),
        device,
    )
    return SplitModel(embeddings, dense, spec.dense_dim)
