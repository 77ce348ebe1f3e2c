"""The toy model: logistic regression over the pooled embeddings of one feature group and every dense
feature, on the split-model base (it gives only its lookup and its dense arch)."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.embedding import EmbeddingGroup
from tests.models.toy.config import ToyConfig


class ToyDense(nn.Module):
    """One Linear over ``[dense, emb_1 … emb_F]`` → one logit (plain torch: what export serves).

    Args:
        keys (list[str]): the pooled keys, in input order.
        width (int): dense width plus the sum of the embedding dims.
        device (torch.device | None): parameter device.
    """

    def __init__(self, keys: list[str], width: int, device: torch.device | None = None) -> None:
        super().__init__()
        self.keys = list(keys)
        self.linear = nn.Linear(width, 1, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *self.keys]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.linear(torch.cat([dense] + [embeddings[k] for k in self.keys], dim=1)).squeeze(-1)


class ToyModel(SplitModel):
    """Logistic regression over pooled embeddings and dense features.

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        keys (list[str]): the pooled KJT keys.
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str]): ``"sum"``/``"mean"`` per key.
        device (torch.device | None): ``cpu`` (default) or ``meta``.

    Example::

        # B = 2, keys C1, C2 (dim 4), 3 dense floats
        #   C1  [7]  [1]
        #   C2  [3]  []
        model.sparse_arch(kjt)                           # {"C1": (2, 4), "C2": (2, 4)}
        model(torch.zeros(2, 3), kjt).shape              # (2,): Linear over 3 + 4 + 4 inputs
    """

    def __init__(
        self,
        tables: list[TableSpec],
        keys: list[str],
        dense_in_features: int,
        pooling: dict[str, str],
        device: torch.device | None = None,
    ) -> None:
        embeddings = EmbeddingGroup(tables, keys, [], pooling, device=device)
        width = dense_in_features + sum(embeddings.embedding_dim(k) for k in keys)
        super().__init__(embeddings, ToyDense(keys, width, device=device), dense_in_features)


def build(spec: FeatureSpec, cfg: ToyConfig, device: torch.device | None = None) -> ToyModel:
    """The toy over ``cfg.group``'s sparse keys and all of ``Batch.dense``."""
    keys = list(spec.group(cfg.group).sparse)
    return ToyModel(spec.tables(), keys, spec.dense_dim, spec.pooling(), device=device)
