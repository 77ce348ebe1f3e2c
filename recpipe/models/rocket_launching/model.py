"""RocketLaunching (Zhou et al. 2018; TorchEasyRec's ``tzrec/models/rocket_launching.py``): a light net served,
a booster net trained beside it over the same embeddings, the light net distilled from it. The dense arch
lives in :mod:`recpipe.models.rocket_launching.dense` (plain torch).

Where it differs: TorchEasyRec evaluates both nets (``auc_light``, ``auc_booster``); recpipe's evaluation,
gates and every export score the light net, the one served. With sample weights the hint loss weighs each
row's mean over its logits (:func:`~recpipe.models.blocks.distill.distillation_terms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.dense_embedding import EmbeddedDense
from recpipe.models.blocks.distill import Distillation
from recpipe.models.blocks.embedding import pooled_group
from recpipe.models.blocks.group_input import GroupColumns, GroupConcat, group_columns
from recpipe.models.blocks.mlp import mlp_spec, optional_mlp_spec
from recpipe.models.rocket_launching.config import RocketLaunchingConfig
from recpipe.models.rocket_launching.dense import RocketDense, RocketSpec

if TYPE_CHECKING:
    from recpipe.batch import Batch


class RocketLaunching(SplitModel):
    """RocketLaunching over one deep group's pooled embeddings and dense columns; ``forward`` is the light net,
    :meth:`distillation` both nets (the training wrapper's loss reads it).

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        columns (GroupColumns): the group's keys and dense columns.
        spec (RocketSpec): the light and booster nets.
        dense_in_features (int): width of ``Batch.dense``.
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per pooled key.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # Criteo, B = 2: int_0..int_12 dense, cat_0..cat_25 one id each (dim 16), group deep
        model = build_model(spec, cfg.model)                  # type: rocket_launching
        model(batch.dense, batch.sparse).shape                # (2,): the light net's logits
        model.distillation(batch).booster.shape               # (2,): the booster's, in training
    """

    def __init__(
        self,
        tables: list[TableSpec],
        columns: GroupColumns,
        spec: RocketSpec,
        dense_in_features: int = 0,
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
    ) -> None:
        embeddings, dims = pooled_group(tables, columns.keys, pooling, device)
        group = GroupConcat(columns, dims, dense_in_features)
        dense = RocketDense(group, spec, device)
        super().__init__(embeddings, dense, dense_in_features)

    def distillation(self, batch: Batch) -> Distillation:
        """Both nets on ``batch`` (:meth:`RocketDense.distill`), numeric features embedded first as in
        ``forward``."""
        arch, dense = self.dense, batch.dense
        if isinstance(arch, EmbeddedDense):
            arch, dense = arch.inner, arch.embed(dense)
        return arch.distill(dense, self.sparse_arch(batch.sparse))


def build(
    spec: FeatureSpec, cfg: RocketLaunchingConfig, device: torch.device | None = None
) -> RocketLaunching:
    """RocketLaunching over ``cfg.group``."""
    return RocketLaunching(
        spec.tables(),
        group_columns(spec, cfg.group, "rocket_launching"),
        RocketSpec(
            mlp_spec(cfg.booster_mlp),
            mlp_spec(cfg.light_mlp),
            optional_mlp_spec(cfg.share_mlp),
            cfg.num_class,
            cfg.feature_based_distillation,
            cfg.feature_distillation_function,
        ),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
