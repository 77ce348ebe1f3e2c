"""The admission counter of a zch table (recpipe/models/blocks/zch_admission.py), by hand: counts across steps,
the ids that pass to the table's admission, the rule of a full counter, forgetting admitted ids; the unsharded
lookup (the export tests' training) reads the constant for ids without a row with no gradient; the config
field reaches the TableSpec and fg.json, and is refused without zch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from pydantic import ValidationError
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.config import parse_config
from recpipe.config.features import IdFeatureConfig
from recpipe.features.build import build_feature_spec
from recpipe.features.spec import FeatureSpec, FeatureSpecError, ZchAdmission
from recpipe.models.blocks.embedding import managed_collision_ec
from recpipe.models.blocks.zch_admission import (
    EMPTY,
    constant_without_row,
    count_sightings,
    forget_admitted,
    hold_spare_rows,
)
from recpipe.train.memory import embedding_memory_report

ROOT = Path(__file__).resolve().parents[2]
NO_TABLE = torch.tensor([EMPTY])


def _counter(capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((capacity,), EMPTY), torch.zeros(capacity, dtype=torch.int64)


def _entries(keys: torch.Tensor, counts: torch.Tensor) -> list[tuple[int, int]]:
    return [(k, c) for k, c in zip(keys.tolist(), counts.tolist(), strict=True) if k != EMPTY]


def test_sightings_add_up_across_steps_and_pass_at_the_threshold():
    keys, counts = _counter(4)
    passes = count_sightings(keys, counts, torch.tensor([30, 10, 30]), NO_TABLE, 3)
    assert passes.tolist() == [False, False, False]
    assert _entries(keys, counts) == [(10, 1), (30, 2)]
    passes = count_sightings(keys, counts, torch.tensor([10, 30, 20]), NO_TABLE, 3)
    assert passes.tolist() == [False, True, False]  # 30: 2 + 1
    assert _entries(keys, counts) == [(10, 2), (20, 1), (30, 3)]
    # ids holding a row always pass and are not counted
    passes = count_sightings(keys, counts, torch.tensor([40, 10]), torch.tensor([40, EMPTY]), 3)
    assert passes.tolist() == [True, True]
    assert _entries(keys, counts) == [(10, 3), (20, 1), (30, 3)]
    forget_admitted(keys, counts, torch.tensor([10, 30, EMPTY]))  # the eviction gave 10 and 30 rows
    assert _entries(keys, counts) == [(20, 1)]


def test_a_full_counter_keeps_the_highest_counts_old_ids_first_on_a_tie():
    keys, counts = _counter(3)
    count_sightings(keys, counts, torch.tensor([5, 5, 5, 7, 9]), NO_TABLE, 10)  # 5:3 7:1 9:1
    count_sightings(keys, counts, torch.tensor([1, 2, 2, 8]), NO_TABLE, 10)  # 1:1 2:2 8:1 are new
    # 6 ids for 3 slots: 5 (3), 2 (2), then of the count-1 ids the old 7 before 9 (smaller key)
    assert _entries(keys, counts) == [(2, 2), (5, 3), (7, 1)]


class _Lookup(nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        config = EmbeddingConfig(name="item", num_embeddings=4, embedding_dim=2, feature_names=["item"])
        self.mc = managed_collision_ec([config], admissions={"item": ZchAdmission(2, None, value)})

    def forward(self, keys: list[int]) -> torch.Tensor:
        kjt = KeyedJaggedTensor.from_lengths_sync(
            ["item"], torch.tensor(keys), torch.ones(len(keys), dtype=torch.int32)
        )
        out, _ = self.mc(kjt)
        return constant_without_row(self.mc, kjt, {"item": out["item"]})["item"].values()


def test_the_unsharded_lookup_reads_the_constant_without_a_gradient():
    torch.manual_seed(0)
    model = _Lookup(-0.5).train()
    weight = model.mc._embedding_module.embeddings["item"].weight
    assert torch.equal(weight[3], torch.full((2,), -0.5))  # built with the spare row at the constant
    out = model([7, 8, 7])  # 7 twice: a row now; 8 once
    assert torch.equal(out[1], torch.full((2,), -0.5)) and not torch.equal(out[0], out[1])
    out.sum().backward()
    assert torch.equal(weight.grad[3], torch.zeros(2))  # the spare row: no gradient
    assert weight.grad.abs().sum() > 0
    model.eval()
    assert torch.equal(model([9])[0], torch.full((2,), -0.5))  # never seen: the constant, nothing counted
    remap = model.mc._managed_collision_collection._managed_collision_modules["item"]
    assert 9 not in remap._admit_keys.view(-1).tolist()
    with torch.no_grad():
        weight[3] = 5.0
    hold_spare_rows(model.mc)
    assert torch.equal(weight[3], torch.full((2,), -0.5))


def _feature(**extra) -> dict:
    return {"kind": "id", "name": "user_id", "hash_bucket_size": 100, **extra}


def test_the_config_needs_zch_and_valid_ranges():
    with pytest.raises(ValidationError, match="zch_admission is set but zch is false"):
        IdFeatureConfig(**_feature(zch_admission={"threshold": 2}))
    for bad in (
        {"threshold": 0},
        {"threshold": 2, "counter_capacity": 0},
        {"threshold": 2, "default_value": "nan"},
    ):
        with pytest.raises(ValidationError):
            IdFeatureConfig(**_feature(zch=True, zch_admission=bad))
    with pytest.raises(FeatureSpecError, match="threshold >= 1"):
        ZchAdmission(0)


def test_the_admission_reaches_the_table_fg_json_and_the_memory_report():
    data = yaml.safe_load((ROOT / "configs" / "din_taobao_small.yaml").read_text())
    for f in data["features"]:
        if f["name"] == "user_id":
            f.update(zch=True, zch_size=64, zch_admission={"threshold": 4, "counter_capacity": 100})
    spec = build_feature_spec(parse_config(data))
    table = next(t for t in spec.tables() if t.name == "user_id")
    assert table.zch_admission == ZchAdmission(4, 100, 0.0)
    entry = next(e for e in spec.to_dict()["sparse"] if e["name"] == "user_id")
    assert entry["zch_admission"] == {"threshold": 4, "counter_capacity": 100, "value": 0.0}
    assert all("zch_admission" not in e for e in spec.to_dict()["sparse"] if e["name"] != "user_id")
    assert FeatureSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    # 100 ids over 64 rows: 2 slots a row, a key and a count each
    report = {t.name: t for t in embedding_memory_report(spec, "adagrad").tables}
    assert report["user_id"].zch_bytes == 64 * 4 * 8 + 64 * 2 * 2 * 8
