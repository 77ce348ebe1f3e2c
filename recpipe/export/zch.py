"""Freezing a trained model's managed-collision (zch) state for export.

:func:`zch_remaps` reads each zch table's remapping off the model's TorchRec modules (the sorted key
buffer and its rows, and where keys without a row go, as the module's eval-mode ``remap`` sends them);
:func:`freeze_zch` returns the model with each ``ManagedCollisionEmbeddingCollection`` replaced by a
:class:`FrozenZchCollection` that looks the keys up in those arrays (plain torch, no admission, no
eviction) and reads the same embedding weights. The full-model backends (jit, aoti) export the frozen
model; the split backends write the arrays next to the tables (:mod:`recpipe.export.remap`).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingCollection
from torchrec.modules.mc_embedding_modules import BaseManagedCollisionEmbeddingCollection
from torchrec.modules.mc_modules import MCHManagedCollisionModule
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor

from recpipe.export.remap import INT64_MAX, ZchRemap, padded, remap_ids


def zch_collections(model: nn.Module) -> list[tuple[str, BaseManagedCollisionEmbeddingCollection]]:
    """Every managed-collision embedding collection of ``model`` with its qualified name."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, BaseManagedCollisionEmbeddingCollection)
    ]


def frozen_remap(table: str, module: nn.Module) -> ZchRemap:
    """The eval-mode remapping of one TorchRec ``MCHManagedCollisionModule`` (recpipe's ``ZchRemapModule``
    included) as a :class:`~recpipe.export.remap.ZchRemap`.

    TorchRec searches the sorted key buffer without its last slot (always an empty slot, ``int64 max``)
    and sends keys it does not find to the table's last row; recpipe's module loaded from a ``W``-rank
    checkpoint sends them (and any key whose row is that last row) to the last row of the rank that owns
    the key's part of the key space instead.

    Raises:
        ValueError: the module is not an unsharded MCH module without an input hash, or its buffers are
            inconsistent.
    """
    if not isinstance(module, MCHManagedCollisionModule):
        raise ValueError(f"zch table {table!r}: cannot export a {type(module).__name__} remapping (MCH only)")
    if module._input_hash_func is not None:
        raise ValueError(
            f"zch table {table!r}: its remapping hashes keys with a function export cannot carry"
        )
    size, offset = int(module.output_size()), int(module._output_global_offset)
    if offset != 0:
        raise ValueError(
            f"zch table {table!r}: a sharded remapping (rows from {offset}); export the unsharded model"
        )
    sorted_ids = module._mch_sorted_raw_ids.detach().to("cpu", torch.int64)
    mapping = module._mch_remapped_ids_mapping.detach().to("cpu", torch.int64)
    if sorted_ids.numel() != size or mapping.numel() != size:
        raise ValueError(
            f"zch table {table!r}: remapping buffers of {sorted_ids.numel()} keys and {mapping.numel()} rows "
            f"for a table of {size} rows"
        )
    searched, rows_of = sorted_ids[:-1], mapping[:-1]
    order = torch.argsort(searched, stable=True)
    keys, rows = searched[order], rows_of[order]
    real = keys != INT64_MAX
    keys, rows = keys[real], rows[real]
    if keys.numel() > 1 and not bool((keys[1:] > keys[:-1]).all()):
        raise ValueError(f"zch table {table!r}: a key is held by two slots of the remapping")
    miss = size - 1
    segments = getattr(module, "_miss_segments", None)
    if segments:
        ranks = len(segments) - 1
        block = -(-int(module.input_size()) // ranks)  # the row-wise input dist's key range per rank
        starts = torch.arange(ranks, dtype=torch.int64) * block
        miss_rows = torch.tensor([segments[r + 1] - 1 for r in range(ranks)], dtype=torch.int64)
        rank = torch.div(keys, block, rounding_mode="floor").clamp(0, ranks - 1)
        rows = torch.where(rows == miss, miss_rows[rank], rows)
    else:
        starts = torch.zeros(1, dtype=torch.int64)
        miss_rows = torch.tensor([miss], dtype=torch.int64)
    remap = ZchRemap(size, keys.contiguous(), rows.contiguous(), starts, miss_rows)
    remap.check(table)
    return remap


def zch_remaps(model: nn.Module) -> dict[str, ZchRemap]:
    """Every zch table of ``model`` → its frozen remapping."""
    out: dict[str, ZchRemap] = {}
    for _, collection in zch_collections(model):
        mcc = collection._managed_collision_collection
        for table, module in mcc._managed_collision_modules.items():
            out[table] = frozen_remap(table, module)
    return out


class FrozenZchCollection(nn.Module):
    """A ManagedCollisionEmbeddingCollection at inference: keys → rows by frozen arrays, then the same
    weights. Returns what the managed-collision collection returns, ``({key: JaggedTensor (N, D)}, None)``.

    Args:
        embeddings (EmbeddingCollection): the collection's tables (weights shared, not copied).
        remaps (dict[str, ZchRemap]): table → frozen remapping.
    """

    def __init__(self, embeddings: EmbeddingCollection, remaps: dict[str, ZchRemap]) -> None:
        super().__init__()
        self.embeddings = embeddings
        self._table_of: dict[str, str] = {}
        self._index: dict[str, int] = {}
        for i, config in enumerate(embeddings.embedding_configs()):
            if config.name not in remaps:
                raise ValueError(f"zch table {config.name!r} has no frozen remapping")
            self._index[config.name] = i
            for f in config.feature_names:
                self._table_of[f] = config.name
            for name, t in zip(("keys", "rows", "miss_key_starts", "miss_rows"), padded(remaps[config.name])):
                self.register_buffer(f"remap_{i}_{name}", t)

    def rows(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        i = self._index[table]
        return remap_ids(
            ids,
            getattr(self, f"remap_{i}_keys"),
            getattr(self, f"remap_{i}_rows"),
            getattr(self, f"remap_{i}_miss_key_starts"),
            getattr(self, f"remap_{i}_miss_rows"),
        )

    def forward(self, features: KeyedJaggedTensor) -> tuple[dict[str, JaggedTensor], None]:
        out: dict[str, JaggedTensor] = {}
        for key, jt in features.to_dict().items():
            table = self._table_of[key]
            weight = self.embeddings.embeddings[table].weight
            values = F.embedding(self.rows(table, jt.values().to(torch.int64)), weight)
            out[key] = JaggedTensor(values=values, lengths=jt.lengths(), offsets=jt.offsets())
        return out, None


def freeze_zch(model: nn.Module, remaps: dict[str, ZchRemap]) -> nn.Module:
    """``model`` with every managed-collision collection replaced by a :class:`FrozenZchCollection`.

    The modules on the path to each collection are shallow copies: ``model`` itself is left untouched and
    no weight is copied.
    """
    collections = zch_collections(model)
    if not collections:
        return model
    root = _shallow(model)
    for name, collection in collections:
        *path, leaf = name.split(".")
        parent = root
        for part in path:
            child = _shallow(parent._modules[part])
            parent._modules[part] = child
            parent = child
        parent._modules[leaf] = FrozenZchCollection(collection._embedding_module, remaps)
    return root.eval()


def _shallow(module: nn.Module) -> nn.Module:
    clone = copy.copy(module)
    clone._modules = type(module._modules)(module._modules)
    return clone
