"""MultiTowerDIN's dense arch in plain torch: deep-tower MLPs, DIN attention over jagged histories, the
final MLP and the logit. Imports neither torchrec nor fbgemm, so it runs (and exports) where they are
not installed (``benchmarks/gpu_check.py`` on a bare CUDA machine)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from recpipe.models.blocks.din import DinAttention, MeanPoolSequence, PaddedDinAttention
from recpipe.models.blocks.mlp import MLP, MlpSpec
from recpipe.models.blocks.variational_dropout import VariationalDropout

ATTENTIONS = ("jagged", "padded", "mean_pool")


@dataclass(frozen=True)
class DeepTower:
    """A tower over one ``deep`` feature group: its pooled embeddings and dense columns, concatenated.

    Args:
        name (str): the feature group name.
        sparse_keys (tuple[str, ...]): pooled KJT keys, concatenated in this order.
        dense_columns (tuple[int, ...]): columns of ``Batch.dense`` appended after them.
        mlp (MlpSpec | None): the tower MLP (e.g. 512-256-128); ``None``: the concatenation as it is (a
            multi-task model's experts read the group's embeddings, as TorchEasyRec's MMoE does).
        dense_widths (tuple[int, ...]): how many of ``dense_columns`` each dense feature has, in order (an
            embedded numeric feature has its embedding's); ``()``: one each. Variational dropout drops a
            feature's columns together.
    """

    name: str
    sparse_keys: tuple[str, ...]
    mlp: MlpSpec | None
    dense_columns: tuple[int, ...] = ()
    dense_widths: tuple[int, ...] = ()

    def feature_widths(self, key_dims: dict[str, int]) -> list[int]:
        """The columns of each of the tower's features in its input: its keys', then its dense features'."""
        dense = list(self.dense_widths) or [1] * len(self.dense_columns)
        if sum(dense) != len(self.dense_columns):
            raise ValueError(
                f"tower {self.name!r}: dense_widths {dense} do not add up to its {len(self.dense_columns)} columns"
            )
        return [key_dims[k] for k in self.sparse_keys] + dense


@dataclass(frozen=True)
class DinTower:
    """A tower over one ``sequence`` feature group: DIN attention of the target over the history.

    Args:
        name (str): the feature group name; its dense-arch inputs are ``<name>__query``,
            ``<name>__values`` and ``<name>__offsets``.
        query_keys (tuple[str, ...]): target keys (e.g. ``adgroup_id, cate_id, brand``), pooled and concatenated.
        history_keys (tuple[str, ...]): history sub-feature keys, paired with ``query_keys`` in order,
            concatenated per item.
        attn_mlp (MlpSpec): attention MLP widths and activation (no batch norm / dropout).
        attention (str): ``"jagged"`` (real items only), ``"padded"`` (reference) or ``"mean_pool"`` (ablation).
        max_length (int): the sequence's maximum length (the padded reference pads to it).
        weighting (str): how attention scores become weights, ``"softmax"`` or ``"sigmoid"`` (see
            :class:`~recpipe.models.blocks.din.DinAttention`).
        dense_columns (tuple[int, ...]): columns of ``Batch.dense`` in the query, one value each
            (TorchEasyRec's SequenceEmbeddingGroupImpl: a dense query feature contributes its value).
        dense_positions (tuple[int, ...]): where each of ``dense_columns`` goes among the query's parts (the
            query keys and the dense columns, in the group's order): ``query_keys (id_2, id_3)``,
            ``dense_positions (1,)`` makes the query ``id_2 | dense | id_3``.
    """

    name: str
    query_keys: tuple[str, ...]
    history_keys: tuple[str, ...]
    attn_mlp: MlpSpec
    attention: str = "jagged"
    max_length: int = 100
    weighting: str = "softmax"
    dense_columns: tuple[int, ...] = ()
    dense_positions: tuple[int, ...] = ()


def query_permutation(tower: DinTower, key_dims: dict[str, int]) -> list[int]:
    """Columns of ``[pooled query | Batch.dense[:, dense_columns]]`` in the group's query order; ``[]`` when
    that is already the order (no dense column, or all of them last in order).

    Example::

        # query_keys (a, b) of width 2, dense_columns (5,), dense_positions (1,): a | dense | b
        query_permutation(tower, {"a": 2, "b": 2})  # [0, 1, 4, 2, 3]
    """
    n_parts = len(tower.query_keys) + len(tower.dense_columns)
    positions = list(tower.dense_positions)
    if (
        len(positions) != len(tower.dense_columns)
        or sorted(set(positions)) != sorted(positions)
        or any(not 0 <= p < n_parts for p in positions)
    ):
        raise ValueError(
            f"DIN tower {tower.name!r}: dense_positions {positions} must place each of the dense columns "
            f"{list(tower.dense_columns)} at a distinct position in [0, {n_parts})"
        )
    pooled = sum(key_dims[k] for k in tower.query_keys)
    perm: list[int] = []
    keys = iter(tower.query_keys)
    start = 0
    for i in range(n_parts):
        if i in positions:
            perm.append(pooled + positions.index(i))
        else:
            width = key_dims[next(keys)]
            perm += range(start, start + width)
            start += width
    return [] if perm == list(range(len(perm))) else perm


class MultiTowerDinDense(nn.Module):
    """MultiTowerDIN's dense arch: tower MLPs, DIN attention, final MLP, logit (plain torch ops only).

    Args:
        towers (list[DeepTower]): deep towers.
        din_towers (list[DinTower]): DIN towers.
        final (MlpSpec | None): the MLP over all tower outputs (a Linear to one logit follows).
        key_dims (dict[str, int]): embedding width of every key the towers read.
        dense_in_features (int): width of ``Batch.dense``.
        device (torch.device | None): parameter device.
        head (Callable[[int], nn.Module] | None): instead of ``final`` and the logit, a multi-task head
            built for the towers' total width (:mod:`recpipe.models.blocks.multitask`): logits ``(B, T)``.
        variational_dropout (float | None): the regularization lambda of a variational dropout
            (:class:`~recpipe.models.blocks.variational_dropout.VariationalDropout`) over each deep tower's input
            features (a tower of one feature has none, as TorchEasyRec skips a group of one); with a head, the
            model's features are one group (TorchEasyRec's multi-task models read one DEEP group, its sequence
            encoders' outputs appended), so each DIN tower's output is one more feature. ``None``: no dropout.

    Example::

        dense_arch = model.dense_module()
        dense_arch(torch.zeros(2, 0), model.sparse_arch(kjt)).shape  # (2,)
    """

    def __init__(
        self,
        towers: list[DeepTower],
        din_towers: list[DinTower],
        final: MlpSpec | None,
        key_dims: dict[str, int],
        dense_in_features: int = 0,
        device: torch.device | None = None,
        head: Callable[[int], nn.Module] | None = None,
        variational_dropout: float | None = None,
    ) -> None:
        super().__init__()
        if (final is None) == (head is None):
            raise ValueError(
                "MultiTowerDIN's dense arch takes a final MLP or a multi-task head (one of them)"
            )
        if not towers and not din_towers:
            raise ValueError("MultiTowerDIN needs at least one tower")
        names = [t.name for t in towers] + [t.name for t in din_towers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate tower names {dup}")
        self.deep_keys = list(dict.fromkeys(k for t in towers for k in t.sparse_keys))
        for tower in din_towers:
            if tower.attention not in ATTENTIONS:
                raise ValueError(f"DIN tower {tower.name!r}: attention must be one of {list(ATTENTIONS)}")
            if not tower.query_keys or not tower.history_keys:
                raise ValueError(
                    f"DIN tower {tower.name!r} needs query keys and history keys, "
                    f"got {list(tower.query_keys)} and {list(tower.history_keys)}"
                )
            if tower.attn_mlp.batch_norm or tower.attn_mlp.dropout:
                raise ValueError(
                    f"DIN tower {tower.name!r}: the attention MLP takes no batch norm or dropout"
                )
            clash = [f"{tower.name}__{s}" for s in ("query", "values", "offsets")]
            clash = [c for c in clash if c in self.deep_keys]
            if clash:
                raise ValueError(f"DIN tower {tower.name!r}: input names {clash} clash with feature keys")
        for tower in [*towers, *din_towers]:
            bad = [c for c in tower.dense_columns if not 0 <= c < dense_in_features]
            if bad:
                raise ValueError(
                    f"tower {tower.name!r}: dense columns {bad} outside [0, {dense_in_features})"
                )
        self.towers_spec = list(towers)
        self.din_towers_spec = list(din_towers)
        self.dense_in_features = dense_in_features

        self.towers = nn.ModuleDict()
        width = 0
        for tower in towers:
            in_features = sum(key_dims[k] for k in tower.sparse_keys) + len(tower.dense_columns)
            if tower.mlp is None:
                self.towers[tower.name] = nn.Identity()
                width += in_features
            else:
                self.towers[tower.name] = MLP.from_spec(in_features, tower.mlp, device=device)
                width += self.towers[tower.name].out_features
        self.din = nn.ModuleDict()
        # The query columns in the group's order (pooled keys and dense columns interleaved), [] if in order.
        self.query_perm = {t.name: query_permutation(t, key_dims) for t in din_towers}
        for tower in din_towers:
            q_dim = sum(key_dims[k] for k in tower.query_keys) + len(tower.dense_columns)
            s_dim = sum(key_dims[k] for k in tower.history_keys)
            if q_dim > s_dim:
                raise ValueError(
                    f"DIN tower {tower.name!r}: query width {q_dim} exceeds history width {s_dim}"
                )
            attention = _attention(tower, s_dim, device)
            # TorchEasyRec's DINEncoder zero-pads a narrower query to the item width (tzrec/modules/sequence.py).
            self.din[tower.name] = attention if q_dim == s_dim else PadQuery(attention, s_dim - q_dim)
            width += s_dim
        self.head = head(width) if head is not None else None
        self.feature_dropout = nn.ModuleDict()
        self.din_dropout: VariationalDropout | None = None
        if variational_dropout is not None:
            self._add_variational_dropout(variational_dropout, key_dims, head is not None, device)
        if final is not None:
            self.final = MLP.from_spec(width, final, device=device)
            self.logit = nn.Linear(self.final.out_features, 1, device=device)

    def _add_variational_dropout(
        self, lam: float, key_dims: dict[str, int], one_group: bool, device: torch.device | None
    ) -> None:
        widths = {t.name: t.feature_widths(key_dims) for t in self.towers_spec}
        din = [self.din[t.name].out_features for t in self.din_towers_spec]
        total = sum(len(w) for w in widths.values()) + len(din)
        for name, w in widths.items():
            if len(w) > 1 or (one_group and w and total > 1):
                self.feature_dropout[name] = VariationalDropout(w, lam, device)
        if one_group and din and total > 1:
            self.din_dropout = VariationalDropout(din, lam, device)

    def regularization(self, batch_size: int) -> torch.Tensor | None:
        """The variational dropout's loss term for a batch of ``batch_size`` rows (None without one)."""
        sites = [
            *self.feature_dropout.values(),
            *([self.din_dropout] if self.din_dropout is not None else []),
        ]
        if not sites:
            return None
        return torch.stack([site.penalty(batch_size) for site in sites]).sum()

    def input_names(self) -> list[str]:
        names = ["dense", *self.deep_keys]
        for tower in self.din_towers_spec:
            names += [f"{tower.name}__query", f"{tower.name}__values", f"{tower.name}__offsets"]
        return names

    def shared_history_input_names(self) -> list[str]:
        """:meth:`forward_shared`'s inputs: :meth:`input_names` without the DIN towers' ``__offsets`` (one history
        each, no rows to delimit); ``[]`` without a DIN tower (no history to share)."""
        if not self.din_towers_spec:
            return []
        return [n for n in self.input_names() if not n.endswith("__offsets")]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        din_outs = [
            self.din[t.name](
                self._query(t, dense, embeddings),
                embeddings[f"{t.name}__values"],
                embeddings[f"{t.name}__offsets"],
            )
            for t in self.din_towers_spec
        ]
        return self._combine(self._deep_outs(dense, embeddings), din_outs)

    def forward_shared(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        """:meth:`forward` of B rows that share ONE history per DIN tower (one user × B candidates):
        ``<name>__values`` is that history's ``(T, D)`` items and there is no ``<name>__offsets``; the same logits
        as :meth:`forward` with each history tiled B times, the attention computed once per item where it can be
        (:mod:`~recpipe.models.blocks.din_shared`). For inference (no dropout statistics differ by row).
        """
        din_outs = [
            self.din[t.name].forward_shared(
                self._query(t, dense, embeddings), embeddings[f"{t.name}__values"]
            )
            for t in self.din_towers_spec
        ]
        return self._combine(self._deep_outs(dense, embeddings), din_outs)

    def _deep_outs(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        outs: list[torch.Tensor] = []
        for tower in self.towers_spec:
            parts = [embeddings[k] for k in tower.sparse_keys]
            if tower.dense_columns:
                parts.append(dense[:, list(tower.dense_columns)])
            x = torch.cat(parts, dim=1)
            if tower.name in self.feature_dropout:
                x = self.feature_dropout[tower.name](x)
            outs.append(self.towers[tower.name](x))
        return outs

    def _query(
        self, tower: DinTower, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        query = embeddings[f"{tower.name}__query"]
        if tower.dense_columns:
            query = torch.cat([query, dense[:, list(tower.dense_columns)]], dim=1)
            perm = self.query_perm[tower.name]
            if perm:
                query = query[:, perm]
        return query

    def _combine(self, outs: list[torch.Tensor], din_outs: list[torch.Tensor]) -> torch.Tensor:
        if self.din_dropout is not None:
            din_outs = [self.din_dropout(torch.cat(din_outs, dim=1))]
        outs = outs + din_outs
        if self.head is not None:
            return self.head(torch.cat(outs, dim=1))
        return self.logit(self.final(torch.cat(outs, dim=1))).squeeze(-1)


class PadQuery(nn.Module):
    """An attention whose query is zero-padded on the right by ``pad`` columns to the history item width (the
    items carry sub-features the target has no counterpart of, e.g. the bucketized time since each click).

    Example::

        PadQuery(DinAttention(20, [8]), 4)(torch.randn(3, 16), torch.randn(5, 20), offsets).shape  # (3, 20)
    """

    def __init__(self, attention: nn.Module, pad: int) -> None:
        super().__init__()
        self.attention = attention
        self.pad = pad

    @property
    def out_features(self) -> int:
        return self.attention.out_features

    def forward(self, query: torch.Tensor, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.attention(self._padded(query), values, offsets)

    def forward_shared(self, query: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return self.attention.forward_shared(self._padded(query), values)

    def _padded(self, query: torch.Tensor) -> torch.Tensor:
        return torch.cat([query, query.new_zeros(query.shape[0], self.pad)], dim=1)


def _attention(tower: DinTower, dim: int, device: torch.device | None) -> nn.Module:
    hidden = list(tower.attn_mlp.hidden_units)
    act = tower.attn_mlp.activation
    if tower.attention == "jagged":
        return DinAttention(dim, hidden, act, weighting=tower.weighting, device=device)
    if tower.attention == "padded":
        return PaddedDinAttention(
            dim, hidden, act, max_length=tower.max_length, weighting=tower.weighting, device=device
        )
    return MeanPoolSequence(dim)
