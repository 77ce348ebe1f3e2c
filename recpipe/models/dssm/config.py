"""DSSM's config section (TorchEasyRec's ``dssm``, tzrec/protos/models/match_model.proto): a user tower and an
item tower over two ``deep`` feature groups, a shared output width, the similarity and its temperature, and
which negatives the softmax loss draws (:mod:`recpipe.models.dssm.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ConfigSection, ModelSection, VariationalDropoutConfig, check_group_refs
from recpipe.models.multi_tower_din.config import TowerConfig


class SequencePoolingConfig(ConfigSection):
    """A history pooled into a tower's input (TorchEasyRec's ``pooling_encoder`` over a ``sequence_groups``
    entry of the tower's DEEP group, tzrec/modules/sequence.py ``PoolingEncoder``): each item the concatenation
    of the group's sub-feature embeddings, their ``mean`` (over the row's real items; an empty history is
    zeros) or ``sum``, appended after the group's own features.

    Args:
        group (str): a ``sequence`` feature group of history sub-features only (no query).
        pooling (str): ``mean`` (TorchEasyRec's default) or ``sum``.
    """

    group: str
    pooling: Literal["mean", "sum"] = "mean"


class DssmTowerConfig(TowerConfig):
    """A DSSM tower: an MLP over one ``deep`` group and the pooled histories of ``sequence_pooling``."""

    sequence_pooling: list[SequencePoolingConfig] = Field(default_factory=list)


def check_tower_groups(
    model: str, towers: Sequence[DssmTowerConfig], groups: Sequence[FeatureGroupConfig]
) -> None:
    """Both towers' groups defined and different; each pooled history a ``sequence`` group, pooled once."""
    user, item = towers
    pooled = [p.group for t in towers for p in t.sequence_pooling]
    check_group_refs([user.group, item.group, *pooled], groups)
    if user.group == item.group:
        raise ValueError(
            f"user_tower and item_tower both read group {user.group!r}: a two-tower model needs "
            "a user group and an item group"
        )
    types = {g.name: g.type for g in groups}
    for name in pooled:
        if types[name] != "sequence":
            raise ValueError(
                f"model {model}: sequence_pooling group {name!r} is a {types[name]} group; it needs a sequence group"
            )
    dup = sorted({n for n in pooled if pooled.count(n) > 1})
    if dup:
        raise ValueError(f"model {model}: sequence_pooling pools groups {dup} more than once")


class DssmConfig(ModelSection):
    """``model:`` of a DSSM config.

    Args:
        user_tower (DssmTowerConfig): the user tower: an MLP over one ``deep`` group (TorchEasyRec's ``input``)
            and the pooled histories of its ``sequence_pooling`` (TorchEasyRec's ``pooling_encoder``).
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
        variational_dropout (VariationalDropoutConfig | None): drops each tower's features in training with a
            learnt probability and adds its penalty to the loss (TorchEasyRec's ``MatchModel.init_input``: every
            tower group of more than one feature; a pooled history counts as one feature).

    Example::

        model:
          type: dssm
          user_tower:
            group: user
            mlp: {hidden_units: [512, 256, 128]}
            sequence_pooling: [{group: click_50_seq, pooling: mean}]     # optional
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
    user_tower: DssmTowerConfig
    item_tower: DssmTowerConfig
    output_dim: int = Field(ge=0)
    similarity: Literal["inner_product", "cosine"] = "inner_product"
    temperature: float = Field(1.0, gt=0)
    in_batch_negative: bool = False
    log_q_correction: bool = False
    variational_dropout: VariationalDropoutConfig | None = None

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """Both towers' groups must be defined feature groups, and two different ones; pooled histories
        sequence groups."""
        check_tower_groups(self.type, [self.user_tower, self.item_tower], groups)
