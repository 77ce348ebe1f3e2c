"""MultiTowerDIN (TorchEasyRec's ``multi_tower_din_taobao``): deep towers over pooled features, DIN
towers over jagged behaviour histories, a final MLP over all towers → one logit. The dense arch lives in
:mod:`recpipe.models.multi_tower_din_dense` (plain torch)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.features.spec import TableSpec
from recpipe.models.embedding import EmbeddingGroup, EmbeddingInit
from recpipe.models.mlp import MlpSpec
from recpipe.models.multi_tower_din_dense import ATTENTIONS, DeepTower, DinTower, MultiTowerDinDense

__all__ = ["ATTENTIONS", "DeepTower", "DinTower", "MultiTowerDIN", "MultiTowerDinDense"]


class MultiTowerDIN(nn.Module):
    """Deep towers and DIN towers, concatenated, through a final MLP and a Linear to one logit.

    Two submodules: ``embeddings`` (:class:`EmbeddingGroup`, the sparse arch) and ``dense``
    (:class:`MultiTowerDinDense`, plain torch: what export serves).

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        towers (list[DeepTower]): deep towers.
        din_towers (list[DinTower]): DIN towers.
        final (MlpSpec | None): the MLP over all tower outputs (a Linear to one logit follows).
        head (Callable[[int], nn.Module] | None): instead of ``final``, a multi-task head over the towers'
            concatenated outputs (MMoE, DBMTL, PLE: :mod:`recpipe.models.zoo.multitask`): logits ``(B, T)``.
        dense_in_features (int): width of ``Batch.dense`` (0 when there are no dense features).
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        embedding_init (EmbeddingInit): table initialization.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # Taobao: B = 2; 16 pooled keys of dim 16 in the deep tower; click_50_seq of 3 sub-features
        #   adgroup_id                [3]          [5]
        #   click_50_seq__adgroup_id  [3, 8, 1]    []      (cate_id, brand alike)
        model = build_model(spec, cfg.model)
        emb = model.sparse_arch(kjt)
        emb["user_id"].shape       # (2, 16)      one per deep-tower key
        emb["seq__query"].shape    # (2, 48)      target adgroup_id | cate_id | brand
        emb["seq__values"].shape   # (3, 48)      T = 3 real history items, never padded
        emb["seq__offsets"]        # tensor([0, 3, 3])
        model.dense_arch(torch.zeros(2, 0), emb).shape  # (2,) logits
        # deep: (2, 256) -> 512-256-128; DIN: (2, 48); final: (2, 176) -> 64 -> 1
    """

    def __init__(
        self,
        tables: list[TableSpec],
        towers: list[DeepTower],
        din_towers: list[DinTower],
        final: MlpSpec | None,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        embedding_init: EmbeddingInit = EmbeddingInit(),
        device: torch.device | None = None,
        head: Callable[[int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        deep_keys = list(dict.fromkeys(k for t in towers for k in t.sparse_keys))
        query_keys = [k for t in din_towers for k in t.query_keys]
        history_keys = [k for t in din_towers for k in t.history_keys]
        self.embeddings = EmbeddingGroup(
            tables,
            pooled_keys=list(dict.fromkeys(deep_keys + query_keys)),
            sequence_keys=list(dict.fromkeys(history_keys)),
            pooling=pooling,
            device=device,
            init=embedding_init,
        )
        dims = {k: self.embeddings.embedding_dim(k) for k in [*deep_keys, *query_keys, *history_keys]}
        self.dense = MultiTowerDinDense(towers, din_towers, final, dims, dense_in_features, device, head)
        self.dense_in_features = dense_in_features

    def dense_input_names(self) -> list[str]:
        """Inputs of :meth:`dense_arch`, in order: ``dense`` ``(B, dense_in_features)``; one ``(B, D)`` per
        deep-tower key; per DIN tower ``<name>__query (B, Dq)``, ``<name>__values (T, Ds)``,
        ``<name>__offsets (B + 1,)`` int64."""
        return self.dense.input_names()

    def dense_module(self) -> nn.Module:
        """The dense arch as a module ``(dense, embeddings) -> logits`` holding no embedding table."""
        return self.dense

    def sparse_arch(self, sparse: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        """Embedding lookups keyed by :meth:`dense_input_names` (without ``dense``)."""
        lookup = self.embeddings(sparse)
        out = {k: lookup.pooled[k] for k in self.dense.deep_keys}
        for tower in self.dense.din_towers_spec:
            out[f"{tower.name}__query"] = torch.cat([lookup.pooled[k] for k in tower.query_keys], dim=1)
            # The sub-features of one sequence share lengths: item i of every sub-feature is one item.
            out[f"{tower.name}__values"] = torch.cat([lookup.values[k] for k in tower.history_keys], dim=1)
            out[f"{tower.name}__offsets"] = lookup.offsets[tower.history_keys[0]]
        return out

    def dense_arch(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits ``(B,)`` from dense features and :meth:`sparse_arch` outputs (plain torch ops only)."""
        return self.dense(dense, embeddings)

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense_arch(dense, self.sparse_arch(sparse))

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)
