"""RocketLaunching's config section (TorchEasyRec's ``rocket_launching``, tzrec/models/rocket_launching.py; Zhou
et al. 2018): a light net and a booster net over one deep group (after an optional shared MLP), trained
together, the light net learning from the booster's logits (and, with ``feature_based_distillation``, from its
hidden layers of the same width); only the light net is served (:mod:`recpipe.models.rocket_launching.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection
from recpipe.models.dcn_v2.config import check_one_deep_group


class RocketLaunchingConfig(ModelSection):
    """``model:`` of a RocketLaunching config.

    Args:
        group (str): the one deep group it reads (TorchEasyRec: the model's first group).
        share_mlp (MlpConfig | None): an MLP both nets read (trained by the booster's loss only: the light
            net reads its output detached, as TorchEasyRec's does).
        booster_mlp (MlpConfig): the booster net, trained only (its logit never reaches the served graph).
        light_mlp (MlpConfig): the light net, the served model.
        feature_based_distillation (bool): also pull each light hidden layer toward the first booster layer
            of the same width (TorchEasyRec's ``_get_distillation_mlp_index``).
        feature_distillation_function (str): ``cosine`` (TorchEasyRec's default: ``-0.1 ·`` the batch's mean
            cosine similarity) or ``euclid`` (the square root of the batch's summed squared distances).
        num_class (int): 1: each net ends in ``Linear(·, 1)``, trained with BCE; 2: in ``Linear(·, 2)``,
            trained with two-class softmax cross-entropy (TorchEasyRec's ``num_class: 2`` with
            ``softmax_cross_entropy``), the probability the softmax's second column.

    Example::

        model:
          type: rocket_launching
          group: deep
          booster_mlp: {hidden_units: [256, 128, 64, 32]}
          light_mlp: {hidden_units: [96, 64, 32]}
          feature_based_distillation: true      # light 64 <- booster 64, light 32 <- booster 32
          num_class: 2

        # B = 2: x (2, 429) -> light 96-64-32 -> Linear(32, 2) -> logit l1 - l0 (2,); booster alike, in training
    """

    type: Literal["rocket_launching"]
    group: str = "all"
    share_mlp: MlpConfig | None = None
    booster_mlp: MlpConfig
    light_mlp: MlpConfig
    feature_based_distillation: bool = False
    feature_distillation_function: Literal["cosine", "euclid"] = "cosine"
    num_class: Literal[1, 2] = 1

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``group`` must be a defined deep group."""
        check_one_deep_group(self.group, groups)
