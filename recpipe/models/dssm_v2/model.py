"""DSSMv2 (TorchEasyRec's ``DSSMV2``, tzrec/models/dssm_v2.py): DSSM's two towers
(:class:`~recpipe.models.dssm.model.DssmTower`: an MLP over a ``deep`` group and its pooled histories, a Linear to
``output_dim``, L2-normalised under cosine) over one embedding lookup whose tables both towers share.

TorchEasyRec builds one ``EmbeddingGroup`` over every feature group and slices the user side to the batch's
positives (``grouped_features[user][:batch_size]``, which is why it needs ``force_base_data_group``). recpipe looks
up the positives' rows and the sampled items' rows apart, so the user side is always its own rows: one table per
table name, shared, with no padding of the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.blocks.embedding import EmbeddingGroup
from recpipe.models.dssm.model import (
    DssmTower,
    PooledHistory,
    check_similarity,
    check_tower_keys,
    tower_parts,
)
from recpipe.models.dssm_v2.config import DssmV2Config
from recpipe.models.multi_tower_din.dense import DeepTower

if TYPE_CHECKING:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from recpipe.batch import Batch


class DSSMV2(nn.Module):
    """The two-tower model over shared tables: ``user_embedding`` ``(B, D)``, ``item_embedding`` ``(N, D)``,
    and ``forward`` each row's ``u·v / temperature`` ``(B,)``.

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
        pooling (dict[str, str] | None): ``sum`` / ``mean`` per pooled key.
        device (torch.device | None): parameter device.
        user_histories (tuple[PooledHistory, ...]): the user tower's pooled histories (jagged lookups).
        item_histories (tuple[PooledHistory, ...]): the item tower's.

    Example::

        # B = 2; user group [user_id, cate_id], item group [adgroup_id, cate_id]: cate_id is one table
        #   user_id [7] [3]   adgroup_id [41] [9]   cate_id [4] [2]
        model = build_model(spec, cfg.model)             # type: dssm_v2, output_dim 8
        [n for n, _ in model.shared_embeddings.named_parameters()]   # one weight per table: cate_id once
        model.user_embedding(batch.dense, batch.sparse).shape        # (2, 8)
        model(batch.dense, batch.sparse).shape                       # (2,)
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
        user_histories: tuple[PooledHistory, ...] = (),
        item_histories: tuple[PooledHistory, ...] = (),
    ) -> None:
        super().__init__()
        check_similarity(similarity, temperature)
        pooling = pooling or {}
        check_tower_keys(user)
        check_tower_keys(item)
        keys = list(dict.fromkeys([*user.sparse_keys, *item.sparse_keys]))
        seq = list(dict.fromkeys(k for h in (*user_histories, *item_histories) for k in h.keys))
        self.shared_embeddings = EmbeddingGroup(
            tables, keys, seq, {k: pooling[k] for k in keys if k in pooling}, device=device
        )
        dims = {k: self.shared_embeddings.embedding_dim(k) for k in [*keys, *seq]}
        cosine = similarity == "cosine"
        self.user_tower = DssmTower(user, dims, output_dim, cosine, device, user_histories)
        self.item_tower = DssmTower(item, dims, output_dim, cosine, device, item_histories)
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
        return self.user_tower(dense, self.shared_embeddings(sparse))

    def item_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        """``(N, D)`` the item tower's output of every row (the batch's positives, sampled items, the catalogue)."""
        return self.item_tower(dense, self.shared_embeddings(sparse))

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        lookup = self.shared_embeddings(sparse)  # one lookup serves both towers
        user = self.user_tower(dense, lookup)
        item = self.item_tower(dense, lookup)
        return (user * item).sum(dim=1) / self.temperature

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)


def build(spec: FeatureSpec, cfg: DssmV2Config, device: torch.device | None = None) -> DSSMV2:
    """DSSMv2 from the spec's tower groups and pooled histories (as DSSM's,
    :func:`~recpipe.models.dssm.model.tower_parts`), one table per table name.

    Raises:
        ValueError: what :func:`~recpipe.models.dssm.model.tower_parts` refuses.
    """
    user, item, user_histories, item_histories = tower_parts(spec, cfg)
    return DSSMV2(
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
        user_histories=user_histories,
        item_histories=item_histories,
    )
