"""MaskNet (Wang et al. 2021; TorchEasyRec's ``tzrec/models/masknet.py``): instance-guided mask blocks over one
deep group. The dense arch lives in :mod:`recpipe.models.mask_net.dense` (plain torch).

Where it differs: TorchEasyRec's model requires a ``top_mlp`` (its logit Linear reads
``top_mlp.hidden_units[-1]``); here without one the logit reads the blocks' output."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.embedding import pooled_group
from recpipe.models.blocks.group_input import GroupColumns, GroupConcat, group_columns
from recpipe.models.blocks.masknet import MaskNetSpec
from recpipe.models.blocks.mlp import optional_mlp_spec
from recpipe.models.mask_net.config import MaskNetConfig
from recpipe.models.mask_net.dense import MaskNetDense


class MaskNet(SplitModel):
    """MaskNet over one deep group's pooled embeddings and dense columns.

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        columns (GroupColumns): the group's keys and dense columns.
        spec (MaskNetSpec): the mask blocks and the top MLP.
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # Criteo, B = 2: cat_0..cat_25 one id each (dim 16), 13 dense floats, group all_features
        #   cat_0  [7]  [3]
        model = build_model(spec, cfg.model)             # type: mask_net
        model.dense_arch(torch.randn(2, 13), model.sparse_arch(kjt)).shape  # (2,)
    """

    def __init__(
        self,
        tables: list[TableSpec],
        columns: GroupColumns,
        spec: MaskNetSpec,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        embeddings, dims = pooled_group(tables, columns.keys, pooling, device)
        super().__init__(
            embeddings,
            MaskNetDense(GroupConcat(columns, dims, dense_in_features), spec, device),
            dense_in_features,
        )


def build(spec: FeatureSpec, cfg: MaskNetConfig, device: torch.device | None = None) -> MaskNet:
    """MaskNet over ``cfg.group``."""
    block = cfg.mask_block
    blocks = MaskNetSpec(
        cfg.num_blocks,
        block.hidden_dim,
        block.reduction_ratio,
        block.aggregation_dim,
        optional_mlp_spec(cfg.top_mlp),
        cfg.parallel,
    )
    return MaskNet(
        spec.tables(),
        group_columns(spec, cfg.group, "mask_net"),
        blocks,
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
