"""WuKong's config section (TorchEasyRec's ``wukong``: ``tzrec/models/wukong.py``), the stack of
factorization-machine and linear-compression blocks over one group's embeddings
(:mod:`recpipe.models.wukong.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ConfigSection, MlpConfig, ModelSection, check_group_refs


class WukongLayerConfig(ConfigSection):
    """One WuKong layer (TorchEasyRec's ``WuKongLayer`` message, tzrec/protos/module.proto).

    Args:
        lcb_feature_num (int): the linear compression block's output features.
        fmb_feature_num (int): the factorization machine block's output features.
        compressed_feature_num (int): the optimized FM's compressed features (TorchEasyRec's default 16).
        feature_num_mlp (MlpConfig): the FM block's MLP over its ``F · compressed_feature_num`` interactions.
    """

    lcb_feature_num: int = Field(ge=1)
    fmb_feature_num: int = Field(ge=1)
    compressed_feature_num: int = Field(16, ge=1)
    feature_num_mlp: MlpConfig


class WukongConfig(ModelSection):
    """``model:`` of a WuKong config.

    Args:
        wukong_layers (list[WukongLayerConfig]): the stack, in order.
        final (MlpConfig): the MLP over the last layer's ``(B, F_L · D)``; a ``Linear(·, 1)`` follows.
        dense_mlp (MlpConfig | None): an MLP over ``Batch.dense`` ending at the embedding dim ``D``, its output
            the first feature of the stack (TorchEasyRec's ``dense_mlp`` over group ``dense``); None: the
            model reads no dense feature.
        sparse_group (str): the group of sparse features, all of one embedding dim (TorchEasyRec: the only
            group, else ``sparse``).

    Example::

        model:
          type: wukong
          dense_mlp: {hidden_units: [512, 256, 16]}
          wukong_layers:
            - {lcb_feature_num: 16, fmb_feature_num: 16, compressed_feature_num: 24,
               feature_num_mlp: {hidden_units: [512]}}
          final: {hidden_units: [512, 64]}
          sparse_group: sparse

        # B = 2, 26 ids of dim 16 and 13 floats: (B, 1 + 26, 16) -> layer -> (B, 32, 16) -> (B, 512) -> (B,)
    """

    type: Literal["wukong"]
    wukong_layers: list[WukongLayerConfig] = Field(min_length=1)
    final: MlpConfig
    dense_mlp: MlpConfig | None = None
    sparse_group: str = "sparse"

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``sparse_group`` must be a defined feature group."""
        check_group_refs([self.sparse_group], groups)
