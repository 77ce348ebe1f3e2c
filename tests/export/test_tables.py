"""Embedding tables in safetensors shards: size-capped shards, tables split by rows, and lookups that
equal TorchRec's pooled / jagged semantics."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from recpipe.export.tables import SPARSE_META, PlanEntry, SparseLookup, TableMeta, write_tables

KEYS = ["user", "item", "hist_item"]


def _metas() -> list[TableMeta]:
    return [
        TableMeta(
            "user", 50, 4, "float32", ["user"], {"user": "mean"}, {"user": {"kind": "mod", "size": 50}}
        ),
        TableMeta(
            "item",
            30,
            4,
            "float32",
            ["item", "hist_item"],
            {"item": "sum"},
            {"item": {"kind": "hash", "size": 30}},
        ),
    ]


PLAN = [
    PlanEntry("user", "pooled", ["user"]),
    PlanEntry("g__query", "pooled", ["item"]),
    PlanEntry("g__values", "sequence", ["hist_item"]),
    PlanEntry("g__offsets", "offsets", ["hist_item"]),
]


@pytest.fixture()
def tables() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"user": torch.randn(50, 4, generator=g), "item": torch.randn(30, 4, generator=g)}


def test_shards_respect_the_cap_and_split_big_tables(tables, tmp_path):
    cap = 12 * 4 * 4  # 192 bytes: 12 rows of 4 float32 per shard
    files = write_tables(tables, _metas(), PLAN, KEYS, tmp_path, max_shard_bytes=cap)
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) == (50 + 30) * 16 // cap + 1 and files[-1] == SPARSE_META
    for name in shards:
        with safe_open(str(tmp_path / name), framework="pt") as fh:
            assert sum(fh.get_tensor(k).numel() * 4 for k in fh.keys()) <= cap
    meta = json.loads((tmp_path / SPARSE_META).read_text())
    parts = meta["tables"][0]["parts"]
    assert parts[0]["row_start"] == 0 and parts[-1]["row_stop"] == 50 and len(parts) > 1
    assert meta["tables"][1]["features"] == ["item", "hist_item"] and meta["keys"] == KEYS
    loaded = SparseLookup.load(tmp_path)
    for name, w in tables.items():
        assert torch.equal(loaded.weights[name], w)


def test_lookup_matches_embedding_bag_semantics(tables, tmp_path):
    write_tables(tables, _metas(), PLAN, KEYS, tmp_path)
    lookup = SparseLookup.load(tmp_path)
    # B = 3:          row 0      row 1    row 2
    #   user          [1, 2]     []       [7]
    #   item          [3]        [4]      []
    #   hist_item     [5, 6, 7]  []       [8]
    values = torch.tensor([1, 2, 7, 3, 4, 5, 6, 7, 8])
    lengths = torch.tensor([2, 0, 1, 1, 1, 0, 3, 0, 1], dtype=torch.int32)
    out = lookup(values, lengths, batch_size=3)
    u, i = tables["user"], tables["item"]
    torch.testing.assert_close(out["user"], torch.stack([(u[1] + u[2]) / 2, torch.zeros(4), u[7]]))
    torch.testing.assert_close(out["g__query"], torch.stack([i[3], i[4], torch.zeros(4)]))
    torch.testing.assert_close(out["g__values"], i[[5, 6, 7, 8]])
    assert out["g__offsets"].tolist() == [0, 3, 3, 4]
    assert lookup.input_names == ["user", "g__query", "g__values", "g__offsets"]


def test_lookup_rejects_inconsistent_lengths(tables, tmp_path):
    write_tables(tables, _metas(), PLAN, KEYS, tmp_path)
    lookup = SparseLookup.load(tmp_path)
    with pytest.raises(ValueError, match="expected 3 keys x batch 2"):
        lookup(torch.tensor([1]), torch.tensor([1, 0, 0, 0, 0], dtype=torch.int32), batch_size=2)
    with pytest.raises(ValueError, match="values has 1 ids but lengths sum to 2"):
        lookup(torch.tensor([1]), torch.tensor([1, 0, 0, 0, 0, 1], dtype=torch.int32), batch_size=2)
