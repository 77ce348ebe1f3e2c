"""Loading zero-collision (zch) tables from a checkpoint written by another number of ranks.

Row-wise over ``W`` ranks, rank ``r`` owns rows ``[o_r, o_r + s_r)`` of a zch table and the remapping
of the keys in the ``r``-th ``1/W`` of the 63-bit key space: its slices of ``_mch_sorted_raw_ids``
(sorted keys, ``int64 max`` for empty slots), ``_mch_remapped_ids_mapping`` (each slot's global row) and
the eviction metadata (``_mch_counts``, ``_mch_last_access_iter``), saved by DCP as row-wise
ShardedTensors. On another world size a key's owner and row range change, so DCP's plain resharding
(by row offset) would put keys on ranks that never see them. :func:`resplit_zch` rebuilds them instead:
every rank reads the parent's whole table (keys, rows, metadata, embedding rows, optimizer-state rows)
and keeps the keys of its own part of the key space, sorted, on the first rows of its range, with their
embedding and optimizer-state rows; its other rows keep this run's fresh initialization and a zeroed
optimizer state, like evicted rows. A known key keeps its embedding values, not its row index. A table with
frequency admission has its sighting counter (``_admit_keys`` / ``_admit_counts``) re-split the same way: each
rank keeps the counted keys of its part of the key space (the highest counts if they do not fit).

Memory: each rank holds the parent's whole zch tables for the load, ``O(zch_size · (dim + optimizer
state + 4))`` values per table. A rank whose part of the key space holds more keys than its ``s_r − 1``
rows keeps the most used (access count, then last access: what LFU, LRU and DistanceLFU keep) and
drops the rest (they become unseen ids); :func:`resplit_zch` reports how many.

Example::

    # what recpipe.train.checkpoint.load_weights_and_optimizer does when the world size changed
    held_model, held_optim = zch_resplit_keys(model_sd, optim_sd)   # plain DCP loads all but these
    resplit_zch(ckpt, model_sd, optim_sd)                           # {"user_id": 1, "adgroup_id": 0}: ids dropped
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.sharded_tensor import ShardedTensor

_REMAP = re.compile(
    r"^(?P<collection>.*)\._managed_collision_collection\._managed_collision_modules\.(?P<table>[^.]+)\.(?P<buffer>[^.]+)$"
)
_EMPTY = torch.iinfo(torch.int64).max
_IDS, _ROWS = "_mch_sorted_raw_ids", "_mch_remapped_ids_mapping"
# Eviction metadata a full rank ranks keys by, in this order (the higher the better).
_SCORES = ("_mch_counts", "_mch_last_access_iter")
# A frequency-admission table's sighting counter (recpipe.models.blocks.zch_admission): keys and counts.
_COUNTER = ("_admit_keys", "_admit_counts")
INPUT_SIZE = 2**63 - 1  # TorchRec's MCH input_hash_size: the key space the row-wise input dist splits


@dataclass
class ZchTable:
    """The state-dict entries of one zch table: remapping buffers (model keys), its embedding weight,
    and its optimizer states (``(param key, state name)`` of the optimizer state dict)."""

    name: str
    buffers: dict[str, str] = field(default_factory=dict)
    weight: str = ""
    states: list[tuple[str, str]] = field(default_factory=list)


def zch_tables_of(model_sd: dict[str, Any], optim_sd: dict[str, Any]) -> dict[str, ZchTable]:
    """Every zch table of a (sharded) model state dict with its entries in ``model_sd`` and ``optim_sd``."""
    tables: dict[str, ZchTable] = {}
    for key in model_sd:
        if m := _REMAP.match(key):
            table = tables.setdefault(m["table"], ZchTable(m["table"]))
            table.buffers[m["buffer"]] = key
            table.weight = f"{m['collection']}._embedding_module.embeddings.{m['table']}.weight"
    for table in tables.values():
        if table.weight not in model_sd:
            raise KeyError(f"zch table {table.name!r}: no embedding weight {table.weight!r} in the model")
        for param, states in optim_sd.get("state", {}).items():
            if param == table.weight or param.endswith("." + table.weight):
                table.states += [(param, n) for n, v in states.items() if isinstance(v, ShardedTensor)]
    return tables


def zch_resplit_keys(
    model_sd: dict[str, Any], optim_sd: dict[str, Any]
) -> tuple[set[str], set[tuple[str, str]]]:
    """Model keys and optimizer ``(param, state)`` entries that plain DCP must not load on another world
    size: every zch remapping buffer but the step count (``_output_segments_tensor`` stays this run's row
    ranges, which export reads), each zch table's weight and its optimizer states."""
    model_keys: set[str] = set()
    optim_keys: set[tuple[str, str]] = set()
    for table in zch_tables_of(model_sd, optim_sd).values():
        model_keys |= {k for b, k in table.buffers.items() if b != "_current_iter_tensor"}
        model_keys.add(table.weight)
        optim_keys |= set(table.states)
    return model_keys, optim_keys


def _full(value: torch.Tensor) -> torch.Tensor:
    return torch.zeros(tuple(value.size()), dtype=value.dtype)


def _local(value: ShardedTensor) -> tuple[int, torch.Tensor]:
    shards = value.local_shards()
    if len(shards) != 1:
        raise ValueError(f"a zch table's state must have one row-wise shard per rank, found {len(shards)}")
    return int(shards[0].metadata.shard_offsets[0]), shards[0].tensor


def _read_parent(ckpt: Path, tables: dict[str, ZchTable], model_sd: dict[str, Any], optim_sd: dict[str, Any]):
    model = {table.weight: _full(model_sd[table.weight]) for table in tables.values()}
    for table in tables.values():
        model.update(
            {
                k: _full(model_sd[k])
                for b, k in table.buffers.items()
                if b in (_IDS, _ROWS, *_SCORES, *_COUNTER)
            }
        )
    state: dict[str, dict[str, torch.Tensor]] = {}
    for table in tables.values():
        for param, name in table.states:
            state.setdefault(param, {})[name] = _full(optim_sd["state"][param][name])
    # Every rank reads the whole tables by itself: no collective, no resharding by row offset.
    parent = {"model": model, "optim": {"state": state}}
    dcp.load(parent, checkpoint_id=str(ckpt), no_dist=True)
    return parent["model"], parent["optim"]["state"]


@torch.no_grad()
def resplit_zch(
    ckpt: Path,
    model_sd: dict[str, Any],
    optim_sd: dict[str, Any],
) -> dict[str, int]:
    """Load every zch table of ``ckpt`` into this rank's live shards of ``model_sd`` and ``optim_sd``
    (written in place), re-split by key range for this world size. Returns the keys dropped per table
    (those a full rank had no row for).

    Args:
        ckpt (Path): a verified ``ckpt-<step>`` folder, written by any number of ranks.
        model_sd (dict): the live, sharded model state dict, model keys.
        optim_sd (dict): the live optimizer state dict (loaded into the optimizer afterwards).

    Raises:
        ValueError: a zch table's state is not sharded row-wise, one shard per rank.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    tables = zch_tables_of(model_sd, optim_sd)
    if not tables:
        return {}
    parent, parent_states = _read_parent(ckpt, tables, model_sd, optim_sd)
    block = -(-INPUT_SIZE // world_size)  # the row-wise input dist's key range per rank
    dropped: dict[str, int] = {}
    for table in tables.values():
        ids, rows = parent[table.buffers[_IDS]], parent[table.buffers[_ROWS]]
        real = ids != _EMPTY
        owner = torch.div(ids, block, rounding_mode="floor").clamp_(max=world_size - 1)
        mine = torch.nonzero(real & (owner == rank)).flatten()
        offset, local_ids = _local(model_sd[table.buffers[_IDS]])
        size = local_ids.numel()
        if mine.numel() > size - 1:  # the last row of each rank is for keys without a row
            scores = [parent[table.buffers[s]][mine] for s in _SCORES if s in table.buffers]
            order = torch.arange(mine.numel())
            for score in reversed(scores):  # stable sorts, last key first: lexicographic, best first
                order = order[torch.argsort(score[order], descending=True, stable=True)]
            mine = mine[order[: size - 1]]
        mine = mine[torch.argsort(ids[mine])]
        n = mine.numel()
        local_ids.fill_(_EMPTY)
        local_ids[:n] = ids[mine]
        _local(model_sd[table.buffers[_ROWS]])[1].copy_(torch.arange(offset, offset + size))
        for score in _SCORES:
            if score in table.buffers:
                local = _local(model_sd[table.buffers[score]])[1]
                local.zero_()
                local[:n] = parent[table.buffers[score]][mine]
        source = rows[mine]
        w_offset, weight = _local(model_sd[table.weight])
        if w_offset != offset or weight.shape[0] != size:
            raise ValueError(
                f"zch table {table.name!r}: its weight's rows [{w_offset}, {w_offset + weight.shape[0]}) are "
                f"not the remapping's [{offset}, {offset + size})"
            )
        weight[:n] = parent[table.weight][source].to(weight.dtype)
        for param, name in table.states:
            local = _local(optim_sd["state"][param][name])[1]
            local.zero_()
            local[:n] = parent_states[param][name][source].to(local.dtype)
        dropped[table.name] = _dropped(model_sd[table.buffers[_IDS]], owner[real], world_size)
        if _COUNTER[0] in table.buffers:
            _resplit_counter(table, parent, model_sd, block, rank, world_size)
    return dropped


def _resplit_counter(
    table: ZchTable,
    parent: dict[str, torch.Tensor],
    model_sd: dict[str, Any],
    block: int,
    rank: int,
    world: int,
) -> None:
    """This rank's part of the key space of the parent's admission counter, into its local counter: sorted
    keys, the highest counts kept if they do not fit (the counter's own rule, which forgets the others)."""
    keys = parent[table.buffers[_COUNTER[0]]].flatten()
    counts = parent[table.buffers[_COUNTER[1]]].flatten()
    real = keys != _EMPTY
    owner = torch.div(keys, block, rounding_mode="floor").clamp_(max=world - 1)
    mine = torch.nonzero(real & (owner == rank)).flatten()
    local_keys = _local(model_sd[table.buffers[_COUNTER[0]]])[1].view(-1)
    local_counts = _local(model_sd[table.buffers[_COUNTER[1]]])[1].view(-1)
    if mine.numel() > local_keys.numel():
        order = torch.argsort(keys[mine], stable=True)
        order = order[torch.argsort(counts[mine][order], descending=True, stable=True)]
        mine = mine[order[: local_keys.numel()]]
    mine = mine[torch.argsort(keys[mine])]
    local_keys.fill_(_EMPTY)
    local_counts.zero_()
    local_keys[: mine.numel()] = keys[mine]
    local_counts[: mine.numel()] = counts[mine]


def _dropped(ids: ShardedTensor, owners: torch.Tensor, world_size: int) -> int:
    """Known keys of the parent that no rank of this run has a row for (over all ranks)."""
    sizes = [0] * world_size
    for shard in ids.metadata().shards_metadata:
        sizes[shard.placement.rank()] = int(shard.shard_sizes[0])
    owned = torch.bincount(owners, minlength=world_size).tolist()
    return sum(max(0, n - (s - 1)) for n, s in zip(owned, sizes, strict=True))
