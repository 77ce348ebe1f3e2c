"""DLRM's config section and the feature group it reads (the module and its builder:
:mod:`recpipe.models.dlrm.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, check_group_refs


class DlrmConfig(ModelSection):
    """``model:`` of a DLRM config.

    Args:
        dense_mlp (MlpConfig): bottom MLP over ``Batch.dense``; its last width is the embedding dim.
        over_mlp (MlpConfig): top MLP over the interaction.
        sparse_group (str): the feature group whose pooled features interact with the dense vector.
        embedding_init (str): ``uniform``, ``xavier_uniform`` or ``normal`` table initialization.
        embedding_init_scale (float | None): its scale (default: the kind's own).
        arch_with_sparse (bool): also feed the raw sparse embeddings to the over arch (TorchEasyRec's
            option of the same name).

    Example::

        model:
          type: dlrm
          dense_mlp: {hidden_units: [512, 256, 16]}
          over_mlp: {hidden_units: [1024, 1024, 512, 256]}
          sparse_group: sparse
    """

    type: Literal["dlrm"]
    dense_mlp: MlpConfig
    over_mlp: MlpConfig
    sparse_group: str = "sparse"
    embedding_init: Literal["uniform", "xavier_uniform", "normal"] = "uniform"
    embedding_init_scale: float | None = Field(None, gt=0.0)
    arch_with_sparse: bool = False

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``sparse_group`` must be a defined feature group."""
        check_group_refs([self.sparse_group], groups)
