"""DBMTL's declaration (TorchEasyRec's ``dbmtl``: ``tzrec/models/dbmtl.py``): an optional bottom MLP,
optional MMoE experts, and task towers related to each other (buy's tower reads click's: ``relation_tower_names``
and ``relation_mlp``), over MultiTowerDIN's towers (:class:`recpipe.models.multitask_dense.DbmtlHead`).

Example::

    model:
      type: dbmtl
      towers: [{group: all}]
      bottom_mlp: {hidden_units: [1024]}
      expert_mlp: {hidden_units: [512, 256]}
      num_experts: 3
      task_towers:
        - {name: ctr, label: clk, mlp: {hidden_units: [256, 128]}, relation_mlp: {hidden_units: [32]}}
        - {name: cvr, label: buy, mlp: {hidden_units: [256, 128]},
           relation_tower_names: [ctr], relation_mlp: {hidden_units: [32]}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from recpipe.config.sections import MlpConfig
from recpipe.models.zoo.multitask import MultiTaskSection, build_multitask, tower_spec

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.multi_tower_din import MultiTowerDIN


class DbmtlConfig(MultiTaskSection):
    """``model:`` of a DBMTL config: optional ``bottom_mlp``, optional experts (``expert_mlp`` with
    ``num_experts``, ``gate_mlp``), task towers with relations."""

    type: Literal["dbmtl"]
    bottom_mlp: MlpConfig | None = None
    expert_mlp: MlpConfig | None = None
    num_experts: int = Field(0, ge=0)
    gate_mlp: MlpConfig | None = None

    @model_validator(mode="after")
    def _experts(self) -> DbmtlConfig:
        if (self.expert_mlp is None) != (self.num_experts == 0):
            raise ValueError("dbmtl: expert_mlp and num_experts >= 1 go together (or neither: no experts)")
        return self


Config = DbmtlConfig


def build(spec: FeatureSpec, cfg: DbmtlConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """DBMTL over the spec's feature groups (see :func:`~recpipe.models.zoo.multitask.build_multitask`)."""
    from recpipe.models.mlp import optional_mlp_spec as spec_of
    from recpipe.models.multitask_dense import DbmtlHead

    towers = [tower_spec(t, with_relations=True) for t in cfg.task_towers]
    return build_multitask(
        spec, cfg,
        lambda width: DbmtlHead(
            width, towers, spec_of(cfg.bottom_mlp), spec_of(cfg.expert_mlp), cfg.num_experts,
            spec_of(cfg.gate_mlp), device,
        ),
        device,
    )  # fmt: skip
