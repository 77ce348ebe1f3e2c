"""DCNv1's config section (TorchEasyRec's ``dcn_v1``, tzrec/models/dcn.py): a cross network and a deep MLP over
the one group, a final MLP over both (:mod:`recpipe.models.dcn_v1.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, Strict
from recpipe.models.dcn_v2.config import check_one_deep_group


class CrossConfig(Strict):
    """DCN's cross network (TorchEasyRec's ``Cross`` message): ``num_layers`` layers (its ``cross_num``, 3)."""

    num_layers: int = Field(3, ge=1)


class DcnV1Config(ModelSection):
    """``model:`` of a DCNv1 config.

    Args:
        group (str): the one deep group it reads (TorchEasyRec: the model's first group).
        cross (CrossConfig): the cross network ``x_{l+1} = x_0 · (x_l·w_l) + b_l + x_l``.
        deep (MlpConfig): the deep MLP over the group.
        final (MlpConfig): the MLP over ``concat(cross, deep)``; a Linear without bias gives the logit.

    Example::

        model:
          type: dcn_v1
          group: all
          cross: {num_layers: 3}
          deep: {hidden_units: [512, 256, 128]}
          final: {hidden_units: [64]}

        # B = 2: x0 (2, 429) -> cross (2, 429); deep (2, 128); final (2, 557) -> 64 -> logit (2,)
    """

    type: Literal["dcn_v1"]
    group: str = "all"
    cross: CrossConfig = CrossConfig()
    deep: MlpConfig
    final: MlpConfig

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``group`` must be a defined deep group."""
        check_one_deep_group(self.group, groups)
