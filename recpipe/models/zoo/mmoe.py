"""MMoE's declaration (TorchEasyRec's ``mmoe``: ``tzrec/models/mmoe.py``): experts shared by every task,
a softmax gate per task, a tower per task (:class:`recpipe.models.multitask_dense.MmoeHead`) over
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

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from recpipe.config.sections import MlpConfig
from recpipe.models.zoo.multitask import MultiTaskSection, build_multitask, tower_spec

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from recpipe.models.multi_tower_din import MultiTowerDIN


class MmoeConfig(MultiTaskSection):
    """``model:`` of an MMoE config: ``expert_mlp``, ``num_experts``, optional ``gate_mlp``, the towers
    and task towers of :class:`~recpipe.models.zoo.multitask.MultiTaskSection`."""

    type: Literal["mmoe"]
    expert_mlp: MlpConfig
    num_experts: int = Field(3, ge=1)
    gate_mlp: MlpConfig | None = None


Config = MmoeConfig


def build(spec: FeatureSpec, cfg: MmoeConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """MMoE over the spec's feature groups (see :func:`~recpipe.models.zoo.multitask.build_multitask`)."""
    from recpipe.models.mlp import mlp_spec, optional_mlp_spec
    from recpipe.models.multitask_dense import MmoeHead

    towers = [tower_spec(t, with_relations=False) for t in cfg.task_towers]
    gate = optional_mlp_spec(cfg.gate_mlp)
    return build_multitask(
        spec, cfg, lambda width: MmoeHead(width, mlp_spec(cfg.expert_mlp), cfg.num_experts, towers, gate, device),
        device,
    )  # fmt: skip
