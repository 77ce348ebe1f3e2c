"""WideAndDeep and DeepFM (TorchEasyRec's ``tzrec/models/wide_and_deep.py`` and ``deepfm.py``): a wide
first-order term, a deep MLP and, for DeepFM, a factorization machine's second-order term, added (or, with a
``final`` MLP, concatenated and mixed) into one logit."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.features.spec import TableSpec
from recpipe.models.embedding import EmbeddingGroup, EmbeddingInit
from recpipe.models.mlp import MLP, MlpSpec


class FactorizationMachine(nn.Module):
    """The second-order term of a factorization machine (TorchEasyRec's ``tzrec/modules/fm.py``):
    ``0.5 · ((Σ_i v_i)² − Σ_i v_i²)`` per embedding column, i.e. ``Σ_{i<j} v_i ⊙ v_j`` in ``O(F·D)``.

    Example::

        v = torch.randn(2, 26, 16)                 # (B, F, D): F embeddings of one dim
        FactorizationMachine()(v).shape            # (2, 16); .sum(1) is Σ_{i<j} <v_i, v_j>
    """

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        s = v.sum(dim=1)
        return 0.5 * (s * s - (v * v).sum(dim=1))


@dataclass(frozen=True)
class WideDeepGroups:
    """The KJT keys each part reads.

    Args:
        wide_keys (tuple[str, ...]): the wide group's ``<feature>__wide`` keys (small per-feature tables).
        deep_keys (tuple[str, ...]): the deep group's pooled keys, concatenated in this order.
        dense_columns (tuple[int, ...]): the deep group's columns of ``Batch.dense``, appended after them.
        fm_keys (tuple[str, ...] | None): DeepFM's FM group (all of one dim); None: WideAndDeep.
    """

    wide_keys: tuple[str, ...]
    deep_keys: tuple[str, ...]
    dense_columns: tuple[int, ...] = ()
    fm_keys: tuple[str, ...] | None = None


class WideDeep(nn.Module):
    """WideAndDeep, or DeepFM when ``groups.fm_keys`` is set.

    ``y_wide`` is the sum of every value of the wide group's embeddings (TorchEasyRec sums its
    ``(B, F·wide_embedding_dim)`` group output), ``y_deep = deep(concat(deep embeddings, dense))`` and, for
    DeepFM, ``y_fm = FM(fm embeddings)`` ``(B, D)``. Without ``final``: ``logit = y_wide + Σ y_fm +
    Linear(y_deep)``; with it: ``logit = Linear(final(concat(y_wide, y_fm, y_deep)))``.

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``, wide tables included).
        groups (WideDeepGroups): the keys of the wide, deep and FM parts.
        deep (MlpSpec): the deep MLP.
        final (MlpSpec | None): the MLP over the concatenated parts, or None to add them.
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        embedding_init (EmbeddingInit): table initialization.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # Criteo, B = 2: cat_0..cat_25 one id each (dim 16), wide keys cat_k__wide (dim 4), 13 dense
        #   cat_0        [7]     [3]          cat_0__wide  [7]     [3]      (the same ids)
        model = build_model(spec, cfg.model)             # type: deepfm
        emb = model.sparse_arch(kjt)                     # {"cat_0": (2, 16), ..., "cat_0__wide": (2, 4), ...}
        model.dense_arch(torch.randn(2, 13), emb).shape  # (2,)
        # wide: (2, 104) summed -> (2, 1); fm: (2, 26, 16) -> (2, 16); deep: (2, 429) -> 512-256-128
    """

    def __init__(
        self,
        tables: list[TableSpec],
        groups: WideDeepGroups,
        deep: MlpSpec,
        final: MlpSpec | None = None,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        embedding_init: EmbeddingInit = EmbeddingInit(),
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        keys = list(dict.fromkeys([*groups.wide_keys, *groups.deep_keys, *(groups.fm_keys or ())]))
        self.embeddings = EmbeddingGroup(tables, keys, [], pooling, device=device, init=embedding_init)
        dims = {k: self.embeddings.embedding_dim(k) for k in keys}
        self.dense = WideDeepDense(groups, deep, final, dims, dense_in_features, device=device)
        self.dense_in_features = dense_in_features

    def dense_input_names(self) -> list[str]:
        """Inputs of :meth:`dense_arch`, in order: ``dense`` ``(B, dense_in_features)``, then one
        ``(B, D)`` per key of the wide, deep and FM groups (each once)."""
        return self.dense.input_names()

    def dense_module(self) -> nn.Module:
        """The dense arch as a module ``(dense, embeddings) -> logits`` holding no embedding table."""
        return self.dense

    def sparse_arch(self, sparse: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        """Pooled embeddings ``{key: (B, D)}`` of every key the model reads."""
        return self.embeddings(sparse).pooled

    def dense_arch(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits ``(B,)`` from dense features and :meth:`sparse_arch` outputs (plain torch ops only)."""
        return self.dense(dense, embeddings)

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense_arch(dense, self.sparse_arch(sparse))

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)


class WideDeepDense(nn.Module):
    """The dense arch of :class:`WideDeep`: the wide sum, the deep MLP, the FM term and the logit.

    Args:
        groups (WideDeepGroups): the keys of each part.
        deep (MlpSpec): the deep MLP.
        final (MlpSpec | None): the MLP over ``concat(y_wide, y_fm, y_deep)``, or None to add the parts.
        key_dims (dict[str, int]): embedding width of every key.
        dense_in_features (int): width of ``Batch.dense``.
        device (torch.device | None): parameter device.

    Example::

        dense_arch = model.dense_module()
        dense_arch(torch.randn(2, 13), model.sparse_arch(kjt)).shape  # (2,)
    """

    def __init__(
        self,
        groups: WideDeepGroups,
        deep: MlpSpec,
        final: MlpSpec | None,
        key_dims: dict[str, int],
        dense_in_features: int = 0,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not groups.wide_keys:
            raise ValueError("the wide group has no sparse features")
        if not groups.deep_keys and not groups.dense_columns:
            raise ValueError("the deep group has no features")
        bad = [c for c in groups.dense_columns if not 0 <= c < dense_in_features]
        if bad:
            raise ValueError(f"deep group dense columns {bad} outside [0, {dense_in_features})")
        fm_dim = 0
        if groups.fm_keys is not None:
            fm_dims = {key_dims[k] for k in groups.fm_keys}
            if len(groups.fm_keys) < 2 or len(fm_dims) != 1:
                # TorchEasyRec: "embedding dimension of fm features must be same"
                raise ValueError(
                    f"the FM group needs at least two sparse features of one embedding dim, got "
                    f"{ {k: key_dims[k] for k in groups.fm_keys} }"
                )
            fm_dim = fm_dims.pop()
        self.groups = groups
        self.wide_keys = list(groups.wide_keys)
        self.deep_keys = list(groups.deep_keys)
        self.fm_keys = list(groups.fm_keys or ())
        self.dense_columns = list(groups.dense_columns)
        self.fm = FactorizationMachine() if groups.fm_keys is not None else None
        deep_in = sum(key_dims[k] for k in groups.deep_keys) + len(groups.dense_columns)
        self.deep = MLP.from_spec(deep_in, deep, device=device)
        width = self.deep.out_features
        self.final = None
        if final is not None:
            self.final = MLP.from_spec(1 + fm_dim + width, final, device=device)
            width = self.final.out_features
        self.logit = nn.Linear(width, 1, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *dict.fromkeys([*self.wide_keys, *self.deep_keys, *self.fm_keys])]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        y_wide = torch.cat([embeddings[k] for k in self.wide_keys], dim=1).sum(dim=1, keepdim=True)
        parts = [embeddings[k] for k in self.deep_keys]
        if self.dense_columns:
            parts.append(dense[:, self.dense_columns])
        y_deep = self.deep(torch.cat(parts, dim=1))
        if self.final is not None:
            mixed = [y_wide]
            if self.fm is not None:
                mixed.append(self.fm(torch.stack([embeddings[k] for k in self.fm_keys], dim=1)))
            mixed.append(y_deep)
            return self.logit(self.final(torch.cat(mixed, dim=1))).squeeze(-1)
        y = y_wide + self.logit(y_deep)
        if self.fm is not None:
            y = y + self.fm(torch.stack([embeddings[k] for k in self.fm_keys], dim=1)).sum(
                dim=1, keepdim=True
            )
        return y.squeeze(-1)
