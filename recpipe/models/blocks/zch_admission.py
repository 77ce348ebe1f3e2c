"""Frequency admission of a zch table (TorchEasyRec dynamicemb's ``frequency_admission_strategy``): an id gets a
row only once its sightings, counted across training steps, reach a threshold.

The counter is two int64 buffers of the table's remapping module (:class:`~recpipe.models.blocks.embedding.
ZchRemapModule`), ``_admit_keys`` and ``_admit_counts``, shaped ``(zch_size, slots)`` so that TorchRec shards
them row-wise with the table (each rank counts the ids of its part of the key space, ``rows_r · slots`` of
them) and DCP checkpoints them; read flat, the keys are sorted ascending, ``int64 max`` in the free slots.
Each training step, for the ids of the step that hold no row: their sightings are added (a new id enters
with its count), and those whose count reaches the threshold go on to the table's admission as usual (the
ids holding a row always do, so the eviction policy keeps scoring them). An id that got its row leaves the
counter at the step's eviction; one the full table gave no row keeps its count and is offered again when
seen. A full counter keeps the ids of highest count, those already counted before new ones on a tie, then
the smaller keys: the others are forgotten (counted from zero when seen again).

Every id without a row (below the threshold, never seen, or refused by a full table) looks up the table's
spare row (the last row of each rank's range), which a table with admission holds at the constant
``value`` and never trains (:func:`hold_spare_rows`; the sharded lookup masks those rows, so no gradient).
"""

from __future__ import annotations

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor

EMPTY = torch.iinfo(torch.int64).max  # a free counter slot (and TorchRec's empty remapping slot)


def _held(sorted_keys: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Whether each of ``x`` is in the ascending ``sorted_keys``."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(x, dtype=torch.bool)
    at = torch.searchsorted(sorted_keys, x).clamp_(max=sorted_keys.numel() - 1)
    return sorted_keys[at] == x


def _store(
    keys: torch.Tensor, counts: torch.Tensor, k: torch.Tensor, c: torch.Tensor, new: torch.Tensor
) -> None:
    """Write the entries ``(k, c)`` into the flat counter, sorted by key; past its capacity the highest counts
    stay (ties: old entries, ``new`` false, first; then the smaller key)."""
    if k.numel() > keys.numel():
        order = torch.argsort(k, stable=True)
        order = order[torch.argsort(new[order].to(torch.int8), stable=True)]
        order = order[torch.argsort(c[order], descending=True, stable=True)]
        keep = order[: keys.numel()]
        k, c = k[keep], c[keep]
    by_key = torch.argsort(k)
    n = k.numel()
    keys.fill_(EMPTY)
    counts.zero_()
    keys[:n] = k[by_key]
    counts[:n] = c[by_key]


@torch.no_grad()
def count_sightings(
    keys: torch.Tensor, counts: torch.Tensor, ids: torch.Tensor, table_keys: torch.Tensor, threshold: int
) -> torch.Tensor:
    """Count one training step's ``ids (N,)`` into the flat counter ``keys``/``counts`` (written in place).

    Args:
        keys (torch.Tensor): ``(C,)`` int64 counted keys, ascending, ``int64 max`` in free slots.
        counts (torch.Tensor): ``(C,)`` int64 sightings of each key.
        ids (torch.Tensor): ``(N,)`` int64 the step's keys (repeats count).
        table_keys (torch.Tensor): the remapping's sorted keys (``_mch_sorted_raw_ids``): the ids holding a row.
        threshold (int): sightings an id needs.

    Returns:
        torch.Tensor: ``(N,)`` bool, the ids the table's admission sees this step (holding a row, or at the
        threshold).

    Example::

        keys, counts = torch.full((4,), EMPTY), torch.zeros(4, dtype=torch.int64)
        count_sightings(keys, counts, torch.tensor([7, 7, 9]), torch.tensor([EMPTY]), 2)   # [True, True, False]
        keys, counts                                   # [7, 9, max, max], [2, 1, 0, 0]
    """
    uniq, inverse, seen = torch.unique(ids, return_inverse=True, return_counts=True)
    in_table = _held(table_keys, uniq)
    cand, total = uniq[~in_table], seen[~in_table].clone()
    at = torch.searchsorted(keys, cand).clamp_(max=keys.numel() - 1)
    found = keys[at] == cand
    total[found] += counts[at[found]]
    counts[at[found]] = total[found]
    passes = in_table.clone()
    passes[~in_table] = total >= threshold
    held = keys != EMPTY
    fresh = ~found
    _store(
        keys,
        counts,
        torch.cat([keys[held], cand[fresh]]),
        torch.cat([counts[held], total[fresh]]),
        torch.cat(
            [torch.zeros(int(held.sum()), dtype=torch.bool), torch.ones(int(fresh.sum()), dtype=torch.bool)]
        ),
    )
    return passes[inverse]


@torch.no_grad()
def forget_admitted(keys: torch.Tensor, counts: torch.Tensor, table_keys: torch.Tensor) -> None:
    """Drop from the flat counter the keys that now hold a row (after an eviction step)."""
    held = keys != EMPTY
    k, c = keys[held], counts[held]
    gone = _held(table_keys, k)
    if bool(gone.any()):
        _store(keys, counts, k[~gone], c[~gone], torch.zeros(int((~gone).sum()), dtype=torch.bool))


def spare_rows(module: nn.Module) -> list[int]:
    """Rows (of the module's own range, from 0) that an unsharded remapping module sends ids without a row to:
    the last row, or the last row of each rank's range for a model loaded from a multi-rank checkpoint."""
    segments = getattr(module, "_miss_segments", None)
    if segments:
        return [segments[r + 1] - 1 for r in range(len(segments) - 1)]
    return [int(module.output_size()) - 1]  # type: ignore[operator]


@torch.no_grad()
def hold_spare_rows(collection: nn.Module) -> None:
    """Write each admission table's constant into its spare rows, in an unsharded
    ``ManagedCollisionEmbeddingCollection`` (a built model, or one loaded from a checkpoint for inference)."""
    modules = collection._managed_collision_collection._managed_collision_modules
    for table, module in modules.items():
        admission = getattr(module, "_admission", None)
        if admission is None:
            continue
        weight = collection._embedding_module.embeddings[table].weight
        if weight.device.type == "meta":
            continue
        weight[spare_rows(module)] = admission.value


def constant_without_row(
    collection: nn.Module, kjt: KeyedJaggedTensor, jagged: dict[str, JaggedTensor]
) -> dict[str, JaggedTensor]:
    """The lookups ``jagged`` of an unsharded ``ManagedCollisionEmbeddingCollection`` (``kjt``: its input) with
    every id of an admission table that has no row reading the table's constant, without a gradient (the
    sharded collection does the same in its lookup, :class:`recpipe.train.zch.ShardedZchEmbeddingCollection`).
    The remapping is read again, as the forward's remap read it (``remap`` changes no state)."""
    mcc = collection._managed_collision_collection
    out = dict(jagged)
    for key, jt in jagged.items():
        table = mcc._feature_to_table[key]
        module = mcc._managed_collision_modules[table]
        admission = getattr(module, "_admission", None)
        if admission is None:
            continue
        ids = kjt[key]
        rows = module.remap({table: JaggedTensor(values=ids.values(), lengths=ids.lengths())})[table].values()
        spare = torch.tensor(spare_rows(module), dtype=rows.dtype, device=rows.device)
        hit = torch.isin(rows, spare).unsqueeze(1)
        values = torch.where(hit, torch.full_like(jt.values(), admission.value), jt.values())
        out[key] = JaggedTensor(values=values, lengths=jt.lengths(), offsets=jt.offsets())
    return out
