"""Zero-collision (zch) features in config, FeatureSpec and FG: FG keeps the whole id as a 63-bit key."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import yaml
from rowwise import rowwise_fg

from recpipe.config import ConfigError, parse_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.hashing import (
    ZCH_KEY_SPACE,
    fnv1a64,
    zch_key_py,
    zch_keys_from_hashes,
    zch_keys_from_ints,
)
from recpipe.features.spec import FeatureSpec, FeatureSpecError

CONFIG = "configs/din_taobao_small.yaml"


def _config(zch: dict[str, dict], sub_zch: dict[str, dict] | None = None) -> dict:
    """The small DIN config with ``zch`` options merged into the named features / history sub-features."""
    data = yaml.safe_load(open(CONFIG).read())
    for f in data["features"]:
        f.update(zch.get(f["name"], {}))
        for sub in f.get("sub_features", []):
            sub.update((sub_zch or {}).get(sub["name"], {}))
    return data


def test_integer_keys_are_distinct_non_negative_and_below_the_empty_slot_marker():
    rng = np.random.default_rng(0)
    ids = np.concatenate([np.arange(100_000), rng.integers(0, 2**62, 100_000), [2**63 - 1, 10**18 - 1]])
    keys = zch_keys_from_ints(ids)
    assert keys.dtype == np.int64
    assert len(np.unique(keys)) == len(np.unique(ids))  # no two ids share a key
    assert keys.min() >= 0 and keys.max() < ZCH_KEY_SPACE
    # spread over the key space: row-wise sharding gives rank r the r-th 1/W of it
    assert 0.45 < (keys[:100_000] < 2**62).mean() < 0.55
    assert [zch_key_py(int(i)) for i in ids[-5:]] == keys[-5:].tolist()


def test_string_keys_are_fnv1a_without_the_top_bit():
    arr = pa.array(["430548_1007", "430539_1007", ""])
    keys = zch_keys_from_hashes(fnv1a64(arr))
    assert keys.tolist() == [zch_key_py(s) for s in arr.to_pylist()]
    assert keys.tolist() == [int(h) & (2**63 - 1) for h in fnv1a64(arr)]


def test_fg_emits_keys_not_buckets_for_zch_features_and_buckets_for_the_rest(tmp_path):
    data = _config(
        {"adgroup_id": {"zch": True}, "pid": {"zch": True, "zch_size": 64}},
        {"adgroup_id": {"zch": True}},
    )
    spec = build_feature_spec(parse_config(data))
    generate("taobao", 512, tmp_path / "d", seed=5)
    rows = _read(tmp_path / "d")
    out = FeatureGenerator(spec)(rows)
    keys = spec.sparse_keys()
    values = dict(zip(keys, out.values))
    raw_ad = rows.column("adgroup_id").to_numpy()
    assert values["adgroup_id"].tolist() == zch_keys_from_ints(raw_ad).tolist()
    assert values["adgroup_id"].max() > spec.feature("adgroup_id").mapping.size  # not reduced
    pid = rows.column("pid").cast(pa.string())
    assert values["pid"].tolist() == zch_keys_from_hashes(fnv1a64(pid)).tolist()
    # non-zch features are unchanged: id % num_buckets
    raw_user = rows.column("user_id").to_numpy()
    assert values["user_id"].tolist() == (raw_user % spec.feature("user_id").mapping.size).tolist()
    # the history and the candidate share one table: the same raw id gets the same key in both
    items = [s.split("\x03")[0] for h in rows.column("click_50_seq").to_pylist() if h for s in h.split("|")]
    hist = values["click_50_seq__adgroup_id"]
    assert hist.tolist() == [zch_key_py(int(i)) for i in items]


def test_vectorized_fg_matches_the_per_row_reference_with_zch(tmp_path):
    data = _config({"adgroup_id": {"zch": True}, "pid": {"zch": True}}, {"adgroup_id": {"zch": True}})
    spec = build_feature_spec(parse_config(data))
    generate("taobao", 300, tmp_path / "d", seed=6)
    rows = _read(tmp_path / "d")
    fast = FeatureGenerator(spec)(rows)
    slow, skipped = rowwise_fg(spec, rows)
    assert skipped == 0
    for key, a, b in zip(spec.sparse_keys(), fast.values, slow.values):
        assert a.tolist() == b.tolist(), key


def test_general_history_path_emits_the_same_keys_as_the_fast_path():
    data = _config({"adgroup_id": {"zch": True}}, {"adgroup_id": {"zch": True}})
    spec = build_feature_spec(parse_config(data))
    items = [f"{i}\x03{i + 1}\x03{i + 2}" for i in range(101)]
    base = {c: [1] for c in spec.input_columns()}
    base.update({"pid": ["430548_1007"], "price": [1.0], "clk": [0], "user_id": [7]})
    keys = spec.sparse_keys()
    outs = []
    for n in (101, 100):  # 101 items: truncated by the general path; 100: the one-pass fast path
        fg = FeatureGenerator(spec)
        batch = pa.RecordBatch.from_pydict({**base, "click_50_seq": ["|".join(items[:n])]})
        outs.append(dict(zip(keys, fg(batch).values)))
        assert fg.stats.truncated_histories == (n > 100)
    expected = [zch_key_py(i) for i in range(100)]
    assert outs[0]["click_50_seq__adgroup_id"].tolist() == expected
    assert outs[1]["click_50_seq__adgroup_id"].tolist() == expected
    assert outs[0]["click_50_seq__cate_id"].tolist() == [
        i + 1 for i in range(100)
    ]  # not zch: id % num_buckets


def test_table_spec_carries_the_zch_size():
    spec = build_feature_spec(
        parse_config(
            _config(
                {"adgroup_id": {"zch": True, "zch_size": 5000}, "user_id": {"zch": True}},
                {"adgroup_id": {"zch": True}},
            )
        )
    )
    tables = {t.name: t for t in spec.tables()}
    assert tables["adgroup_id"].zch_size == tables["adgroup_id"].num_embeddings == 5000
    assert tables["user_id"].zch_size == tables["user_id"].num_embeddings == 1_141_730  # num_buckets
    assert tables["cate_id"].zch_size is None


@pytest.mark.parametrize(
    ("zch", "message"),
    [
        ({"cms_segid": {"zch": False, "zch_size": 10}}, "zch_size is set but zch is false"),
        ({"cms_segid": {"zch": True, "zch_size": 1}}, "greater than or equal to 2"),
        ({"cms_segid": {"zch_eviction_policy": "lru"}}, "zch_eviction_policy is set but zch is false"),
        ({"cms_segid": {"zch_decay_exponent": 2.0}}, "zch_decay_exponent is set but zch is false"),
        (
            {"cms_segid": {"zch": True, "zch_eviction_policy": "lfu", "zch_decay_exponent": 2.0}},
            "policy is lfu",
        ),
        ({"cms_segid": {"zch": True, "zch_eviction_policy": "fifo"}}, "'distance_lfu', 'lfu' or 'lru'"),
        ({"cms_segid": {"zch": True, "zch_decay_exponent": 0}}, "greater than 0"),
    ],
)
def test_config_rejects_bad_zch_options(zch, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(_config(zch))


def test_config_rejects_zch_on_a_vocabulary():
    data = _config({})
    data["features"].append({"kind": "id", "name": "color", "vocab_list": ["red", "blue"], "zch": True})
    with pytest.raises(ConfigError, match="zch needs hash_bucket_size or num_buckets, got vocab_list"):
        parse_config(data)


def test_shared_table_with_only_one_side_zch_is_rejected():
    cfg = parse_config(_config({"adgroup_id": {"zch": True}}))  # the history's adgroup_id is not zch
    with pytest.raises(FeatureSpecError, match="table 'adgroup_id' is shared by zch features"):
        build_feature_spec(cfg)


def test_shared_zch_table_needs_one_size():
    cfg = parse_config(
        _config(
            {"adgroup_id": {"zch": True, "zch_size": 100}}, {"adgroup_id": {"zch": True, "zch_size": 200}}
        )
    )
    with pytest.raises(FeatureSpecError, match=r"different zch_size \[100, 200\]"):
        build_feature_spec(cfg)


def test_the_eviction_policy_reaches_the_table_and_fg_json_only_off_its_default():
    """TorchEasyRec's zch ``lfu {}`` / ``lru { decay_exponent }`` / ``distance_lfu { decay_exponent }``
    (docs/source/feature/zch.md) as zch_eviction_policy / zch_decay_exponent; distance_lfu with 1.0 is the
    default, which fg.json leaves out, so a spec of the defaults digests as it did before policies."""
    plain = build_feature_spec(parse_config(_config({"user_id": {"zch": True}})))
    default = build_feature_spec(
        parse_config(_config({"user_id": {"zch": True, "zch_eviction_policy": "distance_lfu"}}))
    )
    assert default.digest() == plain.digest()
    assert "zch_eviction_policy" not in next(e for e in plain.to_dict()["sparse"] if e["name"] == "user_id")
    lru = {"zch": True, "zch_eviction_policy": "lru", "zch_decay_exponent": 0.5}
    spec = build_feature_spec(parse_config(_config({"adgroup_id": lru}, {"adgroup_id": lru})))
    table = next(t for t in spec.tables() if t.name == "adgroup_id")
    assert (table.zch_eviction_policy, table.zch_decay_exponent) == ("lru", 0.5)
    entry = next(e for e in spec.to_dict()["sparse"] if e["name"] == "adgroup_id")
    assert (entry["zch_eviction_policy"], entry["zch_decay_exponent"]) == ("lru", 0.5)
    assert FeatureSpec.from_dict(spec.to_dict()) == spec and spec.digest() != plain.digest()


def test_a_shared_zch_table_needs_one_eviction_policy():
    cfg = parse_config(
        _config({"adgroup_id": {"zch": True, "zch_eviction_policy": "lfu"}}, {"adgroup_id": {"zch": True}})
    )
    with pytest.raises(
        FeatureSpecError, match="table 'adgroup_id' is shared by features with different zch_eviction_policy"
    ):
        build_feature_spec(cfg)


def test_an_unknown_policy_in_fg_json_is_refused():
    d = build_feature_spec(parse_config(_config({"user_id": {"zch": True}}))).to_dict()
    next(e for e in d["sparse"] if e["name"] == "user_id")["zch_eviction_policy"] = "fifo"
    with pytest.raises(FeatureSpecError, match="zch_eviction_policy 'fifo' is not one of"):
        FeatureSpec.from_dict(d)


def _read(path) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path)
