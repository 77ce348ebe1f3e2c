"""DSSM (TorchEasyRec's ``DSSM``, tzrec/models/dssm.py): two towers, each its own embedding tables and an MLP
over one ``deep`` feature group, a Linear to ``output_dim``, L2-normalised under the cosine similarity.

The module holds no loss (:class:`~recpipe.models.retrieval_train.RetrievalTrainModel` does): it gives the two
embeddings (:class:`~recpipe.models.protocol.RetrievalModel`) and, as ``forward``, each row's user-to-own-item
similarity over the temperature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.blocks.dense_embedding import EMBEDDED_SUFFIX
from recpipe.models.blocks.embedding import EmbeddingGroup
from recpipe.models.blocks.mlp import MLP
from recpipe.models.dssm.config import DssmConfig
from recpipe.models.multi_tower_din.dense import DeepTower
from recpipe.models.multi_tower_din.model import tower_specs

if TYPE_CHECKING:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from recpipe.batch import Batch

SIMILARITIES = ("inner_product", "cosine")


class DssmTower(nn.Module):
    """One tower: its group's pooled embeddings and dense columns, concatenated, an MLP, a Linear to
    ``output_dim`` (none at 0), L2-normalised when ``cosine`` (TorchEasyRec's ``DSSMTower``).

    Args:
        tower (DeepTower): the group's keys, dense columns and MLP.
        key_dims (dict[str, int]): embedding width of every key.
        output_dim (int): the Linear's width; 0: none.
        cosine (bool): L2-normalise the output.
        device (torch.device | None): parameter device.

    Example::

        # keys user_id (dim 16), 1 dense column; MLP 32-16, output_dim 8
        tower = DssmTower(DeepTower("user", ("user_id",), MlpSpec((32, 16)), (0,)), {"user_id": 16}, 8, True)
        tower(torch.zeros(2, 1), {"user_id": torch.randn(2, 16)}).shape    # (2, 8), rows of norm 1
    """

    def __init__(
        self,
        tower: DeepTower,
        key_dims: dict[str, int],
        output_dim: int,
        cosine: bool,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if tower.mlp is None:
            raise ValueError(f"tower {tower.name!r} needs an mlp")
        self.keys = tuple(tower.sparse_keys)
        self.dense_columns = tuple(tower.dense_columns)
        in_features = sum(key_dims[k] for k in self.keys) + len(self.dense_columns)
        self.mlp = MLP.from_spec(in_features, tower.mlp, device)
        self.output = nn.Linear(self.mlp.out_features, output_dim, device=device) if output_dim > 0 else None
        self.cosine = cosine

    @property
    def out_features(self) -> int:
        return self.mlp.out_features if self.output is None else self.output.out_features

    def forward(self, dense: torch.Tensor, pooled: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [pooled[k] for k in self.keys]
        if self.dense_columns:
            parts.append(dense[:, list(self.dense_columns)])
        out = self.mlp(torch.cat(parts, dim=1))
        if self.output is not None:
            out = self.output(out)
        return F.normalize(out, p=2.0, dim=1) if self.cosine else out


class DSSM(nn.Module):
    """The two-tower model: ``user_embedding`` ``(B, D)``, ``item_embedding`` ``(N, D)``, and ``forward`` the
    ``(B,)`` similarity of each row's user with its own item over ``temperature``.

    Each tower has its own tables (TorchEasyRec's DSSM builds an embedding group per tower: an id shared by
    both groups gets two tables; DSSMv2 shares them).

    Args:
        tables (list[TableSpec]): ``FeatureSpec.tables()``.
        user (DeepTower): the user tower's keys, dense columns and MLP.
        item (DeepTower): the item tower's.
        output_dim (int): both towers' output width (0: their MLPs' last width, which must agree).
        similarity (str): ``inner_product`` or ``cosine``.
        temperature (float): the similarity's divisor (> 0).
        in_batch_negative (bool): the training loss's negatives are the batch's items (else sampled ones).
        log_q_correction (bool): the training loss subtracts each item's log sampling probability.
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``sum`` / ``mean`` per key.
        device (torch.device | None): parameter device.

    Example::

        # B = 2; user group [user_id, age_level], item group [adgroup_id, cate_id] (dim 16 each)
        #   user_id [7] [3]   age_level [2] [5]   adgroup_id [41] [9]   cate_id [4] [4]
        model = build_model(spec, cfg.model)             # output_dim 8, cosine
        model.user_embedding(batch.dense, batch.sparse).shape   # (2, 8), unit rows
        model.item_embedding(batch.dense, batch.sparse).shape   # (2, 8)
        model(batch.dense, batch.sparse).shape                  # (2,): each row's u·v / temperature
    """

    def __init__(
        self,
        tables: list[TableSpec],
        user: DeepTower,
        item: DeepTower,
        output_dim: int,
        similarity: str = "inner_product",
        temperature: float = 1.0,
        in_batch_negative: bool = False,
        log_q_correction: bool = False,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {list(SIMILARITIES)}, got {similarity!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        pooling = pooling or {}
        towers = []
        for tower in (user, item):
            if not tower.sparse_keys:
                raise ValueError(f"tower over group {tower.name!r} has no id feature to embed")
            group = EmbeddingGroup(
                tables,
                list(tower.sparse_keys),
                [],
                {k: pooling[k] for k in tower.sparse_keys if k in pooling},
                device=device,
            )
            dims = {k: group.embedding_dim(k) for k in tower.sparse_keys}
            towers.append((group, DssmTower(tower, dims, output_dim, similarity == "cosine", device)))
        (self.user_embeddings, self.user_tower), (self.item_embeddings, self.item_tower) = towers
        if self.user_tower.out_features != self.item_tower.out_features:
            raise ValueError(
                f"the user tower ends at width {self.user_tower.out_features} and the item tower at "
                f"{self.item_tower.out_features}: give output_dim, or MLPs of the same last width"
            )
        self.similarity = similarity
        self.temperature = float(temperature)
        self.in_batch_negative = in_batch_negative
        self.log_q_correction = log_q_correction
        self.dense_in_features = dense_in_features
        self.user_group, self.item_group = user.name, item.name

    @property
    def embedding_dim(self) -> int:
        """``D``, the width of both embeddings."""
        return self.user_tower.out_features

    def user_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        """``(B, D)`` the user tower's output of every row."""
        return self.user_tower(dense, self.user_embeddings(sparse).pooled)

    def item_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        """``(N, D)`` the item tower's output of every row (the batch's positives, sampled items, the catalogue)."""
        return self.item_tower(dense, self.item_embeddings(sparse).pooled)

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        user = self.user_embedding(dense, sparse)
        item = self.item_embedding(dense, sparse)
        return (user * item).sum(dim=1) / self.temperature

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)


def build(spec: FeatureSpec, cfg: DssmConfig, device: torch.device | None = None) -> DSSM:
    """DSSM from the spec's ``user`` and ``item`` groups (by ``cfg``'s tower groups).

    Raises:
        ValueError: a tower over a group that is not ``deep``, one without an id feature, or one reading an
            embedded numeric feature (not built for DSSM yet).
    """
    (user, item), _ = tower_specs(spec, [cfg.user_tower, cfg.item_tower], [])
    for tower in (user, item):
        embedded = [n for n in spec.group(tower.name).dense if EMBEDDED_SUFFIX in n]
        if embedded:
            raise ValueError(
                f"DSSM tower over group {tower.name!r}: numeric features with an embedding ({embedded}) are not "
                "supported by DSSM yet; give them boundaries (a bucketised id) or no embedding"
            )
    return DSSM(
        spec.tables(),
        user,
        item,
        cfg.output_dim,
        cfg.similarity,
        cfg.temperature,
        cfg.in_batch_negative,
        cfg.log_q_correction,
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
