"""MultiTowerDIN (TorchEasyRec's ``multi_tower_din_taobao``): deep towers over pooled features, DIN
towers over jagged behaviour histories, a final MLP over all towers → one logit. The dense arch lives in
:mod:`recpipe.models.multi_tower_din.dense` (plain torch)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.config.sections import VariationalDropoutConfig
from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.dense_embedding import EMBEDDED_SUFFIX
from recpipe.models.blocks.embedding import EmbeddingGroup, EmbeddingInit
from recpipe.models.blocks.item_floats import item_floats
from recpipe.models.blocks.mlp import MlpSpec, mlp_spec, optional_mlp_spec
from recpipe.models.multi_tower_din.config import DinTowerConfig, MultiTowerDinConfig, TowerConfig
from recpipe.models.multi_tower_din.dense import DeepTower, DinTower, MultiTowerDinDense
from recpipe.models.multitask.config import InputTowerConfig


class MultiTowerDIN(SplitModel):
    """Deep towers and DIN towers, concatenated, through a final MLP and a Linear to one logit.

    Two submodules: ``embeddings`` (:class:`EmbeddingGroup`, the sparse arch) and ``dense``
    (:class:`MultiTowerDinDense`, plain torch: what export serves).

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        towers (list[DeepTower]): deep towers.
        din_towers (list[DinTower]): DIN towers.
        final (MlpSpec | None): the MLP over all tower outputs (a Linear to one logit follows).
        head (Callable[[int], nn.Module] | None): instead of ``final``, a multi-task head over the towers'
            concatenated outputs (MMoE, DBMTL, PLE: :mod:`recpipe.models.blocks.multitask`): logits ``(B, T)``.
        dense_in_features (int): width of ``Batch.dense`` (0 when there are no dense features).
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        embedding_init (EmbeddingInit): table initialization.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.
        item_floats (Sequence[str]): history keys that are a float per item, not ids
            (``FeatureSpec.item_float_keys()``): no table; each item's value (its KJT value's float64 bits) is one
            more column of the item, where the history lists it (TorchEasyRec's SequenceEmbeddingGroupImpl
            concatenates a sequence's raw sub-feature values to the item's embeddings).
        variational_dropout (float | None): the regularization lambda of a variational dropout over the deep
            towers' features (see :class:`~recpipe.models.multi_tower_din.dense.MultiTowerDinDense`).

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
        item_floats: Sequence[str] = (),
        variational_dropout: float | None = None,
    ) -> None:
        floats = set(item_floats)
        deep_keys = list(dict.fromkeys(k for t in towers for k in t.sparse_keys))
        query_keys = [k for t in din_towers for k in t.query_keys]
        history_keys = [k for t in din_towers for k in t.history_keys if k not in floats]
        misplaced = sorted(floats & {*deep_keys, *query_keys})
        if misplaced:
            raise ValueError(
                f"keys {misplaced} are a float per history item: only a DIN tower's history can read them"
            )
        embeddings = EmbeddingGroup(
            tables,
            pooled_keys=list(dict.fromkeys(deep_keys + query_keys)),
            sequence_keys=list(dict.fromkeys(history_keys)),
            pooling=pooling,
            device=device,
            init=embedding_init,
        )
        dims = {k: embeddings.embedding_dim(k) for k in [*deep_keys, *query_keys, *history_keys]}
        dims.update(dict.fromkeys(floats, 1))
        dense = MultiTowerDinDense(
            towers, din_towers, final, dims, dense_in_features, device, head, variational_dropout
        )
        super().__init__(embeddings, dense, dense_in_features)
        self.item_floats = sorted(floats)

    def sparse_arch(self, sparse: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        """Embedding lookups keyed by :meth:`dense_input_names` (without ``dense``): one ``(B, D)`` per
        deep-tower key; per DIN tower ``<name>__query (B, Dq)``, ``<name>__values (T, Ds)``,
        ``<name>__offsets (B + 1,)`` int64. The query holds the pooled keys only: a group's dense query
        columns (:attr:`DinTower.dense_columns`) join it in the dense arch, from ``Batch.dense``."""
        lookup = self.embeddings(sparse)
        out = {k: lookup.pooled[k] for k in self.dense.deep_keys}
        for tower in self.dense.din_towers_spec:
            out[f"{tower.name}__query"] = torch.cat([lookup.pooled[k] for k in tower.query_keys], dim=1)
            # The sub-features of one sequence share lengths: item i of every sub-feature is one item.
            parts = [
                item_floats(sparse[k].values()) if k in self.item_floats else lookup.values[k]
                for k in tower.history_keys
            ]
            out[f"{tower.name}__values"] = torch.cat(parts, dim=1)
            first = tower.history_keys[0]
            out[f"{tower.name}__offsets"] = (
                sparse[first].offsets().long() if first in self.item_floats else lookup.offsets[first]
            )
        return out


def build(spec: FeatureSpec, cfg: MultiTowerDinConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """MultiTowerDIN from the spec's feature groups and ``cfg`` (towers by group name; see
    :func:`tower_specs`)."""
    towers, din_towers = tower_specs(spec, cfg.towers, cfg.din_towers)
    return MultiTowerDIN(
        spec.tables(),
        towers,
        din_towers,
        mlp_spec(cfg.final),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
        item_floats=spec.item_float_keys(),
        variational_dropout=dropout_lambda(cfg.variational_dropout),
    )


def dropout_lambda(cfg: VariationalDropoutConfig | None) -> float | None:
    """The variational dropout's regularization lambda of a model section, None without one."""
    return None if cfg is None else cfg.regularization_lambda


def dense_feature_widths(names: Sequence[str]) -> tuple[int, ...]:
    """How many of a group's dense columns each feature has: an embedded numeric feature's columns
    (``price__emb0 … price__emb7``, :func:`~recpipe.models.blocks.dense_embedding.expand_dense`) are one
    feature, any other column one."""
    widths: list[int] = []
    previous = None
    for n in names:
        base, _, index = n.rpartition(EMBEDDED_SUFFIX)
        feature = base if base and index.isdigit() else n
        if feature == previous and base:
            widths[-1] += 1
        else:
            widths.append(1)
        previous = feature
    return tuple(widths)


def tower_specs(
    spec: FeatureSpec, towers: Sequence[TowerConfig | InputTowerConfig], din_towers: Sequence[DinTowerConfig]
) -> tuple[list[DeepTower], list[DinTower]]:
    """The deep and DIN towers of a config, over the spec's feature groups (a tower's ``mlp`` may be
    ``None`` in a multi-task model: the group's embeddings as they are).

    Raises:
        ValueError: a tower over a group of the wrong type (deep vs sequence).
    """
    dense_names = spec.dense_names()
    deep = []
    for t in towers:
        group = spec.group(t.group)
        if group.type != "deep":
            raise ValueError(f"tower over group {t.group!r} needs a deep group, it is {group.type!r}")
        cols = tuple(dense_names.index(n) for n in group.dense)
        mlp = optional_mlp_spec(t.mlp)
        deep.append(DeepTower(group.name, tuple(group.sparse), mlp, cols, dense_feature_widths(group.dense)))
    max_length = {s.name: s.max_length for s in spec.sequences}
    din = []
    for t in din_towers:
        group = spec.group(t.group)
        if group.type != "sequence":
            raise ValueError(f"DIN tower over group {t.group!r} needs a sequence group, it is {group.type!r}")
        if not group.query:
            raise ValueError(
                f"DIN tower over group {t.group!r}: the group has history sub-features {group.history} but no "
                "query feature to attend with; list the candidate's features in the group"
            )
        parents = {spec.feature(h).sequence for h in group.history}
        length = max(max_length[p] for p in parents if p is not None)
        din.append(
            DinTower(
                group.name,
                tuple(group.query),
                tuple(group.history),
                mlp_spec(t.attn_mlp),
                t.attention,
                length,
                t.weighting,
                tuple(dense_names.index(n) for n in group.dense),
                tuple(group.query_parts().index(n) for n in group.dense),
            )
        )
    return deep, din
