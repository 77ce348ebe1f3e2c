"""WideAndDeep and DeepFM (TorchEasyRec's ``tzrec/models/wide_and_deep.py`` and ``deepfm.py``): a wide
first-order term, a deep MLP and, for DeepFM, a factorization machine's second-order term, added (or, with a
``final`` MLP, concatenated and mixed) into one logit. The dense arch lives in
:mod:`recpipe.models.wide_and_deep.dense` (plain torch); DeepFM's builder is :mod:`recpipe.models.deepfm.model`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.embedding import EmbeddingGroup, EmbeddingInit
from recpipe.models.blocks.mlp import MlpSpec, mlp_spec, optional_mlp_spec
from recpipe.models.wide_and_deep.config import WideAndDeepConfig
from recpipe.models.wide_and_deep.dense import WideDeepDense, WideDeepGroups

if TYPE_CHECKING:
    from recpipe.models.deepfm.config import DeepFMConfig


class WideDeep(SplitModel):
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
        keys = list(dict.fromkeys([*groups.wide_keys, *groups.deep_keys, *(groups.fm_keys or ())]))
        embeddings = EmbeddingGroup(tables, keys, [], pooling, device=device, init=embedding_init)
        dims = {k: embeddings.embedding_dim(k) for k in keys}
        dense = WideDeepDense(groups, deep, final, dims, dense_in_features, device=device)
        super().__init__(embeddings, dense, dense_in_features)


def build(spec: FeatureSpec, cfg: WideAndDeepConfig, device: torch.device | None = None) -> WideDeep:
    """WideAndDeep over the spec's ``wide_group`` and ``deep_group``."""
    return wide_deep(spec, cfg, None, device)


def wide_deep(
    spec: FeatureSpec,
    cfg: WideAndDeepConfig | DeepFMConfig,
    fm_group: str | None,
    device: torch.device | None = None,
) -> WideDeep:
    """:class:`WideDeep` over the spec's wide and deep groups, with an FM term over ``fm_group`` (DeepFM)
    or without one (``None``: WideAndDeep).

    Raises:
        ValueError: the FM group lists dense features (FM multiplies embeddings).
    """
    deep = spec.group(cfg.deep_group)
    dense_names = spec.dense_names()
    fm_keys = None
    if fm_group is not None:
        fm = spec.group(fm_group)
        if fm.dense:
            raise ValueError(
                f"FM group {fm_group!r} lists dense features {fm.dense}; FM multiplies embeddings"
            )
        fm_keys = tuple(fm.sparse)
    groups = WideDeepGroups(
        wide_keys=tuple(spec.group(cfg.wide_group).sparse),
        deep_keys=tuple(deep.sparse),
        dense_columns=tuple(dense_names.index(n) for n in deep.dense),
        fm_keys=fm_keys,
    )
    return WideDeep(
        spec.tables(),
        groups,
        mlp_spec(cfg.deep),
        optional_mlp_spec(cfg.final),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
