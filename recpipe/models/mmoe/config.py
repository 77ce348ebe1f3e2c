"""MMoE's config section (TorchEasyRec's ``mmoe``: ``tzrec/models/mmoe.py``): experts shared by every task,
a softmax gate per task, a tower per task (:class:`recpipe.models.blocks.multitask.MmoeHead`) over
MultiTowerDIN's towers.

Example::

    model:
      type: mmoe
      towers: [{group: all}]                       # the group's embeddings straight to the experts
      expert_mlp: {hidden_units: [512, 256, 128]}
      num_experts: 3
      task_towers:
        - {name: ctr, label: clk, mlp: {hidden_units: [256, 128, 64]}}
        - {name: cvr, label: buy, mlp: {hidden_units: [256, 128, 64]}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from recpipe.config.sections import MlpConfig
from recpipe.models.multitask.config import MultiTaskSection


class MmoeConfig(MultiTaskSection):
    """``model:`` of an MMoE config: ``expert_mlp``, ``num_experts``, optional ``gate_mlp``, the towers
    and task towers of :class:`~recpipe.models.multitask.config.MultiTaskSection`."""

    type: Literal["mmoe"]
    expert_mlp: MlpConfig
    num_experts: int = Field(3, ge=1)
    gate_mlp: MlpConfig | None = None
