"""Managed-collision (zch) embeddings, unsharded: one row per distinct id until the table is full,
DistanceLFU eviction, nothing admitted in eval mode, EmbeddingGroup lookups through the remapping."""

from __future__ import annotations

import pytest
import torch
import yaml
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.models.blocks.embedding import EmbeddingGroup, managed_collision_ec
from recpipe.models.registry import build_model

ROWS = 8  # 7 rows for ids, the last for ids without a row
MISS = ROWS - 1
# 63-bit keys as FG emits them; a few on each side of 2**62
A, B, C, D, E, F, G, H = (k * (1 << 59) + 12345 for k in range(1, 9))


def _kjt(keys: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        ["item"], torch.tensor(keys), torch.ones(len(keys), dtype=torch.int32)
    )


@pytest.fixture
def mc():
    torch.manual_seed(0)
    config = EmbeddingConfig(name="item", num_embeddings=ROWS, embedding_dim=4, feature_names=["item"])
    return managed_collision_ec([config])


def _train_step(mc, keys: list[int]) -> torch.Tensor:
    mc.train()
    out, _ = mc(_kjt(keys))
    return out["item"].values()


def _rows(mc, keys: list[int]) -> list[int]:
    """Where ``keys`` look up now (eval mode: reads the remapping without changing it)."""
    mcc = mc._managed_collision_collection
    was = mcc.training
    mcc.eval()
    rows = mcc(_kjt(keys)).values().tolist()
    mcc.train(was)
    return rows


def test_distinct_ids_get_distinct_rows_until_the_table_is_full(mc):
    assert _rows(mc, [A, B]) == [MISS, MISS]  # nothing admitted yet
    _train_step(mc, [A, B, C])
    _train_step(mc, [D, E, A])
    _train_step(mc, [F, G])
    rows = _rows(mc, [A, B, C, D, E, F, G])
    assert sorted(rows) == list(range(MISS))  # 7 ids, 7 rows, none shared, none the miss row
    emb = mc._embedding_module.embeddings["item"].weight
    assert torch.equal(_train_step(mc, [A, G]), emb[[rows[0], rows[6]]])  # the lookup reads those rows


def test_every_id_of_a_larger_later_batch_is_admitted(mc):
    # TorchRec sizes the per-step id buffer from the first batch (1.25 × 2 ids) and dropped the rest
    _train_step(mc, [A, B])
    _train_step(mc, [C, D, E, F, G])
    assert sorted(_rows(mc, [A, B, C, D, E, F, G])) == list(range(MISS))


def test_a_full_table_evicts_the_least_and_least_recently_used_id(mc):
    _train_step(mc, [A, A, A, B, C])  # A seen 3 times
    _train_step(mc, [D, E])
    _train_step(mc, [F, G])
    before = dict(zip("ABCDEFG", _rows(mc, [A, B, C, D, E, F, G])))
    _train_step(mc, [H])
    after = dict(zip("ABCDEFGH", _rows(mc, [A, B, C, D, E, F, G, H])))
    # DistanceLFU scores count / (steps since last seen + 1): H (1/1) displaces B or C (1/4), not A (3/4)
    evicted = [k for k in "BC" if after[k] == MISS]
    assert len(evicted) == 1
    assert after["H"] == before[evicted[0]]  # the new id takes the evicted id's row
    for k in "ADEFG":
        assert after[k] == before[k]


def test_eval_mode_admits_and_evicts_nothing(mc):
    _train_step(mc, [A, B])
    mc.eval()
    mc(_kjt([C, D, E]))
    assert _rows(mc, [C, D, E]) == [MISS, MISS, MISS]
    assert MISS not in _rows(mc, [A, B])


def test_unsharded_module_of_a_two_rank_run_sends_unknown_ids_to_their_ranks_row():
    # A 2-rank run owns rows [0, 4) for keys < 2**62 and [4, 8) for the rest; its rank-local miss rows
    # are 3 and 7. Loaded unsharded, unknown keys must go to those rows, as in training.
    mc_a = managed_collision_ec(
        [EmbeddingConfig(name="item", num_embeddings=ROWS, embedding_dim=4, feature_names=["item"])]
    )
    module = mc_a._managed_collision_collection._managed_collision_modules["item"]
    state = {k: v.clone() for k, v in module.state_dict().items()}
    segments = torch.full((1025,), -1, dtype=torch.int64)
    segments[:3] = torch.tensor([0, 4, 8])
    state["_output_segments_tensor"] = segments
    state["_mch_sorted_raw_ids"][:2] = torch.tensor([A, E])  # A < 2**62 on rank 0, E on rank 1
    state["_mch_remapped_ids_mapping"][:2] = torch.tensor([0, 4])
    module.load_state_dict(state)
    unknown_low, unknown_high = 3, (1 << 62) + 7
    assert _rows(mc_a, [A, E, unknown_low, unknown_high]) == [0, 4, 3, 7]


def test_embedding_group_pools_zch_keys_through_the_remapping():
    data = yaml.safe_load(open("configs/din_taobao_small.yaml").read())
    for f in data["features"]:
        if f["name"] in ("user_id", "adgroup_id"):
            f.update(zch=True, zch_size=50)
        for sub in f.get("sub_features", []):
            if sub["name"] == "adgroup_id":
                sub.update(zch=True, zch_size=50)
    cfg = parse_config(data)
    spec = build_feature_spec(cfg)
    model = build_model(spec, cfg.model)
    group: EmbeddingGroup = model.embeddings
    assert group.tables()["mc_ec"] == ["user_id", "adgroup_id"]
    assert "adgroup_id" not in group.tables()["ec"] and "user_id" not in group.tables()["ebc"]
    # B = 2 rows: user_id [U1] [U2], adgroup_id [A] [], click_50_seq__adgroup_id [A, B] [C]
    keys = spec.sparse_keys()
    per_key = {k: [[0], [1]] for k in keys}
    per_key.update(
        user_id=[[A], [B]], adgroup_id=[[A], []], click_50_seq__adgroup_id=[[A, B], [C]],
        click_50_seq__cate_id=[[1, 2], [3]], click_50_seq__brand=[[1, 2], [3]],
    )  # fmt: skip
    values = torch.tensor([v for k in keys for row in per_key[k] for v in row])
    lengths = torch.tensor([len(row) for k in keys for row in per_key[k]], dtype=torch.int32)
    kjt = KeyedJaggedTensor.from_lengths_sync(keys, values, lengths)
    group.train()
    out = group(kjt)
    weight = group.mc_ec._embedding_module.embeddings["adgroup_id"].weight
    mcc = group.mc_ec._managed_collision_collection
    mcc.eval()
    rows = mcc(kjt.permute([keys.index(k) for k in group._keys["mc_ec"]]))["adgroup_id"].values()
    assert len(set(rows.tolist())) == 1 and rows.item() != 49  # A got a row of its own
    assert torch.equal(out.pooled["adgroup_id"][0], weight[rows.item()])
    assert torch.equal(out.pooled["adgroup_id"][1], torch.zeros(16))  # no id: an empty bag
    hist = mcc(kjt.permute([keys.index(k) for k in group._keys["mc_ec"]]))[
        "click_50_seq__adgroup_id"
    ].values()
    assert out.values["click_50_seq__adgroup_id"].shape == (3, 16)
    assert torch.equal(out.values["click_50_seq__adgroup_id"], weight[hist])
    assert out.offsets["click_50_seq__adgroup_id"].tolist() == [0, 2, 3]
