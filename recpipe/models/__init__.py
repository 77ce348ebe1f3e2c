"""Ranking models and their building blocks.

Every model has ``forward(dense, sparse) -> logits (B,)``, ``predict(batch)``, and is split into
``sparse_arch(sparse) -> dict[str, Tensor]`` (embedding lookups) and
``dense_arch(dense, embeddings) -> logits`` (plain torch ops: what export serves), with
``dense_input_names()`` listing the dense arch's inputs in order and ``dense_module()`` the submodule
that computes it (no embedding tables; :class:`DenseArchModule` exposes it with positional inputs).
"""

from recpipe.models.build import MODELS, build_dlrm, build_model, build_multi_tower_din
from recpipe.models.din import DinAttention, MeanPoolSequence, PaddedDinAttention
from recpipe.models.dlrm import DLRM, DlrmDense, DotInteraction, interaction_width
from recpipe.models.embedding import EmbeddingGroup, EmbeddingInit, EmbeddingLookup
from recpipe.models.mlp import MLP, MlpSpec
from recpipe.models.multi_tower_din import DeepTower, DinTower, MultiTowerDIN, MultiTowerDinDense
from recpipe.models.protocol import DenseArchModule, RankingModel
from recpipe.models.train_model import TrainModel, bce_loss

__all__ = [
    "DLRM",
    "MLP",
    "MODELS",
    "DeepTower",
    "DenseArchModule",
    "DinAttention",
    "DinTower",
    "DlrmDense",
    "DotInteraction",
    "EmbeddingGroup",
    "EmbeddingInit",
    "EmbeddingLookup",
    "MeanPoolSequence",
    "MlpSpec",
    "MultiTowerDIN",
    "MultiTowerDinDense",
    "PaddedDinAttention",
    "RankingModel",
    "TrainModel",
    "bce_loss",
    "build_dlrm",
    "build_model",
    "build_multi_tower_din",
    "interaction_width",
]
