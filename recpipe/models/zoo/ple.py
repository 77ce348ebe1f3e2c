"""PLE's declaration (TorchEasyRec's ``ple``: ``tzrec/models/ple.py``, ``tzrec/modules/extraction_net.py``):
layers of shared and task-specific experts with gates (CGC), then a tower per task, over MultiTowerDIN's
towers (:class:`recpipe.models.multitask_dense.PleHead`).

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

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from recpipe.config.sections import ConfigSection, MlpConfig
from recpipe.models.zoo.multitask import MultiTaskSection, build_multitask, tower_spec

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.multi_tower_din import MultiTowerDIN


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


Config = PleConfig


def build(spec: FeatureSpec, cfg: PleConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """PLE over the spec's feature groups (see :func:`~recpipe.models.zoo.multitask.build_multitask`)."""
    from recpipe.models.mlp import mlp_spec
    from recpipe.models.multitask_dense import ExtractionSpec, PleHead

    towers = [tower_spec(t, with_relations=False) for t in cfg.task_towers]
    layers = [
        ExtractionSpec(
            n.share_num,
            n.expert_num_per_task,
            mlp_spec(n.share_expert_net or n.task_expert_net),  # unused without shared experts
            mlp_spec(n.task_expert_net),
        )
        for n in cfg.extraction_networks
    ]
    return build_multitask(spec, cfg, lambda width: PleHead(width, layers, towers, device), device)
