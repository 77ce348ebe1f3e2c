"""xDeepFM's config section (TorchEasyRec's ``xdeepfm``, tzrec/models/xdeepfm.py): a compressed interaction
network over the wide group's embeddings, a deep MLP over the deep group, a final MLP over both
(:mod:`recpipe.models.xdeepfm.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, check_group_refs
from recpipe.models.wide_and_deep.config import check_group_types


class XDeepFMConfig(ModelSection):
    """``model:`` of an xDeepFM config.

    Args:
        cin_layer_sizes (list[int]): the maps of each CIN layer (``cin.cin_layer_size``).
        deep (MlpConfig): the MLP over the deep group.
        final (MlpConfig): the MLP over ``concat(cin, deep)``; a Linear (with bias) gives the logit.
        wide_group (str): a ``wide`` group whose ``<feature>__wide`` tables, all of one dim (the group's
            ``embedding_dim``: TorchEasyRec's ``wide_embedding_dim``, default 16 for xDeepFM), the CIN reads
            as ``(B, F, D)`` fields (TorchEasyRec: group ``wide``).
        deep_group (str): a ``deep`` group (TorchEasyRec: ``deep``).

    Example::

        feature_groups:
          - {name: wide, type: wide, embedding_dim: 16, features: [C1, ..., C26]}
          - {name: deep, type: deep, features: [I1, ..., I13, C1, ..., C26]}
        model:
          type: xdeepfm
          cin_layer_sizes: [64, 64, 64]
          deep: {hidden_units: [512, 256, 128]}
          final: {hidden_units: [64]}

        # B = 2: wide (2, 26, 16) -> CIN (2, 192); deep (2, 429) -> (2, 128); final (2, 320) -> 64 -> logit (2,)
    """

    type: Literal["xdeepfm"]
    cin_layer_sizes: list[int] = Field(min_length=1)
    deep: MlpConfig
    final: MlpConfig
    wide_group: str = "wide"
    deep_group: str = "deep"

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """The wide and deep groups must be defined, of types ``wide`` and ``deep``."""
        check_group_refs([self.wide_group, self.deep_group], groups)
        check_group_types([(self.wide_group, "wide"), (self.deep_group, "deep")], groups)
