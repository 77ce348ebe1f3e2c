"""DLRM's declaration: its config section, the feature group it reads and its builder
(the ``nn.Module`` is :class:`recpipe.models.dlrm.DLRM`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, check_group_refs

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.dlrm import DLRM


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


Config = DlrmConfig


def build(spec: FeatureSpec, cfg: DlrmConfig, device: torch.device | None = None) -> DLRM:
    """DLRM over ``cfg.sparse_group``'s keys and all of ``Batch.dense``.

    Args:
        spec (FeatureSpec): features, tables and groups.
        cfg (DlrmConfig): the model section.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Raises:
        ValueError: the sparse group lists dense features (or :class:`DLRM` rejects the shapes).
    """
    from recpipe.models.dlrm import DLRM
    from recpipe.models.embedding import EmbeddingInit
    from recpipe.models.mlp import mlp_spec

    group = spec.group(cfg.sparse_group)
    if group.dense:
        raise ValueError(f"DLRM sparse group {group.name!r} lists dense features {group.dense}")
    return DLRM(
        spec.tables(),
        list(group.sparse),
        spec.dense_dim,
        dense_arch=mlp_spec(cfg.dense_mlp),
        over_arch=mlp_spec(cfg.over_mlp),
        pooling=spec.pooling(),
        embedding_init=EmbeddingInit(cfg.embedding_init, cfg.embedding_init_scale),
        arch_with_sparse=cfg.arch_with_sparse,
        device=device,
    )
