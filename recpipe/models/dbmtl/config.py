"""DBMTL's config section (TorchEasyRec's ``dbmtl``: ``tzrec/models/dbmtl.py``): an optional bottom MLP,
optional MMoE experts, and task towers related to each other (buy's tower reads click's: ``relation_tower_names``
and ``relation_mlp``), over MultiTowerDIN's towers (:class:`recpipe.models.blocks.multitask.DbmtlHead`).

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

from typing import Literal

from pydantic import Field, model_validator

from recpipe.config.sections import MlpConfig
from recpipe.models.multitask.config import MultiTaskSection


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
