"""Frozen zero-collision (zch) remapping: 63-bit id keys → table rows, as a trained model does at eval.

A zch table (TorchRec managed collision) gives each admitted id key its own row; training admits and
evicts ids, inference does neither. At export the remapping is frozen into four int64 arrays per
table::

    keys            (K,)   admitted keys, strictly increasing
    rows            (K,)   the row of each key
    miss_key_starts (M,)   key ranges for keys without a row: range r is [starts[r], starts[r + 1])
    miss_rows       (M,)   the row each range's unseen keys look up

One range (``[0]`` → the table's last row) for a model trained on one rank; ``W`` ranges for an
unsharded model of a ``W``-rank run (each rank kept the last of its rows for the keys of its part of the
key space). The lookup (:func:`remap_ids`) is plain torch (``searchsorted``, ``where``), so TorchScript,
``torch.export``/AOTInductor and the torchrec-free RTP server all run the same code.

The arrays live in ``zch.safetensors`` next to the embedding shards (tensors ``<table>/keys``, ...),
whose safetensors metadata says which tables are zch and their sizes; :func:`load_remaps` checks them
against ``sparse.json`` and the tables before anything is scored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

ZCH_FILE = "zch.safetensors"
ZCH_METADATA = "recpipe.zch"
ARRAYS = ("keys", "rows", "miss_key_starts", "miss_rows")
INT64_MAX = torch.iinfo(torch.int64).max


@dataclass
class ZchRemap:
    """One table's frozen remapping (see the module docstring).

    Args:
        table_rows (int): rows of the embedding table (the zch size).
        keys (torch.Tensor): ``(K,)`` int64 admitted keys, strictly increasing, ``K < table_rows``.
        rows (torch.Tensor): ``(K,)`` int64 row of each key, in ``[0, table_rows)``.
        miss_key_starts (torch.Tensor): ``(M,)`` int64 starts of the key ranges, ``[0, ...]`` increasing.
        miss_rows (torch.Tensor): ``(M,)`` int64 row of keys without a row, per range.

    Example::

        remap = ZchRemap(8, torch.tensor([5, 90]), torch.tensor([2, 0]), torch.tensor([0]), torch.tensor([7]))
        remap(torch.tensor([90, 5, 6]))     # tensor([0, 2, 7]): 6 was never admitted
    """

    table_rows: int
    keys: torch.Tensor
    rows: torch.Tensor
    miss_key_starts: torch.Tensor
    miss_rows: torch.Tensor

    def __post_init__(self) -> None:
        for name in ARRAYS:
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 1:
                raise ValueError(f"zch remap {name} must be a 1-d int64 tensor, got {_describe(value)}")

    def check(self, table: str) -> None:
        """Raise ``ValueError`` naming ``table`` unless the arrays are a consistent remapping."""
        n = self.table_rows
        problems = []
        if self.keys.numel() != self.rows.numel():
            problems.append(f"{self.keys.numel()} keys but {self.rows.numel()} rows")
        if self.keys.numel() >= n:
            problems.append(f"{self.keys.numel()} keys for a table of {n} rows (at most {n - 1})")
        if self.keys.numel() > 1 and not bool((self.keys[1:] > self.keys[:-1]).all()):
            problems.append("keys are not strictly increasing")
        if self.keys.numel() and int(self.keys[-1]) == INT64_MAX:
            problems.append("a key is int64 max (TorchRec's empty-slot marker)")
        if self.miss_key_starts.numel() != self.miss_rows.numel() or self.miss_rows.numel() == 0:
            problems.append(
                f"{self.miss_key_starts.numel()} miss key ranges but {self.miss_rows.numel()} miss rows"
            )
        elif int(self.miss_key_starts[0]) != 0 or (
            self.miss_key_starts.numel() > 1
            and not bool((self.miss_key_starts[1:] > self.miss_key_starts[:-1]).all())
        ):
            problems.append("miss key ranges do not start at 0 and increase")
        for name in ("rows", "miss_rows"):
            t = getattr(self, name)
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
                problems.append(f"{name} outside [0, {n})")
        if self.rows.numel() == self.keys.numel() and self.rows.numel() > 1:
            if torch.unique(self.rows).numel() != self.rows.numel():
                problems.append("two keys share a row")
        if problems:
            raise ValueError(f"zch table {table!r}: inconsistent remapping: " + "; ".join(problems))

    def sizes(self) -> dict[str, int]:
        return {"rows": self.table_rows, "keys": self.keys.numel(), "miss_ranges": self.miss_rows.numel()}

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return remap_ids(ids, *padded(self))


def padded(remap: ZchRemap) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The arrays :func:`remap_ids` takes: keys and rows end in an ``int64 max`` sentinel (never a key
    FG emits) that looks up the last range's miss row, so an empty remapping needs no special case."""
    sentinel = torch.tensor([INT64_MAX], dtype=torch.int64)
    return (
        torch.cat([remap.keys, sentinel]).contiguous(),
        torch.cat([remap.rows, remap.miss_rows[-1:]]).contiguous(),
        remap.miss_key_starts.contiguous(),
        remap.miss_rows.contiguous(),
    )


def remap_ids(
    ids: torch.Tensor,
    keys: torch.Tensor,
    rows: torch.Tensor,
    miss_key_starts: torch.Tensor,
    miss_rows: torch.Tensor,
) -> torch.Tensor:
    """Rows of ``ids (N,)`` int64 keys: the key's row if admitted, else its range's miss row.

    ``keys``/``rows`` as from :func:`padded` (sentinel-terminated). TorchScript-able and exportable.
    """
    at = torch.searchsorted(keys, ids).clamp(max=keys.numel() - 1)
    hit = keys[at] == ids
    rng = (torch.searchsorted(miss_key_starts, ids, right=True) - 1).clamp(min=0)
    return torch.where(hit, rows[at], miss_rows[rng])


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} of shape {tuple(value.shape)}"
    return type(value).__name__


# ---------------------------------------------------------------------------------------- files
def write_remaps(folder: str | Path, remaps: dict[str, ZchRemap]) -> str:
    """Write ``zch.safetensors`` (tensors ``<table>/<array>``, metadata: the tables and their sizes)."""
    tensors: dict[str, torch.Tensor] = {}
    for table, remap in remaps.items():
        remap.check(table)
        for name in ARRAYS:
            tensors[f"{table}/{name}"] = getattr(remap, name).contiguous().clone()
    meta = {table: r.sizes() for table, r in remaps.items()}
    save_file(
        tensors, str(Path(folder) / ZCH_FILE), metadata={"format": "pt", ZCH_METADATA: json.dumps(meta)}
    )
    return ZCH_FILE


def load_remaps(folder: str | Path, tables: dict[str, dict[str, int]]) -> dict[str, ZchRemap]:
    """Read ``zch.safetensors`` and check it against ``tables`` (``sparse.json``: zch table → its sizes).

    Raises:
        ValueError: the file's tables or sizes differ from ``sparse.json``, or a remapping is
            inconsistent (unsorted keys, rows outside the table, ...).
    """
    path = Path(folder) / ZCH_FILE
    with safe_open(str(path), framework="pt") as fh:
        meta_text = (fh.metadata() or {}).get(ZCH_METADATA)
        if meta_text is None:
            raise ValueError(f"{path}: no {ZCH_METADATA!r} metadata; not a recpipe zch remapping file")
        stored = json.loads(meta_text)
        if sorted(stored) != sorted(tables):
            raise ValueError(f"{path}: holds zch tables {sorted(stored)}, sparse.json lists {sorted(tables)}")
        out = {}
        for table, sizes in tables.items():
            if stored[table] != sizes:
                raise ValueError(
                    f"{path}: zch table {table!r} has sizes {stored[table]}, sparse.json {sizes}"
                )
            names = set(fh.keys())
            missing = [f"{table}/{a}" for a in ARRAYS if f"{table}/{a}" not in names]
            if missing:
                raise ValueError(f"{path}: missing tensors {missing}")
            remap = ZchRemap(sizes["rows"], *(fh.get_tensor(f"{table}/{a}") for a in ARRAYS))
            if remap.sizes() != sizes:
                raise ValueError(
                    f"{path}: zch table {table!r} stores {remap.sizes()}, its metadata says {sizes}"
                )
            try:
                remap.check(table)
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None
            out[table] = remap
    return out
