"""PEPNet's gates and head in plain torch (TorchEasyRec's ``tzrec/modules/personalized_net.py``: ``GateNU``,
``EPNet``, ``PPNet``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from recpipe.models.blocks.mlp import make_activation
from recpipe.models.blocks.multitask import TaskTowers, TowerSpec


class GateNU(nn.Module):
    """``γ · sigmoid(Linear(ReLU(Linear(x))))``: a gate in ``(0, γ)`` per output column.

    Example::

        GateNU(10, 8, 6, gamma=2.0)(torch.randn(4, 10)).shape   # (4, 6), values in (0, 2)
    """

    def __init__(
        self,
        in_features: int,
        hidden: int,
        out_features: int,
        gamma: float = 2.0,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.gamma = gamma
        self.hidden = nn.Linear(in_features, hidden, device=device)
        self.out = nn.Linear(hidden, out_features, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gamma * torch.sigmoid(self.out(torch.relu(self.hidden(x))))


class EPNet(nn.Module):
    """``GateNU([domain, main.detach()]) ⊙ main``: the main embeddings scaled per column by the domain.

    Example::

        EPNet(main_dim=12, domain_dim=4, hidden=12)(torch.randn(2, 12), torch.randn(2, 4)).shape   # (2, 12)
    """

    def __init__(
        self,
        main_dim: int,
        domain_dim: int,
        hidden: int,
        gamma: float = 2.0,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.gate = GateNU(domain_dim + main_dim, hidden, main_dim, gamma, device)

    def forward(self, main: torch.Tensor, domain: torch.Tensor) -> torch.Tensor:
        return self.gate(torch.cat([domain, main.detach()], dim=1)) * main


class PPNet(nn.Module):
    """One MLP per task whose every layer's output is scaled by a ``GateNU([uia, main.detach()])`` of its
    width: ``h = dropout(act(Linear(h)) ⊙ gate(uia, main))``.

    Example::

        net = PPNet(12, 4, num_tasks=2, hidden_units=[8, 6])
        [t.shape for t in net(torch.randn(2, 12), torch.randn(2, 4))]   # [(2, 6), (2, 6)]
    """

    def __init__(
        self,
        main_dim: int,
        uia_dim: int,
        num_tasks: int,
        hidden_units: Sequence[int],
        activation: str = "relu",
        dropout: float = 0.0,
        gamma: float = 2.0,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not hidden_units:
            raise ValueError("PPNet needs hidden_units")
        self.tasks = nn.ModuleList()
        for _ in range(num_tasks):
            layers = nn.ModuleList()
            width = main_dim
            for h in hidden_units:
                layer = nn.ModuleDict(
                    {
                        "linear": nn.Linear(width, h, device=device),
                        "act": make_activation(activation, h, device=device),
                        "gate": GateNU(main_dim + uia_dim, h, h, gamma, device),
                    }
                )
                layers.append(layer)
                width = h
            self.tasks.append(layers)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.out_features = hidden_units[-1]

    def forward(self, main: torch.Tensor, uia: torch.Tensor) -> list[torch.Tensor]:
        gate_in = torch.cat([uia, main.detach()], dim=1)
        outs = []
        for layers in self.tasks:
            h = main
            for layer in layers:
                h = self.dropout(layer["act"](layer["linear"](h)) * layer["gate"](gate_in))
            outs.append(h)
        return outs


class PepnetHead(nn.Module):
    """PEPNet's head over the towers' concatenation ``[main | domain | uia]`` (widths ``widths``): EPNet, PPNet,
    task towers (:class:`~recpipe.models.blocks.multitask.TaskTowers`) → ``(B, T)`` logits; with
    ``domain_num`` ``D`` a tower per task and domain, all over the task's input → ``(B, T·D)`` logits, task ``i``'s
    domain ``j`` at column ``i·D + j`` (TorchEasyRec's ``_task_tower[i * task_domain_num + j]``).

    Args:
        widths (Sequence[int]): the main group's width, then the domain's and the uia's (each when used).
        towers (Sequence[TowerSpec]): the task towers.
        has_domain (bool): ``widths`` holds a domain group (EPNet).
        has_uia (bool): ``widths`` holds a uia group (PPNet).
        epnet_hidden (int | None): EPNet's hidden width (default: the main width).
        domain_num (int): 0: a tower per task; ``D`` >= 1: ``D`` towers per task (``<task>_<j>``).
    """

    def __init__(
        self,
        widths: Sequence[int],
        towers: Sequence[TowerSpec],
        has_domain: bool,
        has_uia: bool,
        epnet_hidden: int | None = None,
        epnet_gamma: float = 2.0,
        ppnet_hidden_units: Sequence[int] = (),
        ppnet_activation: str = "relu",
        ppnet_dropout: float = 0.0,
        ppnet_gamma: float = 2.0,
        domain_num: int = 0,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if len(widths) != 1 + int(has_domain) + int(has_uia):
            raise ValueError(f"PEPNet: {len(widths)} group widths for domain={has_domain}, uia={has_uia}")
        self.widths = list(widths)
        main = widths[0]
        self.epnet = EPNet(main, widths[1], epnet_hidden or main, epnet_gamma, device) if has_domain else None
        self.ppnet = (
            PPNet(main, widths[-1], len(towers), ppnet_hidden_units, ppnet_activation, ppnet_dropout,
                  ppnet_gamma, device)
            if has_uia
            else None
        )  # fmt: skip
        task_in = self.ppnet.out_features if self.ppnet is not None else main
        self.copies = max(domain_num, 1)  # towers per task
        if domain_num:
            towers = [replace(t, name=f"{t.name}_{j}") for t in towers for j in range(domain_num)]
        self.towers = TaskTowers([task_in] * len(towers), towers, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.split(x, self.widths, dim=1))
        main = parts[0]
        if self.epnet is not None:
            main = self.epnet(main, parts[1])
        if self.ppnet is not None:
            tasks = self.ppnet(main, parts[-1])
        else:
            tasks = [main] * (len(self.towers.names) // self.copies)
        inputs: list[torch.Tensor] = []
        for t in tasks:  # each task's input to its towers, one per domain
            for _ in range(self.copies):
                inputs.append(t)
        return self.towers(inputs)
