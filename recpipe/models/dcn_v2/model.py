"""DCNv2 (Wang et al. 2021; TorchEasyRec's ``tzrec/models/dcn_v2.py``): the low-rank cross network of
:class:`~recpipe.models.blocks.cross.CrossNetV2` beside an optional deep MLP over one deep group. DCNv1's
builder (:mod:`recpipe.models.dcn_v1.model`) reuses the module with DCN's cross network."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.cross import CrossNetV2
from recpipe.models.blocks.embedding import pooled_group
from recpipe.models.blocks.group_input import GroupColumns, group_columns
from recpipe.models.blocks.mlp import MLP, MlpSpec, mlp_spec, optional_mlp_spec
from recpipe.models.dcn_v2.config import DcnV2Config
from recpipe.models.dcn_v2.dense import DcnDense


class DCN(SplitModel):
    """DCNv1 or DCNv2 over one deep group: the group's pooled embeddings and dense columns concatenated
    ``(B, D)``, crossed (``cross``, built by ``make_cross(width)``) and beside a deep MLP, mixed by the final
    MLP into one logit.

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        columns (GroupColumns): the group's keys and dense columns.
        make_cross (callable): ``width -> nn.Module`` with ``out_features``, the cross network.
        final (MlpSpec): the final MLP.
        backbone (MlpSpec | None): DCNv2's MLP before the cross network.
        deep (MlpSpec | None): the deep MLP (DCNv1's is required).
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # Criteo, B = 2: C1..C26 one id each (dim 16), 13 dense floats, group all
        #   C1  [7]  [3]
        model = build_model(spec, cfg.model)             # type: dcn_v2
        emb = model.sparse_arch(kjt)                     # {"C1": (2, 16), ..., "C26": (2, 16)}
        model.dense_arch(torch.randn(2, 13), emb).shape  # (2,): x0 (2, 429) -> cross, deep -> final -> logit
    """

    def __init__(
        self,
        tables: list[TableSpec],
        columns: GroupColumns,
        make_cross,
        final: MlpSpec,
        backbone: MlpSpec | None = None,
        deep: MlpSpec | None = None,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        embeddings, dims = pooled_group(tables, columns.keys, pooling, device)
        width = sum(dims.values()) + len(columns.dense_columns)
        bb = MLP.from_spec(width, backbone, device=device) if backbone is not None else None
        cross: nn.Module = make_cross(bb.out_features if bb is not None else width)
        dense = DcnDense(columns, dims, dense_in_features, cross, final, bb, deep, device=device)
        super().__init__(embeddings, dense, dense_in_features)


def build(spec: FeatureSpec, cfg: DcnV2Config, device: torch.device | None = None) -> DCN:
    """DCNv2 over ``cfg.group``: TorchEasyRec's ``CrossV2`` (``cfg.cross``), optional backbone and deep MLPs."""
    return DCN(
        spec.tables(),
        group_columns(spec, cfg.group, "dcn_v2"),
        lambda width: CrossNetV2(width, cfg.cross.num_layers, cfg.cross.low_rank, device=device),
        mlp_spec(cfg.final),
        backbone=optional_mlp_spec(cfg.backbone),
        deep=optional_mlp_spec(cfg.deep),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
