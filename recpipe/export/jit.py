"""TorchScript export: ``model.pt`` taking plain tensors ``(dense (B, D), values (N,), lengths (F·B,))``.

First choice: ``torch.jit.script`` of a wrapper that builds the KeyedJaggedTensor and calls the model.
When the model's code is not scriptable (TorchRec collections behind Python-side caches, dataclass
loops in ``dense_arch``, ``int | SymInt`` annotations), the fallback scripts a lookup module that does
what the collections do with ``embedding_bag`` / ``embedding`` over the exported weights, and calls the
dense program traced once. Tracing is safe there: the dense part has no data-dependent Python
control flow and its sizes are recorded as size ops; nothing that builds a KJT is ever traced (a
traced KJT bakes in its split sizes). Parity at batch sizes 1, 7 and 512 with 0-, 1- and 100-item
histories decides either way.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.export.manifest import Manifest, read_manifest
from recpipe.export.remap import padded, remap_ids
from recpipe.export.scorer import Scorer
from recpipe.export.split import DenseListProgram, SplitModel
from recpipe.export.tables import weighted_bag
from recpipe.models.blocks.item_floats import item_floats
from recpipe.models.blocks.items import pool_items

MODEL_FILE = "model.pt"
_KINDS = {"pooled": 0, "sequence": 1, "offsets": 2}


class KjtModelWrapper(nn.Module):
    """``(dense, values, lengths)`` → KJT over ``keys`` (fixed, spec order) → ``model(dense, kjt)``."""

    def __init__(self, model: nn.Module, keys: list[str]) -> None:
        super().__init__()
        self.model = model
        self.keys = list(keys)

    def forward(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=self.keys, values=values, lengths=lengths)
        return self.model(dense, kjt)


class ScriptedLookupModel(nn.Module):
    """Table lookups in TorchScript-able code, then the dense program.

    Pooled keys: ``embedding_bag`` (sum/mean), as an EmbeddingBagCollection; a weighted id's with its weights key's
    values as per-id weights (:func:`~recpipe.export.tables.weighted_bag`). Sequence keys:
    ``embedding`` over the jagged ids, as an EmbeddingCollection. Keys of zero-collision tables are
    first mapped to rows by the frozen remapping (:func:`~recpipe.export.remap.remap_ids`), as a
    ManagedCollisionEmbeddingCollection does at eval. ``lengths`` is key-major ``(F, B)``.
    """

    def __init__(self, split: SplitModel, keys: list[str], dense: nn.Module) -> None:
        super().__init__()
        names = [m.name for m in split.metas]
        table_of = {f: names.index(m.name) for m in split.metas for f in m.features}
        pooling = {k: v for m in split.metas for k, v in m.pooling.items()}
        self.num_keys = len(keys)
        self.weights: list[torch.Tensor] = [split.tables[n].contiguous() for n in names]
        self.key_table: list[int] = [table_of.get(k, -1) for k in keys]
        self.key_mean: list[bool] = [pooling.get(k, "sum") == "mean" for k in keys]
        self.entry_kind: list[int] = [_KINDS[p.kind] for p in split.plan]
        self.entry_keys: list[list[int]] = [[keys.index(k) for k in p.keys] for p in split.plan]
        # keys that are a float per history item (no table): their ids are each item's float64 bits
        floats = {k for p in split.plan for k in p.floats}
        self.key_float: list[bool] = [k in floats for k in keys]
        # weighted pooled keys: the position of their weights key (float64 bits per id); -1: unweighted
        weights = {k: w for p in split.plan for k, w in p.weights.items()}
        self.key_weights: list[int] = [keys.index(weights[k]) if k in weights else -1 for k in keys]
        # multi-value history keys: the position of their id counts key; -1: one id per item
        items = {k: v for p in split.plan for k, v in p.items.items()}
        self.key_items: list[int] = [keys.index(items[k][0]) if k in items else -1 for k in keys]
        self.key_item_mean: list[bool] = [k in items and items[k][1] == "mean" for k in keys]
        # zch: per table, the frozen remapping's (keys, rows, miss_key_starts, miss_rows); -1: not zch
        zch = [n for n in names if n in split.remaps]
        self.table_zch: list[int] = [zch.index(n) if n in zch else -1 for n in names]
        # TorchScript cannot type an empty list attribute: a model without zch keeps one unused entry
        arrays = [padded(split.remaps[n]) for n in zch] or [
            tuple(torch.zeros(1, dtype=torch.int64) for _ in range(4))
        ]
        self.zch_keys = [a[0] for a in arrays]
        self.zch_rows = [a[1] for a in arrays]
        self.zch_miss_key_starts = [a[2] for a in arrays]
        self.zch_miss_rows = [a[3] for a in arrays]
        self.dense = dense

    def forward(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        batch = dense.size(0)
        lens = lengths.to(torch.int64).view(self.num_keys, batch)
        counts: list[int] = lens.sum(1).tolist()
        ids = torch.split(values.to(torch.int64), counts)
        offsets = torch.cat([torch.zeros(self.num_keys, 1, dtype=torch.int64), torch.cumsum(lens, 1)], dim=1)
        inputs: list[torch.Tensor] = []
        for e in range(len(self.entry_kind)):
            kind = self.entry_kind[e]
            keys = self.entry_keys[e]
            if kind == 2:
                inputs.append(offsets[keys[0]])
                continue
            parts: list[torch.Tensor] = []
            for k in keys:
                if self.key_float[k]:
                    parts.append(item_floats(ids[k]))
                    continue
                table = self.key_table[k]
                weight = self.weights[table]
                rows = ids[k]
                z = self.table_zch[table]
                if z >= 0:
                    rows = remap_ids(
                        rows,
                        self.zch_keys[z],
                        self.zch_rows[z],
                        self.zch_miss_key_starts[z],
                        self.zch_miss_rows[z],
                    )
                if kind == 0 and self.key_weights[k] >= 0:
                    w = item_floats(ids[self.key_weights[k]]).squeeze(1)
                    parts.append(weighted_bag(rows, weight, offsets[k], w, self.key_mean[k]))
                elif kind == 0:
                    mode = "mean" if self.key_mean[k] else "sum"
                    parts.append(F.embedding_bag(rows, weight, offsets[k][:-1], mode=mode))
                elif self.key_items[k] >= 0:
                    per_item = ids[self.key_items[k]]
                    parts.append(pool_items(F.embedding(rows, weight), per_item, self.key_item_mean[k]))
                else:
                    parts.append(F.embedding(rows, weight))
            inputs.append(torch.cat(parts, dim=1))
        return self.dense(dense, inputs)


def script_model(
    model: nn.Module, split: SplitModel, keys: list[str], example_dense: tuple[torch.Tensor, ...]
) -> tuple[torch.jit.ScriptModule, dict[str, str]]:
    """The scripted module and how it was made (``{"method": ..., "why": ...}``)."""
    try:
        return torch.jit.script(KjtModelWrapper(model, keys).eval()), {
            "method": "script(model)",
            "needs_fbgemm": "1",
        }
    except Exception as err:  # noqa: BLE001 - any scripting failure selects the fallback
        why = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        traced = torch.jit.trace(
            DenseListProgram(split.dense).eval(),
            (example_dense[0], list(example_dense[1:])),
            check_trace=False,
        )
    tracer_warnings = sorted(
        {str(w.message)[:200] for w in caught if issubclass(w.category, torch.jit.TracerWarning)}
    )
    if tracer_warnings:
        raise RuntimeError(f"tracing the dense program is unsafe: {tracer_warnings}")
    scripted = torch.jit.script(ScriptedLookupModel(split, keys, traced).eval())
    return scripted, {"method": "script(lookup) + trace(dense program)", "script_model_failed": why}


def write_jit(folder: str | Path, module: torch.jit.ScriptModule) -> list[str]:
    torch.jit.save(module, str(Path(folder) / MODEL_FILE))
    return [MODEL_FILE]


class JitScorer(Scorer):
    """Loads ``model.pt`` with ``torch.jit.load`` (TorchScript archive, no Python pickle)."""

    def __init__(self, folder: str | Path, manifest: Manifest | None = None) -> None:
        manifest = manifest or read_manifest(folder, verify=True)
        if manifest.extra.get("needs_fbgemm"):
            import fbgemm_gpu  # noqa: F401  (registers the fbgemm ops the scripted KJT code calls)
        super().__init__(folder, manifest)
        self.module = torch.jit.load(str(self.folder / MODEL_FILE), map_location="cpu").eval()

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.module(dense, values, lengths)
