"""DSSMv2's config section (TorchEasyRec's ``dssm_v2``, tzrec/protos/models/match_model.proto ``DSSMV2``): the
fields of DSSM's (:class:`~recpipe.models.dssm.config.DssmConfig`); the towers share their embedding tables
(:mod:`recpipe.models.dssm_v2.model`)."""

from __future__ import annotations

from typing import Literal

from recpipe.models.dssm.config import DssmConfig


class DssmV2Config(DssmConfig):
    """``model:`` of a DSSMv2 config: DSSM's settings (towers, ``output_dim``, ``similarity``,
    ``temperature``, negatives), under ``type: dssm_v2``.

    A table serves both towers: an id in the user group and the item group (or a user history sub-feature
    sharing ``embedding_name`` with an item id) has one table, as TorchEasyRec's DSSMV2 builds one
    ``EmbeddingGroup`` over every feature group ("dssm_v2可以支持user与item塔跨塔share embedding").

    Example::

        model:
          type: dssm_v2
          user_tower: {group: user, mlp: {hidden_units: [512, 256, 128]},
                       sequence_pooling: [{group: click_50_seq}]}
          item_tower: {group: item, mlp: {hidden_units: [512, 256, 128]}}
          output_dim: 64

        # features click_50_seq__adgroup_id {embedding_name: adgroup_id} and adgroup_id: one table
        # "adgroup_id", read jagged by the user tower's history and pooled by the item tower
    """

    type: Literal["dssm_v2"]  # type: ignore[assignment]
