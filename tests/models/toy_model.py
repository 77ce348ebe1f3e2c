"""A toy ranking model declared the way any model is (one file; its registry line is an entry point, see
``tests/models/test_toy_model.py``): logistic regression over the pooled embeddings of one feature group
and every dense feature.

Unlike the shipped models it imports torch at the top, so loading a config that names it imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.config import FeatureGroupConfig, ModelSection, check_group_refs
from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.embedding import EmbeddingGroup


class ToyConfig(ModelSection):
    """``model: {type: toy, group: <deep group>}``.

    Args:
        group (str): the deep feature group whose sparse features are pooled.
    """

    type: Literal["toy"]
    group: str = "wide"

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        check_group_refs([self.group], groups)


Config = ToyConfig


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

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.linear(torch.cat([dense] + [embeddings[k] for k in self.keys], dim=1)).squeeze(-1)


class ToyModel(nn.Module):
    """Logistic regression over pooled embeddings and dense features, split as every model is.

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
        super().__init__()
        self.embeddings = EmbeddingGroup(tables, keys, [], pooling, device=device)
        width = dense_in_features + sum(self.embeddings.embedding_dim(k) for k in keys)
        self.dense = ToyDense(keys, width, device=device)
        self.dense_in_features = dense_in_features

    def dense_input_names(self) -> list[str]:
        return ["dense", *self.dense.keys]

    def dense_module(self) -> nn.Module:
        return self.dense

    def sparse_arch(self, sparse: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        return self.embeddings(sparse).pooled

    def dense_arch(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.dense(dense, embeddings)

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense_arch(dense, self.sparse_arch(sparse))

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)


def build(spec: FeatureSpec, cfg: ToyConfig, device: torch.device | None = None) -> ToyModel:
    """The toy over ``cfg.group``'s sparse keys and all of ``Batch.dense``."""
    keys = list(spec.group(cfg.group).sparse)
    return ToyModel(spec.tables(), keys, spec.dense_dim, spec.pooling(), device=device)
