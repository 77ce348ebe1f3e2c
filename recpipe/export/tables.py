"""The sparse half of a split model: embedding tables in safetensors shards and a lookup plan.

Imports neither torchrec nor fbgemm: a serving process reads ``sparse.json`` and the shards and turns
per-key ids (FG output, or a KeyedJaggedTensor's ``values``/``lengths``) into the dense part's named
inputs with ``torch.nn.functional.embedding_bag`` / ``embedding`` — the same math as TorchRec's
EmbeddingBagCollection (pooled keys) and EmbeddingCollection (sequence keys).

The plan says how every dense input is built::

    {"name": "user_id",      "kind": "pooled",   "keys": ["user_id"]}               -> (B, 16)
    {"name": "seq__query",   "kind": "pooled",   "keys": ["adgroup_id", "cate_id"]} -> (B, 32) concat
    {"name": "seq__values",  "kind": "sequence", "keys": ["click_50_seq__adgroup_id", ...]} -> (T, 32)
    {"name": "seq__offsets", "kind": "offsets",  "keys": ["click_50_seq__adgroup_id"]}      -> (B + 1,)

A history key that is a float per item (``FeatureSpec.item_float_keys()``) has no table: its ids are each item's
float64 bits, read back as one ``(T, 1)`` float32 column where the plan lists it (``floats``)::

    {"name": "seq__values", "kind": "sequence", "keys": ["clicks__item", "clicks__ts"], "floats": ["clicks__ts"]}

A weighted id (TorchEasyRec's ``weighted: true``) pools ``Σ w·e`` (``mean``: ``Σ w·e / n``) with each id's weight
read from its weights key (float64 bits, like a float per item); the plan names it (``weights``: key → weights key)::

    {"name": "tags", "kind": "pooled", "keys": ["tags"], "weights": {"tags": "tags__weights"}}

A history of several ids per item (TorchEasyRec's ``value_dim: 0``) looks up each id and pools an item's rows
(:func:`~recpipe.models.blocks.items.pool_items`) by its id counts key; its group's offsets are that key's::

    {"name": "seq__values", "kind": "sequence", "keys": ["clicks__tags"],
     "items": {"clicks__tags": ["clicks__tags__item_lengths", "sum"]}}

Zero-collision (zch) tables take 63-bit id keys, not rows: their frozen remapping (sorted keys → rows,
and the row of keys never admitted) is in ``zch.safetensors`` (:mod:`recpipe.export.remap`), and the
lookup maps keys to rows with ``searchsorted`` before ``embedding_bag`` / ``embedding``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from recpipe.export.manifest import ArtifactError
from recpipe.export.remap import ZchRemap, load_remaps, padded, remap_ids, write_remaps
from recpipe.models.blocks.item_floats import item_floats
from recpipe.models.blocks.items import pool_items

SPARSE_META = "sparse.json"
SPARSE_FORMAT_VERSION = 1
# Version 2: zch tables (``TableMeta.zch`` and ``zch.safetensors``); written only when a table is zch, so
# a loader of version 1 refuses such a folder instead of reading keys as rows.
SPARSE_FORMAT_VERSION_ZCH = 2
# Version 3: plan entries with float-per-item keys (``PlanEntry.floats``); written only when a plan has them.
SPARSE_FORMAT_VERSION_FLOATS = 3
# Version 4: pooled entries of weighted ids (``PlanEntry.weights``); written only when a plan has them.
SPARSE_FORMAT_VERSION_WEIGHTS = 4
# Version 5: sequence entries of multi-value history keys (``PlanEntry.items``); written only when a plan has them.
SPARSE_FORMAT_VERSION_ITEMS = 5
DEFAULT_MAX_SHARD_BYTES = 512 * 1024 * 1024
PLAN_KINDS = ("pooled", "sequence", "offsets")


@dataclass(frozen=True)
class TablePart:
    """Rows ``[row_start, row_stop)`` of a table, stored as tensor ``tensor`` in shard ``file``."""

    file: str
    tensor: str
    row_start: int
    row_stop: int


@dataclass
class TableMeta:
    """One embedding table as stored.

    Args:
        name (str): table name (shared by every key that looks it up).
        rows (int), dim (int): shape of the weight.
        dtype (str): ``float32``.
        features (list[str]): KJT keys that look it up.
        pooling (dict[str, str]): pooling (``sum``/``mean``) of each pooled key; sequence keys are absent.
        id_mapping (dict[str, dict]): per key, how FG maps raw values to rows (kind, size, column).
        parts (list[TablePart]): where the rows live (one part unless the table exceeds a shard).
        zch (dict[str, int] | None): for a zero-collision table, the sizes of its frozen remapping
            (``rows``, ``keys``, ``miss_ranges``; the arrays are in ``zch.safetensors``); ids are then
            63-bit keys looked up through it, not rows.
    """

    name: str
    rows: int
    dim: int
    dtype: str
    features: list[str]
    pooling: dict[str, str]
    id_mapping: dict[str, dict[str, Any]]
    parts: list[TablePart] = field(default_factory=list)
    zch: dict[str, int] | None = None


@dataclass(frozen=True)
class PlanEntry:
    """How one dense-part input is built from lookups (see the module docstring)."""

    name: str
    kind: str
    keys: list[str]
    floats: list[str] = field(default_factory=list)  # keys that are a float per item, not table lookups
    weights: dict[str, str] = field(default_factory=dict)  # weighted pooled keys → their weights keys
    # multi-value history keys → [their id counts key, "sum" | "mean"]: each item pools its ids' rows
    items: dict[str, list[str]] = field(default_factory=dict)


def write_tables(
    tables: dict[str, torch.Tensor],
    metas: list[TableMeta],
    plan: list[PlanEntry],
    keys: list[str],
    folder: str | Path,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    remaps: dict[str, ZchRemap] | None = None,
) -> list[str]:
    """Write ``model-00000.safetensors``, ... (each at most ``max_shard_bytes`` of tensor data, tables
    larger than that split by rows), ``zch.safetensors`` when tables are zch (their frozen remappings,
    ``remaps``) and ``sparse.json``; returns the file names written."""
    remaps = dict(remaps or {})
    _check_zch(metas, remaps)
    if max_shard_bytes < 1:
        raise ValueError(f"max_shard_bytes must be >= 1, got {max_shard_bytes}")
    folder = Path(folder)
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = [0]
    for meta in metas:
        weight = tables[meta.name].detach().to("cpu", torch.float32).contiguous()
        if tuple(weight.shape) != (meta.rows, meta.dim):
            raise ValueError(
                f"table {meta.name!r}: weight {tuple(weight.shape)} != ({meta.rows}, {meta.dim})"
            )
        row_bytes = max(meta.dim * weight.element_size(), 1)
        start = 0
        meta.parts = []
        while start < meta.rows:
            if max_shard_bytes - used[-1] < row_bytes and used[-1] > 0:
                shards.append({})
                used.append(0)
            stop = min(meta.rows, start + max((max_shard_bytes - used[-1]) // row_bytes, 1))
            whole = start == 0 and stop == meta.rows
            tensor = meta.name if whole else f"{meta.name}/{start}"
            # A row slice shares storage with the table; safetensors wants one owner per tensor.
            shards[-1][tensor] = weight if whole else weight[start:stop].clone()
            used[-1] += (stop - start) * row_bytes
            meta.parts.append(TablePart(f"model-{len(shards) - 1:05d}.safetensors", tensor, start, stop))
            start = stop
    names = []
    for i, shard in enumerate(shards):
        if shard:
            name = f"model-{i:05d}.safetensors"
            save_file(shard, str(folder / name), metadata={"format": "pt"})
            names.append(name)
    if remaps:
        names.append(write_remaps(folder, remaps))
    floats = any(p.floats for p in plan)
    version = (
        SPARSE_FORMAT_VERSION_ITEMS
        if any(p.items for p in plan)
        else SPARSE_FORMAT_VERSION_WEIGHTS
        if any(p.weights for p in plan)
        else SPARSE_FORMAT_VERSION_FLOATS
        if floats
        else SPARSE_FORMAT_VERSION_ZCH
        if remaps
        else SPARSE_FORMAT_VERSION
    )
    doc = {
        "version": version,
        "keys": list(keys),
        "tables": [asdict(m) for m in metas],
        # a plan without float or weighted keys reads (and digests) as before them
        "plan": [
            {k: v for k, v in asdict(p).items() if k not in ("floats", "weights", "items") or v} for p in plan
        ],
    }
    (folder / SPARSE_META).write_text(json.dumps(doc, indent=1))
    return [*names, SPARSE_META]


class SparseLookup:
    """Reads ``sparse.json`` and its shards; maps per-key ids to the dense part's inputs.

    Args:
        folder (str | Path): a folder written by :func:`write_tables` (verify its manifest first).

    Example::

        lookup = SparseLookup.load("export/rtp")
        # B = 2, keys [user_id, click_50_seq__adgroup_id]: values [7, 9, 4, 11], lengths [1, 1, 2, 0]
        inputs = lookup(values, lengths, batch_size=2)
        inputs["user_id"].shape         # (2, 16)
        inputs["seq__values"].shape     # (2, 48): T = 2 history items
    """

    def __init__(
        self,
        keys: list[str],
        plan: list[PlanEntry],
        metas: list[TableMeta],
        weights: dict[str, torch.Tensor],
        remaps: dict[str, ZchRemap] | None = None,
    ) -> None:
        self.keys = list(keys)
        self.plan = list(plan)
        self.metas = list(metas)
        self.weights = weights
        remaps = dict(remaps or {})
        _check_zch(self.metas, remaps)
        # zch tables: ids are 63-bit keys, looked up through the frozen remapping first
        self._remaps = {name: padded(r) for name, r in remaps.items()}
        self._table_of: dict[str, str] = {}
        self._pooling: dict[str, str] = {}
        for m in self.metas:
            for f in m.features:
                self._table_of[f] = m.name
            self._pooling.update(m.pooling)
        for p in self.plan:
            if p.kind not in PLAN_KINDS:
                raise ValueError(f"unknown plan kind {p.kind!r} for input {p.name!r}")
            unknown = [
                k
                for k in p.keys
                if k not in self.keys
                or (p.kind != "offsets" and k not in self._table_of and k not in p.floats)
            ]
            if unknown:
                raise ValueError(f"plan input {p.name!r} uses keys {unknown} without a table")
            stray = {
                k: w
                for k, w in p.weights.items()
                if p.kind != "pooled" or k not in p.keys or w not in self.keys
            }
            if stray:
                raise ValueError(f"plan input {p.name!r}: weights {stray} are not pooled keys' weights keys")

    @classmethod
    def load(cls, folder: str | Path) -> SparseLookup:
        """Read ``sparse.json`` and the shards it lists (verify the folder's manifest first)."""
        folder = Path(folder)
        doc = json.loads((folder / SPARSE_META).read_text())
        if int(doc.get("version", 0)) > SPARSE_FORMAT_VERSION_ITEMS:
            raise ValueError(
                f"{folder / SPARSE_META}: format version {doc['version']} is newer than {SPARSE_FORMAT_VERSION_ITEMS}"
            )
        plan = [PlanEntry(**p) for p in doc["plan"]]
        metas = [TableMeta(**{**t, "parts": [TablePart(**x) for x in t["parts"]]}) for t in doc["tables"]]
        zch = {m.name: m.zch for m in metas if m.zch is not None}
        try:
            remaps = load_remaps(folder, zch) if zch else {}
            _check_zch(metas, remaps)
        except ValueError as err:
            raise ArtifactError(f"{folder}: {err}") from None
        return cls(doc["keys"], plan, metas, _load_weights(folder, metas), remaps)

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self.plan]

    def split(
        self, values: torch.Tensor, lengths: torch.Tensor, batch_size: int
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """KJT-layout ``values (N,)`` and ``lengths (F * B,)`` → per key ``(ids, offsets (B + 1,))``."""
        nkeys = len(self.keys)
        if lengths.numel() != nkeys * batch_size:
            raise ValueError(
                f"lengths has {lengths.numel()} entries; expected {nkeys} keys x batch {batch_size}"
            )
        lengths = lengths.to(torch.int64).view(nkeys, batch_size)
        per_key = lengths.sum(dim=1)
        if int(per_key.sum()) != values.numel():
            raise ValueError(f"values has {values.numel()} ids but lengths sum to {int(per_key.sum())}")
        out = {}
        for key, ids, ln in zip(self.keys, values.to(torch.int64).split(per_key.tolist()), lengths):
            offsets = torch.zeros(batch_size + 1, dtype=torch.int64)
            torch.cumsum(ln, 0, out=offsets[1:])
            out[key] = (ids, offsets)
        return out

    def __call__(
        self, values: torch.Tensor, lengths: torch.Tensor, batch_size: int
    ) -> dict[str, torch.Tensor]:
        """Dense-part inputs, named as in the plan."""
        return self.assemble(self.split(values, lengths, batch_size))

    def assemble(
        self, per_key: dict[str, tuple[torch.Tensor, torch.Tensor]], with_offsets: bool = True
    ) -> dict[str, torch.Tensor]:
        """Dense-part inputs from per key ``(ids, offsets)`` (:meth:`split`'s; the keys of one input may hold
        another number of rows than the rest: one shared history for B candidates); ``with_offsets=False`` leaves out
        the ``offsets`` entries."""
        out: dict[str, torch.Tensor] = {}
        for p in self.plan:
            if p.kind == "offsets":
                if with_offsets:
                    out[p.name] = per_key[p.keys[0]][1]
                continue
            parts = []
            for key in p.keys:
                ids, offsets = per_key[key]
                if key in p.floats:
                    parts.append(item_floats(ids))
                    continue
                table = self._table_of[key]
                weight = self.weights[table]
                if table in self._remaps:
                    ids = remap_ids(ids, *self._remaps[table])
                if p.kind == "pooled" and key in p.weights:
                    w = item_floats(per_key[p.weights[key]][0]).squeeze(1)
                    parts.append(
                        weighted_bag(ids, weight, offsets, w, self._pooling.get(key, "sum") == "mean")
                    )
                elif p.kind == "pooled":
                    parts.append(
                        torch.nn.functional.embedding_bag(
                            ids, weight, offsets[:-1], mode=self._pooling.get(key, "sum")
                        )
                    )
                elif key in p.items:
                    counts_key, mode = p.items[key]
                    rows = torch.nn.functional.embedding(ids, weight)
                    parts.append(pool_items(rows, per_key[counts_key][0], mode == "mean"))
                else:
                    parts.append(torch.nn.functional.embedding(ids, weight))
            out[p.name] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return out


def weighted_bag(
    ids: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor, mean: bool
) -> torch.Tensor:
    """A weighted id's pooled ``(B, D)``: ``Σ w·e`` per row, ``/ n`` (its id count) for ``mean`` (FBGEMM's weighted
    MEAN, as the model's weighted EmbeddingBagCollection); ``offsets`` ``(B + 1,)``."""
    out = torch.nn.functional.embedding_bag(ids, weight, offsets[:-1], mode="sum", per_sample_weights=weights)
    if mean:
        out = out / (offsets[1:] - offsets[:-1]).clamp_min(1).to(out.dtype).unsqueeze(1)
    return out


def _check_zch(metas: list[TableMeta], remaps: dict[str, ZchRemap]) -> None:
    """Every zch table (``meta.zch``) has a remapping of its sizes and every remapping a zch table."""
    zch = {m.name: m for m in metas if m.zch is not None}
    problems = [f"table {t!r} has a zch remapping but is not a zch table" for t in remaps if t not in zch]
    for name, m in zch.items():
        remap = remaps.get(name)
        if remap is None:
            problems.append(f"zch table {name!r} has no remapping")
            continue
        if remap.table_rows != m.rows:
            problems.append(
                f"zch table {name!r}: the remapping covers {remap.table_rows} rows, the table has {m.rows}"
            )
        elif remap.sizes() != m.zch:
            problems.append(f"zch table {name!r}: remapping sizes {remap.sizes()}, sparse.json {m.zch}")
    if problems:
        raise ValueError("; ".join(problems))


def _load_weights(folder: Path, metas: list[TableMeta]) -> dict[str, torch.Tensor]:
    handles: dict[str, Any] = {}
    weights: dict[str, torch.Tensor] = {}
    try:
        for m in metas:
            pieces = []
            for part in m.parts:
                if part.file not in handles:
                    handles[part.file] = safe_open(str(folder / part.file), framework="pt")
                pieces.append(handles[part.file].get_tensor(part.tensor))
            weight = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
            if tuple(weight.shape) != (m.rows, m.dim):
                raise ValueError(
                    f"table {m.name!r}: stored {tuple(weight.shape)}, metadata ({m.rows}, {m.dim})"
                )
            weights[m.name] = weight
    finally:
        handles.clear()
    return weights


def fg_to_kjt_arrays(
    values: list[np.ndarray], lengths: list[np.ndarray]
) -> tuple[torch.Tensor, torch.Tensor]:
    """FG's per-key arrays → KJT-layout ``values (N,) int64`` and ``lengths (F * B,) int32``."""
    v = np.concatenate(values) if values else np.zeros(0, np.int64)
    ln = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)
    return torch.from_numpy(v.astype(np.int64, copy=False)), torch.from_numpy(ln.astype(np.int32, copy=False))
