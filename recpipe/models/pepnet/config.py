"""PEPNet's config section (TorchEasyRec's ``pepnet``: ``tzrec/models/pepnet.py``, Chang et al. 2023): group
``all``'s embeddings, scaled by EPNet's gate over group ``domain`` (when there is one), then each task's PPNet
MLP, gated per layer over group ``uia`` (when there is one), then the task towers: one per task, or with a
``domain_label`` one per task and domain (TorchEasyRec's ``domain_input_name`` / ``task_domain_num``).

Domain towers: ``domain_label`` is the last of ``data.label_fields``, a column holding each row's domain, an
integer in ``[0, task_domain_num)`` (FG refuses any other value, naming the column and the value). Task ``i``'s
tower for domain ``j`` is the model's output ``i * D + j``; the training loss and the metrics of task ``i`` read,
for each row, the tower of its domain; the served model outputs every domain's: ``probability_<label>_<j>``
(``probability_clk_0`` ... ``probability_buy_2``; ``logit_<label>_<j>`` in ONNX), where TorchEasyRec's
predictions are ``probs_<tower>_<j>``.

Example::

    model:
      type: pepnet
      towers: [{group: all}, {group: domain}, {group: uia}]   # main group first, no MLPs
      main_group: all
      domain_group: domain
      uia_group: uia
      ppnet_hidden_units: [512, 256]
      ppnet_dropout: 0.1
      task_towers:
        - {name: ctr, label: clk, mlp: {hidden_units: [256, 128, 64]}}
        - {name: cvr, label: buy, mlp: {hidden_units: [256, 128, 64]}}
      domain_label: occupation       # data.label_fields: [clk, buy, occupation]
      task_domain_num: 3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from recpipe.config.features import FeatureGroupConfig
from recpipe.models.multitask.config import MultiTaskSection


class PepnetConfig(MultiTaskSection):
    """``model:`` of a PEPNet config.

    Args:
        main_group (str): the group the towers read (TorchEasyRec: ``all``).
        domain_group (str | None): EPNet's group (TorchEasyRec: ``domain``, when defined); None: no EPNet.
        uia_group (str | None): PPNet's group (TorchEasyRec: ``uia``, when defined); None: no PPNet.
        epnet_hidden_unit (int | None): EPNet's gate hidden width (default: the main group's width).
        epnet_gamma (float): EPNet's gate scale (``γ · sigmoid``; default 2).
        ppnet_hidden_units (list[int]): each task's PPNet layers (required with a ``uia_group``).
        ppnet_activation (str): their activation.
        ppnet_dropout (float): dropout after each gated layer.
        ppnet_gamma (float): PPNet's gates' scale (default 2).
        domain_label (str | None): the label holding each row's domain (the last of ``data.label_fields``);
            None: one tower per task.
        task_domain_num (int): the number of domains, towers per task (with ``domain_label``).

    ``towers`` are the groups without MLPs, the main group first, then the domain and uia groups (the builder
    splits their concatenation back).
    """

    type: Literal["pepnet"]
    main_group: str = "all"
    domain_group: str | None = None
    uia_group: str | None = None
    epnet_hidden_unit: int | None = Field(None, ge=1)
    epnet_gamma: float = 2.0
    ppnet_hidden_units: list[int] = Field(default_factory=list)
    ppnet_activation: Literal["relu", "gelu", "silu", "sigmoid", "dice"] = "relu"
    ppnet_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    ppnet_gamma: float = 2.0
    domain_label: str | None = None
    task_domain_num: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _domains(self) -> PepnetConfig:
        if self.domain_label is None and self.task_domain_num != 1:
            raise ValueError(
                "model pepnet: task_domain_num counts only with a domain_label (the rows' domain)"
            )
        if self.domain_label is not None:
            jrc = [t.name for t in self.task_towers if t.loss.type == "jrc"]
            if jrc:
                raise ValueError(
                    f"model pepnet: task towers {jrc} have a jrc loss, not built with domain towers"
                )
            if self.domain_label in [t.label for t in self.task_towers]:
                raise ValueError(f"model pepnet: domain_label {self.domain_label!r} is a task tower's label")
        return self

    def domains(self) -> tuple[str, int] | None:
        return None if self.domain_label is None else (self.domain_label, self.task_domain_num)

    def check_labels(self, labels: Sequence[str]) -> None:
        """The task towers' labels, then the ``domain_label`` (when set): the data's label columns in order."""
        if self.domain_label is None:
            super().check_labels(labels)
            return
        tasks = [t.label for t in self.task_towers]
        if [*tasks, self.domain_label] != list(labels):
            raise ValueError(
                f"model pepnet: data.label_fields must be the task towers' labels {tasks} then the domain_label "
                f"{self.domain_label!r}; got {list(labels)}"
            )
        super().check_labels(tasks)

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """The towers are the main, domain and uia groups in that order, without MLPs."""
        super().check_groups(groups)
        want = [g for g in (self.main_group, self.domain_group, self.uia_group) if g is not None]
        got = [t.group for t in self.towers]
        if got != want or any(t.mlp is not None for t in self.towers) or self.din_towers:
            raise ValueError(
                f"model pepnet: towers must be the groups {want} (main, domain, uia), in order and without an "
                f"mlp, and no din_towers; got towers over {got}"
            )
        if self.uia_group is not None and not self.ppnet_hidden_units:
            raise ValueError("model pepnet: a uia_group needs ppnet_hidden_units (PPNet's layers)")
        if self.uia_group is None and self.ppnet_hidden_units:
            raise ValueError("model pepnet: ppnet_hidden_units without a uia_group (PPNet's gate input)")
