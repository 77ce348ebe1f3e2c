"""DeepFM's config section (TorchEasyRec's ``deepfm``): the wide group's first-order term, a factorization
machine's second-order term over the FM group's embeddings and a deep MLP over the deep group
(:mod:`recpipe.models.deepfm.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, check_group_refs
from recpipe.models.wide_and_deep.config import check_group_types


class DeepFMConfig(ModelSection):
    """``model:`` of a DeepFM config.

    Args:
        deep (MlpConfig): the MLP over the deep group.
        final (MlpConfig | None): an MLP over ``concat(y_wide, y_fm, y_deep)``; None (TorchEasyRec's
            default): ``logit = y_wide + Σ y_fm + Linear(y_deep)``.
        wide_group (str): a ``wide`` group (TorchEasyRec: ``wide``).
        deep_group (str): a ``deep`` group (TorchEasyRec: ``deep``).
        fm_group (str | None): a ``deep`` group of sparse features of one dim for the FM term; None: the
            deep group (TorchEasyRec uses group ``fm`` when there is one, else ``deep``).

    Example::

        feature_groups:
          - {name: wide, type: wide, features: [cat_0, cat_1, cat_2]}
          - {name: fm, type: deep, features: [cat_0, cat_1, cat_2]}
          - {name: deep, type: deep, features: [int_0, cat_0, cat_1, cat_2]}
        model:
          type: deepfm
          deep: {hidden_units: [512, 256, 128]}
          final: {hidden_units: [64]}
          fm_group: fm

        # B = 2: wide (B, 3·4) summed -> (B, 1); fm (B, 3, 16) -> (B, 16); deep (B, 49) -> (B, 128)
        # final: concat (B, 145) -> 64 -> Linear -> (B,) logits
    """

    type: Literal["deepfm"]
    deep: MlpConfig
    final: MlpConfig | None = None
    wide_group: str = "wide"
    deep_group: str = "deep"
    fm_group: str | None = None

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """The wide, deep and FM groups must be defined, of types ``wide``, ``deep`` and ``deep``."""
        fm = self.fm_group or self.deep_group
        check_group_refs([self.wide_group, self.deep_group, fm], groups)
        check_group_types([(self.wide_group, "wide"), (self.deep_group, "deep"), (fm, "deep")], groups)
