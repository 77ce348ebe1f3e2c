"""DSSM's config section (TorchEasyRec's ``dssm``, tzrec/protos/models/match_model.proto): a user tower and an
item tower over two ``deep`` feature groups, a shared output width, the similarity and its temperature, and
which negatives the softmax loss draws (:mod:`recpipe.models.dssm.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ModelSection, check_group_refs
from recpipe.models.multi_tower_din.config import TowerConfig


class DssmConfig(ModelSection):
    """``model:`` of a DSSM config.

    Args:
        user_tower (TowerConfig): the user tower: an MLP over one ``deep`` group (TorchEasyRec's ``input``).
        item_tower (TowerConfig): the item tower alike.
        output_dim (int): both towers end in a Linear to this width; 0: no Linear, the MLPs' last widths
            (which must then agree). TorchEasyRec requires it (``required int32 output_dim``) and skips the
            Linear at 0 as here.
        similarity (str): ``inner_product`` (TorchEasyRec's default) or ``cosine`` (both towers' outputs
            L2-normalised).
        temperature (float): the similarity is divided by it (TorchEasyRec's default 1.0).
        in_batch_negative (bool): the negatives are the batch's other positives (a ``(B, B)`` softmax); False
            (TorchEasyRec's default): the sampled negatives of ``data.negative_sampler``.
        log_q_correction (bool): subtract each item's log sampling probability from its logit (recpipe's
            addition; TorchEasyRec has none): in batch, its share of the training rows; sampled, its weight's
            share of the item table.

    Example::

        model:
          type: dssm
          user_tower: {group: user, mlp: {hidden_units: [512, 256, 128]}}
          item_tower: {group: item, mlp: {hidden_units: [512, 256, 128]}}
          output_dim: 64
          similarity: cosine
          temperature: 0.05

        # KJT of B=2 rows, keys × batch (user group: user_id; item group: adgroup_id, cate_id):
        #   user_id [[7], [3]]   adgroup_id [[41], [9]]   cate_id [[2], [2]]
        # user tower (2, 16) → 512-256-128 → Linear (2, 64) → L2 norm; item tower (2, 32) → … → (2, 64)
        # row-wise similarity / temperature (2,); in-batch logits (2, 2)
    """

    type: Literal["dssm"]
    user_tower: TowerConfig
    item_tower: TowerConfig
    output_dim: int = Field(ge=0)
    similarity: Literal["inner_product", "cosine"] = "inner_product"
    temperature: float = Field(1.0, gt=0)
    in_batch_negative: bool = False
    log_q_correction: bool = False

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """Both towers' groups must be defined feature groups, and two different ones."""
        check_group_refs([self.user_tower.group, self.item_tower.group], groups)
        if self.user_tower.group == self.item_tower.group:
            raise ValueError(
                f"user_tower and item_tower both read group {self.user_tower.group!r}: a two-tower model needs "
                "a user group and an item group"
            )
