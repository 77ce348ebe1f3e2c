"""Ranking models and their building blocks.

Every model has ``forward(dense, sparse) -> logits (B,)``, ``predict(batch)``, and is split into
``sparse_arch(sparse) -> dict[str, Tensor]`` (embedding lookups) and
``dense_arch(dense, embeddings) -> logits`` (plain torch ops: what export serves), with
``dense_input_names()`` listing the dense arch's inputs in order and ``dense_module()`` the submodule
that computes it (no embedding tables; :class:`DenseArchModule` exposes it with positional inputs).

Models are declared in :mod:`recpipe.models.registry` (``MODELS``: name → module, ``build_model``).
Every name here is imported on first use: ``recpipe.config`` reads the registry, and importing
``recpipe.models.registry`` must not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recpipe.models.din import DinAttention, MeanPoolSequence, PaddedDinAttention
    from recpipe.models.dlrm import DLRM
    from recpipe.models.dlrm_dense import DlrmDense, DotInteraction, interaction_width
    from recpipe.models.embedding import EmbeddingGroup, EmbeddingInit, EmbeddingLookup
    from recpipe.models.mlp import MLP, MlpSpec
    from recpipe.models.multi_tower_din import MultiTowerDIN
    from recpipe.models.multi_tower_din_dense import DeepTower, DinTower, MultiTowerDinDense
    from recpipe.models.protocol import DenseArchModule, RankingModel
    from recpipe.models.registry import MODELS, build_model
    from recpipe.models.train_model import TrainModel, bce_loss
    from recpipe.models.wide_deep import FactorizationMachine, WideDeep, WideDeepDense, WideDeepGroups

_LAZY = {
    "DinAttention": "recpipe.models.din",
    "MeanPoolSequence": "recpipe.models.din",
    "PaddedDinAttention": "recpipe.models.din",
    "DLRM": "recpipe.models.dlrm",
    "DlrmDense": "recpipe.models.dlrm_dense",
    "DotInteraction": "recpipe.models.dlrm_dense",
    "interaction_width": "recpipe.models.dlrm_dense",
    "EmbeddingGroup": "recpipe.models.embedding",
    "EmbeddingInit": "recpipe.models.embedding",
    "EmbeddingLookup": "recpipe.models.embedding",
    "MLP": "recpipe.models.mlp",
    "MlpSpec": "recpipe.models.mlp",
    "DeepTower": "recpipe.models.multi_tower_din_dense",
    "DinTower": "recpipe.models.multi_tower_din_dense",
    "MultiTowerDIN": "recpipe.models.multi_tower_din",
    "MultiTowerDinDense": "recpipe.models.multi_tower_din_dense",
    "DenseArchModule": "recpipe.models.protocol",
    "RankingModel": "recpipe.models.protocol",
    "MODELS": "recpipe.models.registry",
    "build_model": "recpipe.models.registry",
    "TrainModel": "recpipe.models.train_model",
    "bce_loss": "recpipe.models.train_model",
    "FactorizationMachine": "recpipe.models.wide_deep",
    "WideDeep": "recpipe.models.wide_deep",
    "WideDeepDense": "recpipe.models.wide_deep",
    "WideDeepGroups": "recpipe.models.wide_deep",
}

__all__ = [
    "DLRM",
    "DeepTower",
    "DenseArchModule",
    "DinAttention",
    "DinTower",
    "DlrmDense",
    "DotInteraction",
    "EmbeddingGroup",
    "EmbeddingInit",
    "FactorizationMachine",
    "EmbeddingLookup",
    "MLP",
    "MODELS",
    "MeanPoolSequence",
    "MlpSpec",
    "MultiTowerDIN",
    "MultiTowerDinDense",
    "PaddedDinAttention",
    "RankingModel",
    "TrainModel",
    "WideDeep",
    "WideDeepDense",
    "WideDeepGroups",
    "bce_loss",
    "build_model",
    "interaction_width",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recpipe.models' has no attribute {name!r}")
