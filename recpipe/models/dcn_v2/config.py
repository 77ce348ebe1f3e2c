"""DCNv2's config section (TorchEasyRec's ``dcn_v2``, tzrec/models/dcn_v2.py): an optional backbone MLP, a
low-rank cross network over its output (or the group itself), an optional deep MLP over the group, a final
MLP over their concatenation (:mod:`recpipe.models.dcn_v2.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, Strict, check_group_refs


class CrossV2Config(Strict):
    """DCNv2's cross network (TorchEasyRec's ``CrossV2`` message): ``num_layers`` layers of rank ``low_rank``."""

    num_layers: int = Field(3, ge=1)
    low_rank: int = Field(32, ge=1)


class DcnV2Config(ModelSection):
    """``model:`` of a DCNv2 config.

    Args:
        group (str): the one deep group it reads (TorchEasyRec: the model's first group).
        cross (CrossV2Config): the cross network (TorchEasyRec's defaults: 3 layers, rank 32).
        backbone (MlpConfig | None): an MLP before the cross network.
        deep (MlpConfig | None): a deep MLP over the group, beside the cross network.
        final (MlpConfig): the MLP over ``concat(cross, deep)``; a Linear without bias gives the logit.

    Example::

        feature_groups:
          - {name: all, type: deep, features: [I1, ..., I13, C1, ..., C26]}   # 13 + 26·16 = 429 wide
        model:
          type: dcn_v2
          group: all
          cross: {num_layers: 3, low_rank: 32}
          deep: {hidden_units: [512, 256, 128]}
          final: {hidden_units: [64]}

        # B = 2: x0 (2, 429) -> cross (2, 429); deep (2, 128); final (2, 557) -> 64 -> logit (2,)
    """

    type: Literal["dcn_v2"]
    group: str = "all"
    cross: CrossV2Config = CrossV2Config()
    backbone: MlpConfig | None = None
    deep: MlpConfig | None = None
    final: MlpConfig

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``group`` must be a defined deep group."""
        check_one_deep_group(self.group, groups)


def check_one_deep_group(group: str, groups: Sequence[FeatureGroupConfig]) -> None:
    """Raise ``ValueError`` unless ``group`` is a defined group of type ``deep``."""
    check_group_refs([group], groups)
    kind = next(g.type for g in groups if g.name == group)
    if kind != "deep":
        raise ValueError(f"model feature group {group!r} is {kind}, not deep")
