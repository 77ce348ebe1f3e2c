"""Process group, device, sharding plan and DistributedModelParallel for 1..N training processes.

One code path for every world size: a process started by torchrun joins its group (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` from the environment, the launcher's contract); a process started
alone forms a 1-process gloo group (an in-process store), so DistributedModelParallel, the planner and
DCP checkpoints behave the same with one rank as with eight.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm, needed by TorchRec's kernels)
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.mc_embeddingbag import ManagedCollisionEmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig
from torchrec.distributed.types import ModuleSharder, ShardingPlan
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.modules.mc_embedding_modules import BaseManagedCollisionEmbeddingCollection
from torchrec.streamable import Pipelineable

from recpipe.batch import Batch
from recpipe.train.zch import (
    ZCH_KERNEL,
    ZCH_SHARDING,
    ZchEmbeddingCollectionSharder,
    prepare_for_planning,
    remap_buffer_names,
    zch_tables,
)

# Batch implements Pipelineable's methods (to / record_stream / pin_memory) without inheriting from
# it; TorchRec's train pipelines check isinstance, so register it as a virtual subclass.
Pipelineable.register(Batch)

# Pooled tables: whole tables on one rank each (one id per row and feature: cheap, placed by the
# planner to balance). Sequence tables (EmbeddingCollection): the history sub-features make most of
# the lookups and backward work, and three tables cannot balance over ranks whole, so their rows are
# split over all ranks.
DEFAULT_SHARDING = "table_wise"
DEFAULT_SEQUENCE_SHARDING = "row_wise"


@dataclass
class DistEnv:
    """This process's place in the training group.

    Args:
        rank (int), world_size (int), local_rank (int), local_world_size (int): as torchrun sets them.
        device (torch.device): ``cuda:<local_rank>`` with GPUs, else ``cpu``.
        backend (str): ``nccl`` on GPU, ``gloo`` on CPU.
        owns_group (bool): this module created the process group (and destroys it in :func:`shutdown`).
        cpu_group (dist.ProcessGroup | None): a gloo group for small host-side reductions (step weights,
            log values) that must not wait behind NCCL work.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str
    owns_group: bool = False
    cpu_group: Any = field(default=None, repr=False)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistEnv:
    """Join (or, alone, create) the default process group and pick this rank's device.

    Under torchrun the environment names the group; without it a 1-process gloo group is created on an
    in-process store. An existing default group is reused.
    """
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    owns = False
    if not dist.is_initialized():
        if "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
            dist.init_process_group(backend=backend)
        else:
            # one process: its rendezvous is an in-process store, no port to pick (or lose to another process)
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        owns = True
    world = dist.get_world_size()
    cpu_group = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    return DistEnv(
        rank=dist.get_rank(),
        world_size=world,
        local_rank=local_rank,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))),
        device=device,
        backend=backend,
        owns_group=owns,
        cpu_group=cpu_group,
    )


def shutdown(env: DistEnv) -> None:
    """Destroy the process group if :func:`init_distributed` created it."""
    if env.owns_group and dist.is_initialized():
        dist.destroy_process_group()


EmbeddingModule = EmbeddingBagCollection | EmbeddingCollection | BaseManagedCollisionEmbeddingCollection


def embedding_modules(model: nn.Module) -> Iterator[tuple[str, EmbeddingModule]]:
    """Every (unsharded) EmbeddingBagCollection / EmbeddingCollection / managed-collision collection of
    ``model`` with its name; the collection inside a managed-collision one is not listed (it is only
    ever called through the remapping)."""
    inner: set[str] = set()
    for name, m in model.named_modules():
        if isinstance(m, BaseManagedCollisionEmbeddingCollection):
            inner.add(f"{name}._embedding_module" if name else "_embedding_module")
            yield name, m
        elif isinstance(m, EmbeddingBagCollection | EmbeddingCollection) and name not in inner:
            yield name, m


def sharders() -> list[ModuleSharder[nn.Module]]:
    return [
        EmbeddingBagCollectionSharder(),
        EmbeddingCollectionSharder(),
        ZchEmbeddingCollectionSharder(),
        ManagedCollisionEmbeddingBagCollectionSharder(),
    ]


def sharding_constraints(
    model: nn.Module, requested: dict[str, str], device_type: str, allowed: list[str] | None = None
) -> tuple[dict[str, ParameterConstraints], list[str]]:
    """Planner constraints: each table gets its requested sharding type; by default ``table_wise`` for
    pooled tables and ``row_wise`` for sequence (EmbeddingCollection) and zch (managed-collision) tables, or,
    with ``allowed`` (``train.sharding_types``), the planner's choice among those of them the table can do.

    A type the table's sharder cannot do on ``device_type`` (row-wise pooled tables on CPU in this
    TorchRec build) falls back to ``table_wise``, and to ``row_wise`` for zch tables (the only way
    TorchRec shards managed collision); the returned messages say so.

    Raises:
        ValueError: ``requested`` names a table the model does not have.
    """
    by_table: dict[str, tuple[list[str], str, str, str]] = {}  # supported, default, fallback, what
    for _, module in embedding_modules(model):
        if isinstance(module, BaseManagedCollisionEmbeddingCollection):
            names = zch_tables(module)
            supported = ZchEmbeddingCollectionSharder().sharding_types(device_type)
            default = fallback = ZCH_SHARDING
            what = "zch table "
        elif isinstance(module, EmbeddingBagCollection):
            names = [c.name for c in module.embedding_bag_configs()]
            supported = EmbeddingBagCollectionSharder().sharding_types(device_type)
            default, fallback, what = DEFAULT_SHARDING, DEFAULT_SHARDING, "table "
        else:
            names = [c.name for c in module.embedding_configs()]
            supported = EmbeddingCollectionSharder().sharding_types(device_type)
            default, fallback, what = DEFAULT_SEQUENCE_SHARDING, DEFAULT_SHARDING, "table "
        for n in names:
            by_table[n] = (supported, default, fallback, what)
    unknown = sorted(set(requested) - set(by_table))
    if unknown:
        raise ValueError(f"train.sharding names unknown tables {unknown}; tables: {sorted(by_table)}")
    constraints: dict[str, ParameterConstraints] = {}
    messages: list[str] = []
    for table, (supported, default, fallback, what) in by_table.items():
        if allowed and table not in requested and what != "zch table ":
            choices = [k for k in allowed if k in supported]
            if choices:
                constraints[table] = ParameterConstraints(sharding_types=choices)
                continue
            messages.append(
                f"{what}{table!r}: none of train.sharding_types {allowed} is available on {device_type} "
                f"(available: {', '.join(supported)}); using {fallback}"
            )
            requested = {**requested, table: fallback}
        kind = requested.get(table, default if default in supported else fallback)
        if kind not in supported:
            messages.append(
                f"{what}{table!r}: {kind} sharding is not available on {device_type} in this TorchRec build "
                f"(available: {', '.join(supported)}); using {fallback}"
            )
            kind = fallback
        if what == "zch table ":
            # The managed-collision sharder lists caching and key-value kernels for any device; the
            # planner cannot estimate them on CPU, and plain fused tables are what training uses.
            constraints[table] = ParameterConstraints(sharding_types=[kind], compute_kernels=[ZCH_KERNEL])
        else:
            constraints[table] = ParameterConstraints(sharding_types=[kind])
    return constraints, messages


def plan_sharding(
    model: nn.Module, env: DistEnv, requested: dict[str, str], allowed: list[str] | None = None
) -> tuple[ShardingPlan, list[str]]:
    """The planner's plan for ``model`` on this group (computed on rank 0, broadcast to all); ``requested``
    and ``allowed`` are ``train.sharding`` and ``train.sharding_types`` (:func:`sharding_constraints`)."""
    prepare_for_planning(model, env.world_size)
    constraints, messages = sharding_constraints(model, requested, env.device.type, allowed)
    topology = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=env.world_size, local_world_size=env.local_world_size),
        kernel_config=KernelConfig(compute_device=env.device.type),
    )
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    plan = planner.collective_plan(model, sharders(), dist.GroupMember.WORLD)
    return plan, messages


def plan_summary(plan: ShardingPlan, max_names: int = 4) -> str:
    """The plan in a few lines: one per (sharding type, compute kernel, ranks), with its tables.

    Args:
        plan (ShardingPlan): the planner's plan.
        max_names (int): table names shown per line before ``…``.

    Example::

        table_wise / fused on ranks [0]: 26 tables (C1, C2, C3, C4, …)
    """
    groups: dict[tuple[str, str, str], list[str]] = {}
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():  # type: ignore[attr-defined]
            key = (str(ps.sharding_type), str(ps.compute_kernel), str(sorted(set(ps.ranks or []))))
            groups.setdefault(key, []).append(name)
    lines = []
    for (kind, kernel, ranks), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(names[:max_names]) + (", …" if len(names) > max_names else "")
        lines.append(f"  {kind} / {kernel} on ranks {ranks}: {len(names)} table(s) ({shown})")
    return "\n".join(lines)


def shard_model(model: nn.Module, env: DistEnv, plan: ShardingPlan) -> DistributedModelParallel:
    """Wrap ``model`` in DistributedModelParallel with ``plan``, keeping ``model``'s initial values.

    DMP re-initializes every shard with the owning rank's random state, so the tables of a 1-rank
    and a 2-rank run would start apart; the values ``model`` was built with (the same seed on every
    rank) are copied into the shards instead. The zch remapping tables start empty on every rank and
    keep the sharded modules' own per-rank row ranges. The sparse optimizer must already be applied in
    backward. On CPU, the sequence tables' lookups get :func:`recpipe.train.nobag.use_segment_backward`.
    """
    remap = remap_buffer_names(model)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items() if k not in remap}
    dmp = DistributedModelParallel(
        module=model,
        device=env.device,
        plan=plan,
        sharders=sharders(),
    )
    copy_into({k: v for k, v in dmp.state_dict().items() if k not in remap}, initial)
    if env.device.type == "cpu":
        from recpipe.train.nobag import use_segment_backward

        use_segment_backward(dmp)  # FBGEMM's CPU backward of unpooled lookups is ~10x slower (its docstring)
    return dmp


@torch.no_grad()
def copy_into(target: dict[str, Any], full: dict[str, torch.Tensor]) -> None:
    """Copy full (unsharded) tensors into a sharded state dict in place, shard by shard."""
    missing = sorted(set(target) - set(full))
    if missing:
        raise KeyError(f"no initial value for {missing[:5]}")
    for key, t in target.items():
        src = full[key]
        if isinstance(t, ShardedTensor):
            for shard in t.local_shards():
                index = tuple(
                    slice(o, o + s)
                    for o, s in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes, strict=True)
                )
                shard.tensor.copy_(src[index])
        elif isinstance(t, torch.Tensor):
            t.copy_(src)
