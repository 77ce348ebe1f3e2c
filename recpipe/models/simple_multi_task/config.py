"""SimpleMultiTask's config section (TorchEasyRec's ``simple_multi_task``, tzrec/protos/models/multi_task_rank.proto:
only ``task_towers``): each task's tower over the same group, nothing shared but the embeddings
(:mod:`recpipe.models.simple_multi_task.model`).

Example::

    model:
      type: simple_multi_task
      towers: [{group: all}]
      task_towers:
        - {name: ctr, label: clk, mlp: {hidden_units: [256, 128, 64]}}
        - {name: cvr, label: buy, mlp: {hidden_units: [256, 128, 64]}}
"""

from __future__ import annotations

from typing import Literal

from recpipe.models.multitask.config import MultiTaskSection


class SimpleMultiTaskConfig(MultiTaskSection):
    """``model:`` of a SimpleMultiTask config: the towers and task towers of
    :class:`~recpipe.models.multitask.config.MultiTaskSection`, nothing else."""

    type: Literal["simple_multi_task"]
