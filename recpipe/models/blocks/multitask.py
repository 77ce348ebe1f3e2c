"""Multi-task heads over one feature vector: MMoE, PLE and DBMTL's related task towers (plain torch).

Each head maps the concatenated features ``x (B, D)`` of a model's shared embedding groups to one logit per
task, ``(B, T)``, in the order of its task towers. They reproduce TorchEasyRec's modules:

- :class:`MixtureOfExperts` — ``tzrec/modules/mmoe.py``: ``E`` expert MLPs over ``x``; each task's gate
  (an optional gate MLP, then ``Linear(·, E)`` and a softmax) mixes the experts' outputs.
- :class:`ExtractionLayer` — ``tzrec/modules/extraction_net.py`` (PLE's CGC layer): shared experts over
  the shared input and experts of each task over that task's input; each task's gate mixes its own
  experts and the shared ones; the shared gate (absent in the last layer) mixes all of them for the next
  layer's shared input.
- :class:`TaskTowers` — ``tzrec/models/dbmtl.py`` and ``tzrec/modules/task_tower.py``: an optional MLP per
  task, then for a tower with ``relation_mlp`` the concatenation of its own output and the relation
  outputs of the towers it depends on (``relation_tower_names``, earlier towers: e.g. buy after click)
  through that MLP, then ``Linear(·, 1)`` (a two-class tower: :class:`TwoClassLogit`).

Example::

    head = MmoeHead(272, experts=MlpSpec((256, 128)), num_experts=3,
                    towers=[TowerSpec("ctr", MlpSpec((64,))), TowerSpec("cvr", MlpSpec((64,)))])
    head(torch.randn(8, 272)).shape   # (8, 2): [ctr logit, cvr logit] per row
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from recpipe.models.blocks.mlp import MLP, MlpSpec


@dataclass(frozen=True)
class TowerSpec:
    """One task's tower.

    Args:
        name (str): the task (e.g. ``ctr``; its label is the model's business, not the tower's).
        mlp (MlpSpec | None): the tower's MLP over its input (``None``: the input as it is).
        relation_to (tuple[str, ...]): towers this one depends on (DBMTL), each earlier in the list.
        relation_mlp (MlpSpec | None): the MLP over ``[own output, related towers' outputs]``; required
            with ``relation_to``.
        num_class (int): 1: the tower ends in ``Linear(·, 1)``; 2: in a :class:`TwoClassLogit`.
    """

    name: str
    mlp: MlpSpec | None = None
    relation_to: tuple[str, ...] = ()
    relation_mlp: MlpSpec | None = None
    num_class: int = 1


class TwoClassLogit(nn.Module):
    """A two-class tower's output (TorchEasyRec's ``num_class: 2``): ``pair = Linear(·, 2)`` gives ``(l0, l1)``
    and the module returns the one logit ``l1 - l0`` ``(B, 1)``, ``sigmoid(l1 - l0) = softmax(l0, l1)[1]``;
    a loss that needs ``l0`` and ``l1`` apart (JRC) reads ``pair``'s output (the training wrapper hooks it).

    Args:
        in_features (int): the tower's width.
        task (str): the task's name (the training wrapper finds the task's pair by it).

    Example::

        out = TwoClassLogit(64, "ctr")
        out(torch.randn(8, 64)).shape   # (8, 1): l1 - l0
    """

    def __init__(self, in_features: int, task: str, device: torch.device | None = None) -> None:
        super().__init__()
        self.task = task
        self.pair = nn.Linear(in_features, 2, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pair = self.pair(x)
        return pair[:, 1:2] - pair[:, 0:1]


def _mix(gate_logits: torch.Tensor, experts: list[torch.Tensor]) -> torch.Tensor:
    """``softmax(gate_logits) @ experts``: ``(B, E)`` weights over ``E`` outputs ``(B, H)`` → ``(B, H)``."""
    weights = torch.softmax(gate_logits, dim=1).unsqueeze(1)
    return torch.matmul(weights, torch.stack(experts, dim=1)).squeeze(1)


class MixtureOfExperts(nn.Module):
    """MMoE: ``num_experts`` expert MLPs shared by ``num_tasks`` softmax gates; returns each task's mixture.

    Args:
        in_features (int): width of ``x``.
        expert (MlpSpec): every expert's MLP (all alike; the output width is ``expert.hidden_units[-1]``).
        num_experts (int): number of experts (>= 1).
        num_tasks (int): number of gates (>= 1).
        gate (MlpSpec | None): an MLP before each gate's ``Linear(·, num_experts)`` (TorchEasyRec's
            ``gate_mlp``); ``None``: the gate reads ``x`` directly.
    """

    def __init__(
        self,
        in_features: int,
        expert: MlpSpec,
        num_experts: int,
        num_tasks: int,
        gate: MlpSpec | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if num_experts < 1 or num_tasks < 1:
            raise ValueError(
                f"MMoE needs num_experts >= 1 and num_tasks >= 1, got {num_experts}, {num_tasks}"
            )
        self.experts = nn.ModuleList(MLP.from_spec(in_features, expert, device) for _ in range(num_experts))
        self.gate_mlps = nn.ModuleList(
            MLP.from_spec(in_features, gate, device) for _ in range(num_tasks if gate is not None else 0)
        )
        gate_in = gate.hidden_units[-1] if gate is not None else in_features
        self.gates = nn.ModuleList(nn.Linear(gate_in, num_experts, device=device) for _ in range(num_tasks))
        self.out_features = expert.hidden_units[-1]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        experts = [e(x) for e in self.experts]
        out = []
        for t, gate in enumerate(self.gates):
            selector = self.gate_mlps[t](x) if len(self.gate_mlps) > 0 else x
            out.append(_mix(gate(selector), experts))
        return out


class ExtractionLayer(nn.Module):
    """One PLE (CGC) layer.

    Args:
        task_in (Sequence[int]): width of each task's input (``T`` tasks).
        shared_in (int): width of the shared input.
        shared_experts (int): number of shared experts.
        experts_per_task (int): number of experts of each task.
        shared_expert (MlpSpec): a shared expert's MLP.
        task_expert (MlpSpec): a task expert's MLP.
        final (bool): the last layer: no shared gate (nothing reads a shared output after it).

    ``forward(task_inputs, shared)`` returns ``(task_outputs, shared_output)``; ``shared_output`` is
    ``None`` in the final layer.
    """

    def __init__(
        self,
        task_in: Sequence[int],
        shared_in: int,
        shared_experts: int,
        experts_per_task: int,
        shared_expert: MlpSpec,
        task_expert: MlpSpec,
        final: bool,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if shared_experts < 0 or experts_per_task < 0 or shared_experts + experts_per_task < 1:
            raise ValueError(
                f"a PLE layer needs experts: shared_experts={shared_experts}, experts_per_task={experts_per_task}"
            )
        tasks = len(task_in)
        self.shared = nn.ModuleList(
            MLP.from_spec(shared_in, shared_expert, device) for _ in range(shared_experts)
        )
        self.task_experts = nn.ModuleList(
            nn.ModuleList(MLP.from_spec(w, task_expert, device) for _ in range(experts_per_task))
            for w in task_in
        )
        self.task_gates = nn.ModuleList(
            nn.Linear(w, experts_per_task + shared_experts, device=device) for w in task_in
        )
        self.shared_gate = (
            None if final else nn.Linear(shared_in, tasks * experts_per_task + shared_experts, device=device)
        )
        if (
            experts_per_task
            and shared_experts
            and task_expert.hidden_units[-1] != shared_expert.hidden_units[-1]
        ):
            raise ValueError(
                "a PLE layer mixes task and shared experts: their output widths must agree, got "
                f"{task_expert.hidden_units[-1]} and {shared_expert.hidden_units[-1]}"
            )
        width = (task_expert if experts_per_task else shared_expert).hidden_units[-1]
        self.task_out = [width] * tasks
        self.shared_out = width

    def forward(
        self, task_inputs: list[torch.Tensor], shared: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        shared_experts = [e(shared) for e in self.shared]
        every_task_expert: list[torch.Tensor] = []
        out = []
        for t, (experts, gate) in enumerate(zip(self.task_experts, self.task_gates)):
            own = [e(task_inputs[t]) for e in experts]
            every_task_expert.extend(own)
            out.append(_mix(gate(task_inputs[t]), own + shared_experts))
        if self.shared_gate is None:
            return out, None
        return out, _mix(self.shared_gate(shared), every_task_expert + shared_experts)


class TaskTowers(nn.Module):
    """Each task's tower over its input, DBMTL's relations between towers, one logit per task.

    Args:
        task_in (Sequence[int]): width of each tower's input.
        towers (Sequence[TowerSpec]): the towers, in task order; a tower's ``relation_to`` names earlier
            towers only (their relation outputs feed it).
    """

    def __init__(
        self, task_in: Sequence[int], towers: Sequence[TowerSpec], device: torch.device | None = None
    ) -> None:
        super().__init__()
        if len(task_in) != len(towers) or not towers:
            raise ValueError(f"{len(towers)} towers for {len(task_in)} task inputs")
        names = [t.name for t in towers]
        if len(set(names)) != len(names):
            raise ValueError(f"task tower names must be distinct, got {names}")
        self.names = names
        self.mlps = nn.ModuleList()
        self.relation_mlps = nn.ModuleList()
        self.relations: list[list[int]] = []
        self.outputs = nn.ModuleList()
        widths: list[int] = []  # each tower's relation output width, for the towers after it
        for i, (w, tower) in enumerate(zip(task_in, towers)):
            self.mlps.append(MLP.from_spec(w, tower.mlp, device) if tower.mlp is not None else nn.Identity())
            own = tower.mlp.hidden_units[-1] if tower.mlp is not None else w
            related = []
            for name in tower.relation_to:
                if name not in names[:i]:
                    raise ValueError(
                        f"task tower {tower.name!r}: relation_tower_names {name!r} must name an earlier tower "
                        f"(towers in order: {names})"
                    )
                related.append(names.index(name))
            if related and tower.relation_mlp is None:
                raise ValueError(f"task tower {tower.name!r}: relation_tower_names needs a relation_mlp")
            self.relations.append(related)
            if tower.relation_mlp is not None:
                relation = MLP.from_spec(own + sum(widths[j] for j in related), tower.relation_mlp, device)
                self.relation_mlps.append(relation)
                own = relation.out_features
            else:
                self.relation_mlps.append(nn.Identity())
            widths.append(own)
            if tower.num_class not in (1, 2):
                raise ValueError(f"task tower {tower.name!r}: num_class {tower.num_class}, expected 1 or 2")
            self.outputs.append(
                nn.Linear(own, 1, device=device)
                if tower.num_class == 1
                else TwoClassLogit(own, tower.name, device)
            )

    def forward(self, task_inputs: list[torch.Tensor]) -> torch.Tensor:
        nets: list[torch.Tensor] = []
        logits = []
        for i, (mlp, relation, output) in enumerate(zip(self.mlps, self.relation_mlps, self.outputs)):
            net = mlp(task_inputs[i])
            if not isinstance(relation, nn.Identity):
                net = relation(torch.cat([net, *(nets[j] for j in self.relations[i])], dim=1))
            nets.append(net)
            logits.append(output(net))
        return torch.cat(logits, dim=1)


class MmoeHead(nn.Module):
    """TorchEasyRec's MMoE model head: :class:`MixtureOfExperts`, then :class:`TaskTowers`."""

    def __init__(
        self,
        in_features: int,
        experts: MlpSpec,
        num_experts: int,
        towers: Sequence[TowerSpec],
        gate: MlpSpec | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.moe = MixtureOfExperts(in_features, experts, num_experts, len(towers), gate, device)
        self.towers = TaskTowers([self.moe.out_features] * len(towers), towers, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.towers(self.moe(x))


@dataclass(frozen=True)
class ExtractionSpec:
    """One PLE layer's experts (TorchEasyRec's ``extraction_networks[]``)."""

    shared_experts: int
    experts_per_task: int
    shared_expert: MlpSpec
    task_expert: MlpSpec


class PleHead(nn.Module):
    """TorchEasyRec's PLE model head: :class:`ExtractionLayer` s (every task and the shared experts read
    ``x`` first), then :class:`TaskTowers` over the last layer's task outputs."""

    def __init__(
        self,
        in_features: int,
        layers: Sequence[ExtractionSpec],
        towers: Sequence[TowerSpec],
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not layers:
            raise ValueError("PLE needs at least one extraction network")
        task_in, shared_in = [in_features] * len(towers), in_features
        self.layers = nn.ModuleList()
        for i, spec in enumerate(layers):
            layer = ExtractionLayer(
                task_in, shared_in, spec.shared_experts, spec.experts_per_task, spec.shared_expert,
                spec.task_expert, final=i == len(layers) - 1, device=device,
            )  # fmt: skip
            self.layers.append(layer)
            task_in, shared_in = layer.task_out, layer.shared_out
        self.towers = TaskTowers(task_in, towers, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tasks, shared = [x] * len(self.towers.names), x
        for layer in self.layers:
            tasks, next_shared = layer(tasks, shared)
            shared = next_shared if next_shared is not None else shared
        return self.towers(tasks)


class DbmtlHead(nn.Module):
    """TorchEasyRec's DBMTL model head: an optional bottom MLP, optional MMoE experts, then
    :class:`TaskTowers` with the towers' relations (e.g. buy's tower reads click's)."""

    def __init__(
        self,
        in_features: int,
        towers: Sequence[TowerSpec],
        bottom: MlpSpec | None = None,
        experts: MlpSpec | None = None,
        num_experts: int = 0,
        gate: MlpSpec | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.bottom = MLP.from_spec(in_features, bottom, device) if bottom is not None else None
        width = bottom.hidden_units[-1] if bottom is not None else in_features
        self.moe = None
        if experts is not None:
            self.moe = MixtureOfExperts(width, experts, num_experts, len(towers), gate, device)
            width = self.moe.out_features
        self.towers = TaskTowers([width] * len(towers), towers, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bottom is not None:
            x = self.bottom(x)
        tasks = self.moe(x) if self.moe is not None else [x] * len(self.towers.names)
        return self.towers(tasks)
