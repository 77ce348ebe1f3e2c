"""PEPNet's config section (TorchEasyRec's ``pepnet``: ``tzrec/models/pepnet.py``, Chang et al. 2023): group
``all``'s embeddings, scaled by EPNet's gate over group ``domain`` (when there is one), then each task's PPNet
MLP, gated per layer over group ``uia`` (when there is one), then the task towers.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

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
