"""MIND (TorchEasyRec's ``MIND``, tzrec/models/mind.py): a user tower of several interests, an item tower as
DSSM's, trained by label-aware attention (each row's interests weighted by their match with its positive item)
and the softmax cross-entropy over negatives; retrieval scores an item by its best-matching interest.

User tower: the user group's embeddings through ``user_mlp`` (its last width a plain Linear); the history
group's sub-feature embeddings per item (jagged) through ``hist_seq_mlp`` (no biases, its last width a plain
Linear); capsule routing (:class:`~recpipe.models.mind.capsule.CapsuleRouting`) into at most ``max_k``
interests; each interest joined with the user vector, masked, through ``concat_mlp``, masked again, a Linear
without bias to ``output_dim``, L2-normalised under ``cosine``.

Where recpipe differs from TorchEasyRec, and why:

- The initial routing logits are a fixed buffer per history position (drawn once, saved with the model);
  TorchEasyRec draws fresh ones at every call, so its user embeddings change from call to call, at serving
  too. Fixed, the same user always gets the same interests, and a row's interests never depend on the rest of
  its batch.
- ``hist_seq_mlp`` runs on the real items only (jagged); TorchEasyRec runs it on the history padded to
  ``max_seq_len``, so its batch norm's statistics count the padding zeros.
- A ``user_mlp`` of one width is one Linear; TorchEasyRec's branch for that case reads an attribute that does
  not exist (``self.user_mlp.user_feature_in``) and fails.
- Retrieval (recall@K in :mod:`recpipe.eval.retrieval`) gives an item the maximum over the user's real
  interests (MIND's "closest interest"), one top K over the catalogue; TorchEasyRec's hit-rate tool searches
  top K per interest (or across interests with ``topk_across_interests``, the same as recpipe's).

The module holds no loss (:class:`~recpipe.models.retrieval_train.RetrievalTrainModel` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.blocks.embedding import EmbeddingGroup
from recpipe.models.blocks.mlp import MLP, MlpSpec, mlp_spec
from recpipe.models.dssm.model import DssmTower, check_similarity, check_tower_keys
from recpipe.models.mind.capsule import CapsuleRouting
from recpipe.models.mind.config import CapsuleConfig, MindConfig
from recpipe.models.multi_tower_din.dense import DeepTower
from recpipe.models.multi_tower_din.model import tower_specs
from recpipe.models.multitask.config import InputTowerConfig

if TYPE_CHECKING:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from recpipe.batch import Batch


def mlp_then_linear(in_features: int, spec: MlpSpec, bias: bool, device: torch.device | None) -> nn.Module:
    """TorchEasyRec's MIND MLPs: ``hidden_units[:-1]`` as MLP layers, the last width a plain Linear."""
    last = nn.Linear(
        in_features if len(spec.hidden_units) == 1 else spec.hidden_units[-2],
        spec.hidden_units[-1],
        bias=bias,
        device=device,
    )
    if len(spec.hidden_units) == 1:
        return last
    head = MLP(
        in_features,
        list(spec.hidden_units[:-1]),
        spec.activation,
        spec.batch_norm,
        spec.dropout,
        device,
        bias=bias,
    )
    return nn.Sequential(head, last)


class MindUserTower(nn.Module):
    """The user's interests ``(B, K, D)`` and their ``(B, K)`` mask.

    Args:
        user (DeepTower): the user group's keys and dense columns.
        history_keys (tuple[str, ...]): the history group's sub-feature keys (each item their concatenation).
        key_dims (dict[str, int]): every key's embedding width.
        user_mlp (MlpSpec): over the user features.
        hist_seq_mlp (MlpSpec | None): over each item; None: none.
        capsule (CapsuleConfig): the routing.
        concat_mlp (MlpSpec): over each interest joined with the user vector.
        concat_bias (bool): ``concat_mlp``'s Linears have biases.
        output_dim (int): the final Linear's width (no bias); 0: none.
        cosine (bool): L2-normalise each interest.
        device (torch.device | None): parameter device.

    Example::

        # user_id (dim 8); history sub-keys h__a (dim 8), h__b (dim 4); B = 2, row 0 has 3 items, row 1 none
        tower = MindUserTower(DeepTower("user", ("user_id",), None), ("h__a", "h__b"),
                              {"user_id": 8, "h__a": 8, "h__b": 4}, MlpSpec((16,)), None,
                              CapsuleConfig(max_k=3, max_seq_len=10, high_dim=6), MlpSpec((16,)), True, 4, True)
        interests, mask = tower(torch.zeros(2, 0), lookup)   # (2, 3, 4); [[T, T, F], [T, F, F]]
    """

    def __init__(
        self,
        user: DeepTower,
        history_keys: tuple[str, ...],
        key_dims: dict[str, int],
        user_mlp: MlpSpec,
        hist_seq_mlp: MlpSpec | None,
        capsule: CapsuleConfig,
        concat_mlp: MlpSpec,
        concat_bias: bool,
        output_dim: int,
        cosine: bool,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not history_keys:
            raise ValueError("MIND's history group has no sub-feature")
        self.keys = tuple(user.sparse_keys)
        self.dense_columns = tuple(user.dense_columns)
        self.history_keys = history_keys
        user_in = sum(key_dims[k] for k in self.keys) + len(self.dense_columns)
        self.user_mlp = mlp_then_linear(user_in, user_mlp, True, device)
        item_in = sum(key_dims[k] for k in history_keys)
        self.hist_seq_mlp = None
        if hist_seq_mlp is not None:
            self.hist_seq_mlp = mlp_then_linear(item_in, hist_seq_mlp, False, device)
            item_in = hist_seq_mlp.hidden_units[-1]
        self.capsule = CapsuleRouting(
            item_in,
            capsule.max_k,
            capsule.max_seq_len,
            capsule.high_dim,
            capsule.num_iters,
            capsule.routing_logits_scale,
            capsule.routing_logits_stddev,
            capsule.squash_pow,
            capsule.const_caps_num,
            capsule.routing_init,
            device,
        )
        self.concat_mlp = MLP(
            user_mlp.hidden_units[-1] + capsule.high_dim,
            list(concat_mlp.hidden_units),
            concat_mlp.activation,
            concat_mlp.batch_norm,
            concat_mlp.dropout,
            device,
            bias=concat_bias,
        )
        width = self.concat_mlp.out_features
        self.output = nn.Linear(width, output_dim, bias=False, device=device) if output_dim > 0 else None
        self.out_features = output_dim if output_dim > 0 else width
        self.cosine = cosine

    def forward(
        self,
        dense: torch.Tensor,
        pooled: dict[str, torch.Tensor],
        values: torch.Tensor,
        offsets: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Interests and mask from the user group's ``pooled`` embeddings, ``Batch.dense`` and the history's
        ``(T, Dh)`` items with their ``(B + 1,)`` offsets."""
        parts = [pooled[k] for k in self.keys]
        if self.dense_columns:
            parts.append(dense[:, list(self.dense_columns)])
        user = self.user_mlp(torch.cat(parts, dim=1))  # (B, U)
        items = values if self.hist_seq_mlp is None else self.hist_seq_mlp(values)
        high, mask = self.capsule(items, offsets)  # (B, K, H), (B, K)
        keep = mask.unsqueeze(2).to(high.dtype)
        joined = torch.cat([user.unsqueeze(1).expand(-1, high.shape[1], -1), high], dim=2) * keep
        interests = self.concat_mlp(joined) * keep
        if self.output is not None:
            interests = self.output(interests)
        if self.cosine:
            interests = F.normalize(interests, p=2.0, dim=-1)
        return interests, mask


def label_aware_attention(
    interests: torch.Tensor, mask: torch.Tensor, item: torch.Tensor, simi_pow: float
) -> torch.Tensor:
    """``(B, D)``: each row's interests weighted by ``softmax_k(simi_pow · <interest_k, item>)`` over its real
    interests (TorchEasyRec's ``label_aware_attention``; not re-normalised, as there).

    Args:
        interests (torch.Tensor): ``(B, K, D)``.
        mask (torch.Tensor): ``(B, K)`` bool, the real interests.
        item (torch.Tensor): ``(B, D)`` each row's positive item.
        simi_pow (float): the sharpness.

    Example::

        interests = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]); mask = torch.tensor([[True, True]])
        label_aware_attention(interests, mask, torch.tensor([[1.0, 0.0]]), 20.0)   # ≈ [[1.0, 0.0]]
    """
    scores = torch.einsum("bkd,bd->bk", interests, item) * simi_pow
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
    return (weights.unsqueeze(2) * interests).sum(dim=1)


class MIND(nn.Module):
    """The multi-interest model: ``user_interests`` ``(B, K, D)`` with their mask, ``item_embedding`` ``(N, D)``,
    ``attend`` (training's user vector per positive); retrieval scores an item by its best real interest
    (:func:`recpipe.eval.retrieval.top_k_items` with the mask).

    Args:
        tables (list[TableSpec]): ``FeatureSpec.tables()``.
        user (DeepTower): the user group.
        history_keys (tuple[str, ...]): the history group's sub-feature keys.
        item (DeepTower): the item group and its MLP.
        cfg (MindConfig): the section's numbers (towers' MLPs, capsule, output_dim, simi_pow, similarity,
            temperature, negatives).
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``sum`` / ``mean`` per pooled key.
        device (torch.device | None): parameter device.

    Example::

        model = build_model(spec, cfg.model)      # B = 2; max_k 8, output_dim 32, cosine
        interests, mask = model.user_interests(batch.dense, batch.sparse)   # (2, 8, 32), (2, 8)
        model.item_embedding(batch.dense, batch.sparse).shape               # (2, 32)
        top_k_items(interests, items, 50, mask=mask)                        # (2, 50): max over real interests
    """

    def __init__(
        self,
        tables: list[TableSpec],
        user: DeepTower,
        history_keys: tuple[str, ...],
        item: DeepTower,
        cfg: MindConfig,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        check_similarity(cfg.similarity, cfg.temperature)
        check_tower_keys(user)
        check_tower_keys(item)
        pooling = pooling or {}
        ut = cfg.user_tower

        def group(keys: tuple[str, ...], seq: tuple[str, ...]) -> EmbeddingGroup:
            return EmbeddingGroup(
                tables, list(keys), list(seq), {k: pooling[k] for k in keys if k in pooling}, device=device
            )

        self.user_embeddings = group(user.sparse_keys, history_keys)
        self.item_embeddings = group(item.sparse_keys, ())
        dims = {k: self.user_embeddings.embedding_dim(k) for k in (*user.sparse_keys, *history_keys)}
        cosine = cfg.similarity == "cosine"
        self.user_tower = MindUserTower(
            user,
            history_keys,
            dims,
            mlp_spec(ut.user_mlp),
            None if ut.hist_seq_mlp is None else mlp_spec(ut.hist_seq_mlp),
            ut.capsule,
            mlp_spec(ut.concat_mlp),
            ut.concat_mlp.bias,
            cfg.output_dim,
            cosine,
            device,
        )
        item_dims = {k: self.item_embeddings.embedding_dim(k) for k in item.sparse_keys}
        self.item_tower = DssmTower(item, item_dims, cfg.output_dim, cosine, device)
        if self.user_tower.out_features != self.item_tower.out_features:
            raise ValueError(
                f"MIND's interests end at width {self.user_tower.out_features} and its items at "
                f"{self.item_tower.out_features}: give output_dim, or concat and item MLPs of the same last width"
            )
        self.similarity = cfg.similarity
        self.simi_pow = float(cfg.simi_pow)
        self.temperature = float(cfg.temperature)
        self.in_batch_negative = cfg.in_batch_negative
        self.log_q_correction = cfg.log_q_correction
        self.dense_in_features = dense_in_features
        self.user_group, self.item_group = user.name, item.name
        self.history_keys = history_keys

    @property
    def embedding_dim(self) -> int:
        """``D``, the width of an interest and of an item."""
        return self.item_tower.out_features

    @property
    def max_interests(self) -> int:
        """``K``, the most interests a user has."""
        return self.user_tower.capsule.max_k

    def user_interests(
        self, dense: torch.Tensor, sparse: KeyedJaggedTensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, K, D)`` every row's interests (zeros where masked) and their ``(B, K)`` bool mask."""
        lookup = self.user_embeddings(sparse)
        # The sub-features of one history share lengths: item i of every sub-feature is one item.
        values = torch.cat([lookup.values[k] for k in self.history_keys], dim=1)
        offsets = lookup.offsets[self.history_keys[0]]
        return self.user_tower(dense, lookup.pooled, values, offsets)

    def item_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        """``(N, D)`` the item tower's output of every row."""
        return self.item_tower(dense, self.item_embeddings(sparse))

    def attend(self, interests: torch.Tensor, mask: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """``(B, D)`` training's user vector: :func:`label_aware_attention` with ``simi_pow``."""
        return label_aware_attention(interests, mask, item, self.simi_pow)

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        """``(B,)`` each row's label-aware user vector against its own item, over the temperature."""
        interests, mask = self.user_interests(dense, sparse)
        item = self.item_embedding(dense, sparse)
        return (self.attend(interests, mask, item) * item).sum(dim=1) / self.temperature

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)


def build(spec: FeatureSpec, cfg: MindConfig, device: torch.device | None = None) -> MIND:
    """MIND from the spec's user and item groups (``deep``) and history group (``sequence``).

    Raises:
        ValueError: a history group with query features or a float per item (not built for MIND), a tower
            over a group of the wrong type.
    """
    # The user group's keys only: MIND's user MLP is its own (a Linear last), so no tower MLP is read.
    (user, item), _ = tower_specs(spec, [InputTowerConfig(group=cfg.user_tower.group), cfg.item_tower], [])
    hist = spec.group(cfg.user_tower.history_group)
    if hist.query or hist.dense:
        raise ValueError(
            f"mind: history group {hist.name!r} lists query features {hist.query + hist.dense}; it holds the "
            "click history's sub-features only (TorchEasyRec's history_input)"
        )
    floats = [h for h in hist.history if h in set(spec.item_float_keys())]
    if floats:
        raise ValueError(f"mind: history sub-features {floats} are a float per item; MIND embeds ids only")
    return MIND(
        spec.tables(),
        user,
        tuple(hist.history),
        item,
        cfg,
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
