"""Zero-collision (managed-collision) tables under DistributedModelParallel.

TorchRec shards a ManagedCollisionEmbeddingCollection row-wise only: rank ``r`` owns rows
``[r·Z/W, (r+1)·Z/W)`` of a ``Z``-row table and the remapping of the keys in the ``r``-th ``1/W`` of the
63-bit key space (which is why FG spreads ids over that space). Each rank keeps the last of its rows
for keys without a row, so a table needs at least 2 rows per rank.

When ids are evicted to admit new ones, their rows must start over: TorchRec re-initializes the
weights, but resets the optimizer state only for row-wise Adagrad and only through an FBGEMM kernel
that this CPU build does not have (``fbgemm::reset_weight_momentum`` has no CPU implementation: row-wise
Adagrad would fail on the first step). :class:`ShardedZchEmbeddingCollection` resets weights and every
optimizer state of the evicted rows itself, on any device.

A table with frequency admission (:mod:`recpipe.models.blocks.zch_admission`) has its spare row (the last of
each rank) held at the admission's constant and its lookups of that row replaced by the constant, so the ids
without a row read it and the row gets no gradient.

The remapping tables (and an admission counter) are row-wise ShardedTensors in the model's state dict, so DCP checkpoints carry
them; each rank's slice holds the keys of its own part of the key space, so a checkpoint loaded onto
another number of ranks has them re-split by key range (:mod:`recpipe.train.zch_resplit`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm used by the sharded kernels)
import torch
from torch import nn
from torchrec.distributed.mc_embedding import (
    ManagedCollisionEmbeddingCollectionSharder,
    ShardedManagedCollisionEmbeddingCollection,
)
from torchrec.distributed.types import ParameterSharding, ShardingEnv
from torchrec.modules.mc_embedding_modules import BaseManagedCollisionEmbeddingCollection
from torchrec.modules.mc_modules import ManagedCollisionModule, MCHManagedCollisionModule
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

ZCH_SHARDING = "row_wise"
ZCH_KERNEL = "fused"


def zch_collections(model: nn.Module) -> Iterator[tuple[str, BaseManagedCollisionEmbeddingCollection]]:
    """Every (unsharded) managed-collision embedding collection of ``model`` with its name."""
    for name, m in model.named_modules():
        if isinstance(m, BaseManagedCollisionEmbeddingCollection):
            yield name, m


def zch_tables(module: BaseManagedCollisionEmbeddingCollection) -> list[str]:
    """Table names of a managed-collision embedding collection."""
    return [c.name for c in module._managed_collision_collection.embedding_configs()]


def remap_modules(model: nn.Module) -> Iterator[tuple[str, ManagedCollisionModule]]:
    """Every managed-collision (remapping) module of ``model``, sharded or not, with its name."""
    for name, m in model.named_modules():
        if isinstance(m, ManagedCollisionModule):
            yield name, m


def remap_buffer_names(model: nn.Module) -> set[str]:
    """State-dict keys of the remapping modules' buffers."""
    return {f"{name}.{b}" for name, m in remap_modules(model) for b, _ in m.named_buffers()}


def prepare_for_planning(model: nn.Module, world_size: int) -> None:
    """Check every zch table fits ``world_size`` ranks and give its remapping module one bucket per rank.

    The planner refuses a table whose bucket count does not divide by the world size; the sharded
    modules use one bucket per rank whatever the unsharded module says, so it is set to that.

    Raises:
        ValueError: a zch table has fewer than 2 rows per rank.
    """
    for _, collection in zch_collections(model):
        mcc = collection._managed_collision_collection
        for table, module in mcc._managed_collision_modules.items():
            rows = module.output_size()
            if rows < 2 * world_size:
                raise ValueError(
                    f"zch table {table!r} has {rows} rows: on {world_size} rank(s) it needs at least "
                    f"{2 * world_size} (each rank keeps one row for ids without a row); raise zch_size"
                )
            if isinstance(module, MCHManagedCollisionModule):
                module._buckets = world_size


class ShardedZchEmbeddingCollection(ShardedManagedCollisionEmbeddingCollection):
    """TorchRec's sharded managed-collision EmbeddingCollection whose evicted rows start over: weights
    re-drawn with the table's ``init_fn`` and every optimizer state of the row set to zero."""

    @property
    def assigned(self) -> dict[str, int]:
        """Rows of this rank's shard given to a new id so far in this process, per table: an empty row filled
        or an evicted id's row reused (TorchRec reports both as evictions)."""
        if "_assigned" not in self.__dict__:
            self.__dict__["_assigned"] = {}
        return self.__dict__["_assigned"]

    def _admission_rows(self) -> dict[str, tuple[int, float]]:
        """Per table with frequency admission: its spare row on this rank (local index) and the constant."""
        if "_spare" not in self.__dict__:
            modules = self._managed_collision_collection._managed_collision_modules
            self.__dict__["_spare"] = {
                t: (int(m._zch_size) - 1, float(m._admission.value))
                for t, m in modules.items()
                if getattr(m, "_admission", None) is not None
            }
        return self.__dict__["_spare"]

    def compute(self, ctx: Any, dist_input: Any) -> list[torch.Tensor]:
        """TorchRec's remap, eviction and lookup; a table with frequency admission has its spare row held at
        the constant (weight and optimizer state) and the lookups of that row replaced by the constant, so
        the ids without a row read it and no gradient reaches the row."""
        spare = self._admission_rows()
        if not spare:
            return super().compute(ctx, dist_input)
        self._hold(spare)
        out = super().compute(ctx, dist_input)
        mcc = self._managed_collision_collection
        return [
            _constant_rows(emb, kjt, tables, splits, spare)
            for emb, kjt, tables, splits in zip(
                out, ctx.remapped_kjt, mcc._sharding_tables, mcc._sharding_per_table_feature_splits
            )
        ]

    @torch.no_grad()
    def _hold(self, spare: dict[str, tuple[int, float]]) -> None:
        for table, (row, value) in spare.items():
            tbe, table_index = self._table_to_tbe_and_index[table]
            index = int(table_index.item())
            tbe.split_embedding_weights()[index][row] = value
            states = tbe.split_optimizer_states()  # [] for SGD
            for state in states[index] if states else []:
                state[row] = 0

    @torch.no_grad()
    def _evict(self, evictions_per_table: dict[str, torch.Tensor | None]) -> None:
        for table, rows in evictions_per_table.items():
            if rows is None or rows.numel() == 0:
                continue
            self.assigned[table] = self.assigned.get(table, 0) + int(rows.numel())
            tbe, table_index = self._table_to_tbe_and_index[table]
            index = int(table_index.item())
            rows = rows.long().to(self._device)
            weight = tbe.split_embedding_weights()[index]
            init_fn = self._embedding_module._table_name_to_config[table].init_fn
            fresh = weight[rows].clone()
            weight[rows] = init_fn(fresh) if init_fn is not None else fresh.zero_()
            states = tbe.split_optimizer_states()  # [] for SGD
            for state in states[index] if states else []:
                state[rows] = 0


def _constant_rows(
    emb: torch.Tensor,
    kjt: KeyedJaggedTensor,
    tables: list[str],
    splits: list[int],
    spare: dict[str, tuple[int, float]],
) -> torch.Tensor:
    """``emb (N, D)``, the lookup of ``kjt``'s remapped (local) rows, with the rows that are their table's spare
    row replaced by the table's constant (no gradient flows to them)."""
    key_tables = [t for t, n in zip(tables, splits, strict=True) for _ in range(n)]
    if not any(t in spare for t in key_tables):
        return emb
    per_key = torch.tensor(kjt.length_per_key(), device=emb.device)
    rows = torch.tensor([spare[t][0] if t in spare else -1 for t in key_tables], device=emb.device)
    values = torch.tensor([spare[t][1] if t in spare else 0.0 for t in key_tables], device=emb.device)
    hit = kjt.values().to(emb.device) == rows.repeat_interleave(per_key)
    constant = values.repeat_interleave(per_key).to(emb.dtype).unsqueeze(1)
    return torch.where(hit.unsqueeze(1), constant, emb)


_NO_ID = torch.iinfo(torch.int64).max  # the key of a remapping slot no id holds yet


def _rows(model: nn.Module) -> tuple[dict[str, int], dict[str, int]]:
    """Per zch table of a sharded ``model``, on this rank: rows given to a new id so far, rows holding an id."""
    assigned: dict[str, int] = {}
    filled: dict[str, int] = {}
    for m in model.modules():
        if isinstance(m, ShardedZchEmbeddingCollection):
            for table, remap in m._managed_collision_collection._managed_collision_modules.items():
                assigned[table] = assigned.get(table, 0) + m.assigned.get(table, 0)
                filled[table] = filled.get(table, 0) + int((remap._mch_sorted_raw_ids != _NO_ID).sum())
    return assigned, filled


class EvictionCounter:
    """Evictions on this rank from now on, per zch table of a sharded model: ids that gave their row to a new
    one. TorchRec reports a row given to a new id either way, so filling an empty row is told apart by the
    rows holding an id (which only grow: a slot never becomes empty again), read now and at :meth:`counts`.

    Example::

        counter = EvictionCounter(dmp)   # after a resume or warm start has loaded the remapping
        ...                              # training steps
        counter.counts()                 # {"adgroup_id": 1250, "user_id": 0}
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.assigned, self.filled = _rows(model)

    def counts(self) -> dict[str, int]:
        assigned, filled = _rows(self.model)
        return {
            t: (assigned[t] - self.assigned.get(t, 0)) - (filled[t] - self.filled.get(t, 0)) for t in assigned
        }


class ZchEmbeddingCollectionSharder(ManagedCollisionEmbeddingCollectionSharder):
    """Shards a ManagedCollisionEmbeddingCollection into a :class:`ShardedZchEmbeddingCollection`."""

    def shard(
        self,
        module: Any,
        params: dict[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | None = None,
        module_fqn: str | None = None,
    ) -> ShardedZchEmbeddingCollection:
        return ShardedZchEmbeddingCollection(
            module,
            params,
            ec_sharder=self._e_sharder,
            mc_sharder=self._mc_sharder,
            env=env,
            device=device or torch.device("cuda"),
        )

    @property
    def sharded_module_type(self) -> type[ShardedZchEmbeddingCollection]:
        return ShardedZchEmbeddingCollection
