"""PLE's config section (TorchEasyRec's ``ple``: ``tzrec/models/ple.py``, ``tzrec/modules/extraction_net.py``):
layers of shared and task-specific experts with gates (CGC), then a tower per task, over MultiTowerDIN's
towers (:class:`recpipe.models.blocks.multitask.PleHead`).

Example::

    model:
      type: ple
      towers: [{group: all}]
      extraction_networks:
        - {network_name: layer1, expert_num_per_task: 3, share_num: 3,
           task_expert_net: {hidden_units: [256, 128]}, share_expert_net: {hidden_units: [256, 128]}}
      task_towers:
        - {name: ctr, label: clk, mlp: {hidden_units: [128, 64]}}
        - {name: cvr, label: buy, mlp: {hidden_units: [128, 64]}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from recpipe.config.sections import ConfigSection, MlpConfig
from recpipe.models.multitask.config import MultiTaskSection


class ExtractionNetworkConfig(ConfigSection):
    """One PLE layer, with TorchEasyRec's field names (``tzrec/protos/module.proto`` ExtractionNetwork:
    ``share_num`` and ``share_expert_net`` optional, no shared experts without them)."""

    network_name: str = ""
    expert_num_per_task: int = Field(ge=0)
    share_num: int = Field(0, ge=0)
    task_expert_net: MlpConfig
    share_expert_net: MlpConfig | None = None

    @model_validator(mode="after")
    def _shared(self) -> ExtractionNetworkConfig:
        if self.share_num and self.share_expert_net is None:
            raise ValueError(f"extraction network {self.network_name!r}: share_num needs a share_expert_net")
        return self


class PleConfig(MultiTaskSection):
    """``model:`` of a PLE config: ``extraction_networks`` (at least one) and the task towers."""

    type: Literal["ple"]
    extraction_networks: list[ExtractionNetworkConfig] = Field(min_length=1)
