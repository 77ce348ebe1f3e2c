"""xDeepFM (Lian et al. 2018; TorchEasyRec's ``tzrec/models/xdeepfm.py``): a compressed interaction network
over the wide group's per-feature tables and a deep MLP over the deep group, mixed by a final MLP. The dense
arch lives in :mod:`recpipe.models.xdeepfm.dense` (plain torch).

As in TorchEasyRec the CIN reads the WIDE group's own tables (``<feature>__wide``, of the group's
``embedding_dim``), not the deep group's embeddings; ``wide_init_fn`` is not offered (the wide tables take
recpipe's default table initialization)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.embedding import pooled_group
from recpipe.models.blocks.group_input import GroupColumns, group_columns
from recpipe.models.blocks.mlp import MlpSpec, mlp_spec
from recpipe.models.xdeepfm.config import XDeepFMConfig
from recpipe.models.xdeepfm.dense import XDeepFMDense


class XDeepFM(SplitModel):
    """xDeepFM over a wide and a deep group.

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``, wide tables included).
        wide_keys (list[str]): the wide group's ``<feature>__wide`` keys.
        deep (GroupColumns): the deep group's keys and dense columns.
        cin_layer_sizes (list[int]): the CIN's layers.
        deep_mlp (MlpSpec): the deep MLP.
        final (MlpSpec): the final MLP.
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # Criteo, B = 2: C1..C26 (dim 16) and their wide keys C1__wide.. (dim 16), 13 dense floats
        #   C1  [7]  [3]      C1__wide  [7]  [3]   (the same ids)
        model = build_model(spec, cfg.model)             # type: xdeepfm
        model.dense_arch(torch.randn(2, 13), model.sparse_arch(kjt)).shape  # (2,)
    """

    def __init__(
        self,
        tables: list[TableSpec],
        wide_keys: list[str],
        deep: GroupColumns,
        cin_layer_sizes: list[int],
        deep_mlp: MlpSpec,
        final: MlpSpec,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        keys = list(dict.fromkeys([*wide_keys, *deep.keys]))
        embeddings, dims = pooled_group(tables, keys, pooling, device)
        dense = XDeepFMDense(
            wide_keys, deep, dims, dense_in_features, cin_layer_sizes, deep_mlp, final, device=device
        )
        super().__init__(embeddings, dense, dense_in_features)


def build(spec: FeatureSpec, cfg: XDeepFMConfig, device: torch.device | None = None) -> XDeepFM:
    """xDeepFM over ``cfg.wide_group`` and ``cfg.deep_group``."""
    return XDeepFM(
        spec.tables(),
        list(spec.group(cfg.wide_group).sparse),
        group_columns(spec, cfg.deep_group, "xdeepfm"),
        list(cfg.cin_layer_sizes),
        mlp_spec(cfg.deep),
        mlp_spec(cfg.final),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
