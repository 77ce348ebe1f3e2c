"""The toy's config section: ``model: {type: toy, group: <deep group>}`` (imports only ``recpipe.config.*``,
as an in-tree model's ``config.py`` does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ModelSection, check_group_refs


class ToyConfig(ModelSection):
    """``model:`` of a toy config.

    Args:
        group (str): the deep feature group whose sparse features are pooled.
    """

    type: Literal["toy"]
    group: str = "wide"

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        check_group_refs([self.group], groups)
