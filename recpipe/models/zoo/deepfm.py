"""DeepFM's declaration (TorchEasyRec's ``deepfm``): the wide group's first-order term, a factorization
machine's second-order term over the FM group's embeddings and a deep MLP over the deep group. The
``nn.Module`` is :class:`recpipe.models.wide_deep.WideDeep` with an FM term."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, check_group_refs
from recpipe.models.zoo.wide_and_deep import check_group_types, wide_deep_groups

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.wide_deep import WideDeep


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


Config = DeepFMConfig


def build(spec: FeatureSpec, cfg: DeepFMConfig, device: torch.device | None = None) -> WideDeep:
    """DeepFM over the spec's wide, deep and FM groups.

    Args:
        spec (FeatureSpec): features, tables (the wide group's included) and groups.
        cfg (DeepFMConfig): the model section.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Raises:
        ValueError: FM over dense features or over embeddings of different dims.
    """
    from recpipe.models.mlp import mlp_spec, optional_mlp_spec
    from recpipe.models.wide_deep import WideDeep

    return WideDeep(
        spec.tables(),
        wide_deep_groups(spec, cfg.wide_group, cfg.deep_group, cfg.fm_group or cfg.deep_group),
        mlp_spec(cfg.deep),
        optional_mlp_spec(cfg.final),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
