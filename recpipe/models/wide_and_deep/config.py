"""WideAndDeep's config section (TorchEasyRec's ``wide_and_deep``): the wide group's first-order term plus a
deep MLP over the deep group (:mod:`recpipe.models.wide_and_deep.model`; DeepFM adds an FM term)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, check_group_refs


class WideAndDeepConfig(ModelSection):
    """``model:`` of a WideAndDeep config.

    Args:
        deep (MlpConfig): the MLP over the deep group (its pooled embeddings, then its dense features).
        final (MlpConfig | None): an MLP over ``concat(y_wide, y_deep)``; None (TorchEasyRec's default):
            ``logit = y_wide + Linear(y_deep)``.
        wide_group (str): a ``wide`` feature group (TorchEasyRec reads the group named ``wide``).
        deep_group (str): a ``deep`` feature group (TorchEasyRec: ``deep``).

    Example::

        feature_groups:
          - {name: wide, type: wide, features: [user_id, adgroup_id, pid]}      # wide tables of dim 4
          - {name: deep, type: deep, features: [user_id, adgroup_id, pid, price]}
        model:
          type: wide_and_deep
          deep: {hidden_units: [512, 256, 128]}

        # KJT of B = 2 rows, keys × batch: user_id [[7], [3]] ... user_id__wide [[7], [3]] (the same ids)
        # wide: 3 × (B, 4) summed -> (B, 1); deep: (B, 3·16 + 1) -> 512-256-128 -> Linear -> (B,) logits
    """

    type: Literal["wide_and_deep"]
    deep: MlpConfig
    final: MlpConfig | None = None
    wide_group: str = "wide"
    deep_group: str = "deep"

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``wide_group`` and ``deep_group`` must be defined groups of types ``wide`` and ``deep``."""
        check_group_refs([self.wide_group, self.deep_group], groups)
        check_group_types([(self.wide_group, "wide"), (self.deep_group, "deep")], groups)


def check_group_types(wanted: list[tuple[str, str]], groups: Sequence[FeatureGroupConfig]) -> None:
    """Raise ``ValueError`` for each ``(group, type)`` of ``wanted`` whose group has another type."""
    types = {g.name: g.type for g in groups}
    bad = [f"{name!r} is {types[name]}, not {t}" for name, t in wanted if types[name] != t]
    if bad:
        raise ValueError(f"model feature groups of the wrong type: {'; '.join(bad)}")
