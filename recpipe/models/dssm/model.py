"""DSSM (TorchEasyRec's ``DSSM``, tzrec/models/dssm.py): two towers, each its own embedding tables and an MLP
over one ``deep`` feature group (and its pooled histories: ``sequence_pooling``, TorchEasyRec's ``pooling_encoder``),
a Linear to ``output_dim``, L2-normalised under the cosine similarity.

The module holds no loss (:class:`~recpipe.models.retrieval_train.RetrievalTrainModel` does): it gives the two
embeddings (:class:`~recpipe.models.protocol.RetrievalModel`) and, as ``forward``, each row's user-to-own-item
similarity over the temperature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.blocks.dense_embedding import EMBEDDED_SUFFIX
from recpipe.models.blocks.embedding import EmbeddingGroup, EmbeddingLookup, jagged_pool
from recpipe.models.blocks.mlp import MLP
from recpipe.models.blocks.variational_dropout import VariationalDropout
from recpipe.models.dssm.config import DssmConfig, SequencePoolingConfig
from recpipe.models.multi_tower_din.dense import DeepTower
from recpipe.models.multi_tower_din.model import tower_specs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from recpipe.batch import Batch

SIMILARITIES = ("inner_product", "cosine")


@dataclass(frozen=True)
class PooledHistory:
    """A history a tower pools (TorchEasyRec's ``PoolingEncoder``): its sequence keys, looked up jagged (no
    padding), each item their embeddings concatenated, the row's ``mean`` over its real items or ``sum``.

    Args:
        group (str): the sequence group.
        keys (tuple[str, ...]): its history keys, in the group's order.
        pooling (str): ``mean`` or ``sum``.

    Example::

        # click_50_seq__adgroup_id (dim 16), click_50_seq__cate_id (dim 8); row 0 has items a, b, row 1 none
        PooledHistory("click_50_seq", ("click_50_seq__adgroup_id", "click_50_seq__cate_id"), "mean")
        # → (2, 24): row 0 (e_a + e_b) / 2 of each key, concatenated; row 1 zeros
    """

    group: str
    keys: tuple[str, ...]
    pooling: str = "mean"

    def __call__(self, lookup: EmbeddingLookup) -> torch.Tensor:
        parts = []
        for k in self.keys:
            lengths = lookup.offsets[k].diff()
            parts.append(jagged_pool(lookup.values[k], lengths, self.pooling))
        return torch.cat(parts, dim=1)


def pooled_histories(
    spec: FeatureSpec, pooling: Sequence[SequencePoolingConfig]
) -> tuple[PooledHistory, ...]:
    """The :class:`PooledHistory` of each ``sequence_pooling`` entry.

    Raises:
        ValueError: a group with query features (DIN's construct, not a pooled history), or one with a float
            per item (not built for pooling yet).
    """
    out = []
    floats = set(spec.item_float_keys())
    for p in pooling:
        group = spec.group(p.group)
        if group.query or group.dense:
            raise ValueError(
                f"sequence_pooling group {p.group!r} lists query features {group.query + group.dense}: a pooled "
                "history holds history sub-features only (TorchEasyRec's sequence_groups of a DEEP group)"
            )
        dense = [h for h in group.history if h in floats]
        if dense:
            raise ValueError(
                f"sequence_pooling group {p.group!r}: sub-features {dense} are a float per item; pooling takes "
                "embedded sub-features only for now"
            )
        out.append(PooledHistory(p.group, tuple(group.history), p.pooling))
    return tuple(out)


class DssmTower(nn.Module):
    """One tower: its group's pooled embeddings and dense columns, concatenated, an MLP, a Linear to
    ``output_dim`` (none at 0), L2-normalised when ``cosine`` (TorchEasyRec's ``DSSMTower``).

    Args:
        tower (DeepTower): the group's keys, dense columns and MLP.
        key_dims (dict[str, int]): embedding width of every key (the pooled histories' too).
        output_dim (int): the Linear's width; 0: none.
        cosine (bool): L2-normalise the output.
        device (torch.device | None): parameter device.

    Example::

        # keys user_id (dim 16), 1 dense column; MLP 32-16, output_dim 8
        tower = DssmTower(DeepTower("user", ("user_id",), MlpSpec((32, 16)), (0,)), {"user_id": 16}, 8, True)
        tower(torch.zeros(2, 1), EmbeddingLookup({"user_id": torch.randn(2, 16)}, {}, {})).shape
        # (2, 8), rows of norm 1
    """

    def __init__(
        self,
        tower: DeepTower,
        key_dims: dict[str, int],
        output_dim: int,
        cosine: bool,
        device: torch.device | None = None,
        histories: tuple[PooledHistory, ...] = (),
        variational_dropout: float | None = None,
    ) -> None:
        super().__init__()
        if tower.mlp is None:
            raise ValueError(f"tower {tower.name!r} needs an mlp")
        self.keys = tuple(tower.sparse_keys)
        self.dense_columns = tuple(tower.dense_columns)
        self.histories = histories
        # each input feature's width, in the order forward concatenates them (a pooled history is one feature)
        widths = [key_dims[k] for k in self.keys] + [1] * len(self.dense_columns)
        widths += [sum(key_dims[k] for k in h.keys) for h in histories]
        # TorchEasyRec drops the features of a group of more than one (MatchModel.init_input)
        self.dropout = (
            VariationalDropout(widths, variational_dropout, device)
            if variational_dropout is not None and len(widths) > 1
            else None
        )
        self.mlp = MLP.from_spec(sum(widths), tower.mlp, device)
        self.output = nn.Linear(self.mlp.out_features, output_dim, device=device) if output_dim > 0 else None
        self.cosine = cosine

    @property
    def out_features(self) -> int:
        return self.mlp.out_features if self.output is None else self.output.out_features

    def regularization(self, batch_size: int) -> torch.Tensor | None:
        """The variational dropout's penalty for ``batch_size`` rows (None without one)."""
        return None if self.dropout is None else self.dropout.penalty(batch_size)

    def forward(self, dense: torch.Tensor, lookup: EmbeddingLookup) -> torch.Tensor:
        """``(B, D)`` from the group's lookup: its pooled keys, dense columns, then each pooled history (the
        order TorchEasyRec's EmbeddingGroup appends its sequence encoders' outputs in)."""
        parts = [lookup.pooled[k] for k in self.keys]
        if self.dense_columns:
            parts.append(dense[:, list(self.dense_columns)])
        parts += [h(lookup) for h in self.histories]
        x = torch.cat(parts, dim=1)
        out = self.mlp(x if self.dropout is None else self.dropout(x))
        if self.output is not None:
            out = self.output(out)
        return F.normalize(out, p=2.0, dim=1) if self.cosine else out


class DSSM(nn.Module):
    """The two-tower model: ``user_embedding`` ``(B, D)``, ``item_embedding`` ``(N, D)``, and ``forward`` the
    ``(B,)`` similarity of each row's user with its own item over ``temperature``.

    Each tower has its own tables (TorchEasyRec's DSSM builds an embedding group per tower: an id shared by
    both groups gets two tables), or, with ``shared_tables`` (DSSMv2, TorchEasyRec's ``DSSMV2``), one lookup over
    one table per table name serves both towers. TorchEasyRec's DSSMv2 slices the user side out of one group
    over the whole batch (``force_base_data_group``); recpipe looks up the positives' rows and the sampled items'
    rows apart, so the user side is always its own rows.

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
        user_histories (tuple[PooledHistory, ...]): the user tower's pooled histories (jagged lookups).
        item_histories (tuple[PooledHistory, ...]): the item tower's.
        shared_tables (bool): one embedding group (``shared_embeddings``) for both towers, else
            ``user_embeddings`` and ``item_embeddings``.
        variational_dropout (float | None): the regularization lambda of each tower's variational dropout
            (:class:`~recpipe.models.blocks.variational_dropout.VariationalDropout`); None: none.

    Example::

        # B = 2; user group [user_id, age_level], item group [adgroup_id, cate_id] (dim 16 each)
        #   user_id [7] [3]   age_level [2] [5]   adgroup_id [41] [9]   cate_id [4] [4]
        model = build_model(spec, cfg.model)             # output_dim 8, cosine
        model.user_embedding(batch.dense, batch.sparse).shape   # (2, 8), unit rows
        model.item_embedding(batch.dense, batch.sparse).shape   # (2, 8)
        model(batch.dense, batch.sparse).shape                  # (2,): each row's u·v / temperature
        # type dssm_v2: [n for n, _ in model.shared_embeddings.named_parameters()]: one weight per table
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
        shared_tables: bool = False,
        variational_dropout: float | None = None,
    ) -> None:
        super().__init__()
        check_similarity(similarity, temperature)
        pooling = pooling or {}
        check_tower_keys(user)
        check_tower_keys(item)

        def group(towers: tuple[tuple[DeepTower, tuple[PooledHistory, ...]], ...]) -> EmbeddingGroup:
            keys = list(dict.fromkeys(k for t, _ in towers for k in t.sparse_keys))
            seq = list(dict.fromkeys(k for _, hs in towers for h in hs for k in h.keys))
            return EmbeddingGroup(
                tables, keys, seq, {k: pooling[k] for k in keys if k in pooling}, device=device
            )

        sides = ((user, user_histories), (item, item_histories))
        self.shared_embeddings: EmbeddingGroup | None = None
        self.user_embeddings: EmbeddingGroup | None = None
        self.item_embeddings: EmbeddingGroup | None = None
        if shared_tables:
            self.shared_embeddings = group(sides)
            groups = (self.shared_embeddings, self.shared_embeddings)
        else:
            self.user_embeddings, self.item_embeddings = group(sides[:1]), group(sides[1:])
            groups = (self.user_embeddings, self.item_embeddings)
        cosine = similarity == "cosine"
        self.user_tower, self.item_tower = (
            DssmTower(tower, _key_dims(g, tower, hs), output_dim, cosine, device, hs, variational_dropout)
            for g, (tower, hs) in zip(groups, sides, strict=True)
        )
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
        group = self.shared_embeddings if self.shared_embeddings is not None else self.user_embeddings
        assert group is not None
        return self.user_tower(dense, group(sparse))

    def item_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        """``(N, D)`` the item tower's output of every row (the batch's positives, sampled items, the catalogue)."""
        group = self.shared_embeddings if self.shared_embeddings is not None else self.item_embeddings
        assert group is not None
        return self.item_tower(dense, group(sparse))

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        if self.shared_embeddings is not None:
            lookup = self.shared_embeddings(sparse)  # one lookup serves both towers
            user, item = self.user_tower(dense, lookup), self.item_tower(dense, lookup)
        else:
            user, item = self.user_embedding(dense, sparse), self.item_embedding(dense, sparse)
        return (user * item).sum(dim=1) / self.temperature

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)

    def regularization(self, batch_size: int) -> torch.Tensor | None:
        """Both towers' variational dropout penalties for ``batch_size`` rows, summed (None without any): the
        training loss adds it, as TorchEasyRec's loss collection holds each group's ``feature_p_loss``."""
        terms = [
            t
            for t in (self.user_tower.regularization(batch_size), self.item_tower.regularization(batch_size))
            if t is not None
        ]
        return None if not terms else torch.stack(terms).sum()


def _key_dims(
    group: EmbeddingGroup, tower: DeepTower, histories: tuple[PooledHistory, ...]
) -> dict[str, int]:
    return {k: group.embedding_dim(k) for k in [*tower.sparse_keys, *(k for h in histories for k in h.keys)]}


def check_similarity(similarity: str, temperature: float) -> None:
    """A known similarity and a positive temperature."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {list(SIMILARITIES)}, got {similarity!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def check_tower_keys(tower: DeepTower) -> None:
    """A tower embeds at least one id of its group."""
    if not tower.sparse_keys:
        raise ValueError(f"tower over group {tower.name!r} has no id feature to embed")


def tower_parts(
    spec: FeatureSpec, cfg: DssmConfig
) -> tuple[DeepTower, DeepTower, tuple[PooledHistory, ...], tuple[PooledHistory, ...]]:
    """The two towers' groups and pooled histories of a DSSM / DSSMv2 config.

    Raises:
        ValueError: a tower over a group that is not ``deep``, one reading an embedded numeric feature (not
            built for DSSM yet), or a pooled history :func:`pooled_histories` refuses.
    """
    (user, item), _ = tower_specs(spec, [cfg.user_tower, cfg.item_tower], [])
    for tower in (user, item):
        embedded = [n for n in spec.group(tower.name).dense if EMBEDDED_SUFFIX in n]
        if embedded:
            raise ValueError(
                f"DSSM tower over group {tower.name!r}: numeric features with an embedding ({embedded}) are not "
                "supported by DSSM yet; give them boundaries (a bucketised id) or no embedding"
            )
    users = pooled_histories(spec, cfg.user_tower.sequence_pooling)
    items = pooled_histories(spec, cfg.item_tower.sequence_pooling)
    return user, item, users, items


def build(
    spec: FeatureSpec, cfg: DssmConfig, device: torch.device | None = None, shared_tables: bool = False
) -> DSSM:
    """DSSM from the spec's ``user`` and ``item`` groups (by ``cfg``'s tower groups) and their pooled histories;
    ``shared_tables``: DSSMv2's one embedding group.

    Raises:
        ValueError: what :func:`tower_parts` refuses.
    """
    user, item, user_histories, item_histories = tower_parts(spec, cfg)
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
        user_histories=user_histories,
        item_histories=item_histories,
        shared_tables=shared_tables,
        variational_dropout=None
        if cfg.variational_dropout is None
        else cfg.variational_dropout.regularization_lambda,
    )
