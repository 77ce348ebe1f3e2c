"""Drift statistics against hand-computed numbers: PSI, new-id rate (vocabulary, mod and hash ids), null rate,
history length, the deterministic sample, and a split without drift against a shifted one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from recpipe.config import parse_config
from recpipe.data.sources import open_source
from recpipe.eval.drift import (
    PSI_EPSILON,
    DriftReport,
    category_psi,
    check_feature_limits,
    compute_drift,
    decile_psi,
    psi,
)
from recpipe.features.build import build_feature_spec
from recpipe.features.schema_check import SchemaMismatch

ROOT = Path(__file__).resolve().parents[2]
FEATURES = [
    {"kind": "id", "name": "item", "num_buckets": 1000, "embedding_dim": 4},
    {"kind": "id", "name": "color", "vocab_list": ["red", "green", "blue"], "embedding_dim": 4},
    {"kind": "id", "name": "shop", "hash_bucket_size": 1_000_000, "embedding_dim": 4},
    {"kind": "raw", "name": "price", "boundaries": [10.0], "embedding_dim": 4},
    {"kind": "raw", "name": "age"},
    {
        "kind": "sequence",
        "name": "hist",
        "sequence_length": 5,
        "delimiter": "|",
        "sub_delimiter": "\x03",
        "sub_features": [{"name": "item", "num_buckets": 1000, "embedding_dim": 4, "embedding_name": "item"}],
    },
]


def drift_config(features: list[dict] = FEATURES, gate: dict | None = None) -> dict:
    """The small DIN config with these features (deep: all pooled ones; seq: item and its history)."""
    data = yaml.safe_load((ROOT / "configs" / "din_taobao_small.yaml").read_text())
    data["features"] = features
    data["feature_groups"] = [
        {"name": "deep", "type": "deep", "features": ["item", "color", "shop", "price", "age"]},
        {"name": "seq", "type": "sequence", "features": ["item", "hist__item"]},
    ]
    data["data"].pop("group_column")
    data["data"].pop("oracle_column")
    data["eval"] = {"gate": gate or {}}
    return data


@pytest.fixture(scope="module")
def spec():
    return build_feature_spec(parse_config(drift_config()))


def _history(n_items: int) -> str:
    return "|".join(str(i) for i in range(n_items))


def train_rows(n: int = 1000) -> pa.Table:
    i = np.arange(n)
    return pa.table(
        {
            "clk": (i % 2).astype(np.int64),
            "item": i % 100,  # ids 0..99
            "color": [None if k % 10 == 0 else ["red", "green", "blue"][k % 3] for k in i],  # 10% null
            "shop": [f"s{k % 50}" for k in i],
            "price": np.where(i % 2 == 0, 5.0, 20.0),  # half below the boundary 10, half above
            "age": i.astype(np.float64),  # 0..999: every decile holds 10%
            "hist": [_history(k % 4) for k in i],  # 0, 1, 2, 3 items; "" (0 items) is a missing value
        }
    )


def eval_rows(n: int = 200) -> pa.Table:
    i = np.arange(n)
    return pa.table(
        {
            "clk": (i % 2).astype(np.int64),
            "item": 50 + i % 100,  # 50..149: those >= 100 are new, half of them
            "color": ["purple" if k % 4 == 0 else "red" for k in i],  # a quarter not in the vocabulary
            "shop": [f"s{k % 50}" if k < 100 else f"t{k}" for k in i],  # half new shops
            "price": np.where(i % 4 == 0, 5.0, 20.0),  # 25% below, 75% above
            "age": np.arange(0, 1000, 5, dtype=np.float64),  # 20 in each training decile
            "hist": [_history(7) for _ in i],  # 7 items, truncated to 5
        }
    )


def _source(tmp_path: Path, name: str, table: pa.Table):
    (tmp_path / name).mkdir()
    pq.write_table(table, tmp_path / name / "part-00000.parquet")
    return open_source(str(tmp_path / name))


def test_psi_is_the_formula_with_epsilon_for_empty_bins():
    assert psi(np.array([50, 50]), np.array([25, 75])) == pytest.approx(
        -0.25 * math.log(0.5) + 0.25 * math.log(1.5)
    )
    e = PSI_EPSILON  # the empty bin's share
    assert psi(np.array([100, 0]), np.array([50, 50])) == pytest.approx(
        (0.5 - 1.0) * math.log(0.5) + (0.5 - e) * math.log(0.5 / e)
    )
    assert psi(np.array([3, 7]), np.array([30, 70])) == pytest.approx(0.0)
    assert psi(np.array([0, 0]), np.array([1, 2])) is None


def test_decile_psi_of_the_same_and_of_a_shifted_distribution():
    train = np.arange(1000, dtype=np.float64)
    assert decile_psi(train, train[::5]) == pytest.approx(0.0, abs=1e-12)
    # every eval value in the top decile: nine bins at epsilon, the top one at 1.0
    e = PSI_EPSILON
    want = 9 * (e - 0.1) * math.log(e / 0.1) + (1.0 - 0.1) * math.log(1.0 / 0.1)
    assert decile_psi(train, np.arange(900, 1000, dtype=np.float64)) == pytest.approx(want)
    assert decile_psi(train, np.zeros(0)) is None
    # bucket ids as bins: ids only one side has are bins too
    assert category_psi(np.array([0, 1, 1, 1]), np.array([1, 2])) == pytest.approx(
        psi(np.array([1, 3, 0]), np.array([0, 1, 1]))
    )


def test_statistics_of_known_data(spec, tmp_path):
    r = compute_drift(spec, _source(tmp_path, "train", train_rows()), _source(tmp_path, "eval", eval_rows()))
    f = r.features
    assert (r.train_rows, r.eval_rows, r.train_rows_total, r.eval_rows_total) == (1000, 200, 1000, 200)
    # new ids: mod ids never seen, vocabulary values mapped to UNK, hash buckets never seen
    assert f["item"].new_id_rate == pytest.approx(0.5)
    assert f["color"].new_id_rate == pytest.approx(0.25)
    assert f["shop"].new_id_rate == pytest.approx(0.5)
    # history items 0..4 against training's 0..2 (at most 3 items): 3 and 4 are new, 2 of 5
    assert f["hist__item"].new_id_rate == pytest.approx(0.4)
    # null rates of the raw input columns; a history's sub-feature reads its history's column
    assert (f["color"].null_rate_train, f["color"].null_rate_eval) == (pytest.approx(0.1), 0.0)
    assert (f["hist"].null_rate_train, f["hist"].null_rate_eval) == (pytest.approx(0.25), 0.0)
    assert f["hist__item"].column == "hist" and f["hist__item"].null_rate_train == pytest.approx(0.25)
    # PSI: price over its two buckets, age over the training deciles
    assert f["price"].psi == pytest.approx(-0.25 * math.log(0.5) + 0.25 * math.log(1.5))
    assert f["age"].psi == pytest.approx(0.0, abs=1e-12)
    assert f["item"].psi is None and f["price"].new_id_rate is None
    assert r.psi_max == pytest.approx(f["price"].psi) and r.top(1) == [("price", f["price"].psi)]
    # history length: 0..3 items (mean 1.5, p95 3) against 7 truncated to max_length 5
    h = f["hist"]
    assert (h.history_mean_train, h.history_p95_train) == (pytest.approx(1.5), pytest.approx(3.0))
    assert (h.history_mean_eval, h.history_p95_eval) == (5.0, 5.0)
    assert r.notes == []  # no zch feature, both splits read whole
    m = r.metrics()
    assert m["drift.psi.price"] == f["price"].psi and m["drift.psi_max"] == r.psi_max
    assert m["drift.new_id_rate.color"] == pytest.approx(0.25) and m["drift.null_rate.color"] == 0.0
    assert m["drift.history_mean.hist"] == 5.0 and "drift.psi.item" not in m


def test_a_split_without_drift_has_psi_zero_and_a_shifted_one_large(spec, tmp_path):
    rows = train_rows()
    same = compute_drift(spec, _source(tmp_path, "train", rows), _source(tmp_path, "same", rows))
    assert all(d.psi == pytest.approx(0.0, abs=1e-12) for d in same.features.values() if d.psi is not None)
    assert all(d.new_id_rate == 0.0 for d in same.features.values() if d.new_id_rate is not None)
    assert same.psi_max == pytest.approx(0.0, abs=1e-12)
    shifted = rows.set_column(
        rows.schema.get_field_index("age"), "age", pa.array(rows["age"].to_numpy() + 5000)
    )
    moved = compute_drift(spec, _source(tmp_path, "train2", rows), _source(tmp_path, "shifted", shifted))
    assert moved.features["age"].psi > 8.0  # all of it above the top decile
    assert moved.features["price"].psi == pytest.approx(0.0, abs=1e-12)
    assert moved.top(1)[0][0] == "age"


def test_a_large_split_is_sampled_deterministically_over_its_whole_length(spec, tmp_path):
    train = _source(tmp_path, "train", train_rows())
    evaluated = _source(tmp_path, "eval", eval_rows())
    a = compute_drift(spec, train, evaluated, max_rows=100)
    b = compute_drift(spec, train, evaluated, max_rows=100)
    assert a == b and (a.train_rows, a.train_rows_total, a.eval_rows) == (100, 1000, 100)
    assert a.notes == [
        "train: 100 of 1,000 rows read (64 evenly spaced blocks)",
        "eval: 100 of 200 rows read (64 evenly spaced blocks)",
    ]
    # the sampled ages come from the whole window: the eval split's evenly spread ages barely drift
    assert a.features["age"].psi < 0.1


def test_round_trip_and_limits_on_features_without_psi(spec, tmp_path):
    r = compute_drift(spec, _source(tmp_path, "train", train_rows()), _source(tmp_path, "eval", eval_rows()))
    path = r.write(tmp_path / "drift.json")
    assert DriftReport.from_dict(json.loads(path.read_text())) == r
    with pytest.raises(ValueError, match="not a drift report: missing"):
        DriftReport.from_dict({"features": {}})
    assert r.psi_of("price") == r.features["price"].psi and r.psi_of("item") is None
    check_feature_limits(r, {"price": 0.1, "age": 0.2})
    with pytest.raises(
        ValueError, match=r"max_psi_per_feature names \['item'\], which have no PSI.*\['price', 'age'\]"
    ):
        check_feature_limits(r, {"item": 0.1})


def test_a_vector_feature_psi_is_its_largest_column(tmp_path):
    features = [f for f in FEATURES if f["name"] != "age"]
    features.append({"kind": "raw", "name": "age", "value_dim": 2, "separator": ";"})
    spec = build_feature_spec(parse_config(drift_config(features)))
    rows = train_rows()
    train = rows.set_column(
        rows.schema.get_field_index("age"), "age", pa.array([f"{k};{k}" for k in range(1000)])
    )
    shifted = rows.set_column(rows.schema.get_field_index("age"), "age", pa.array([f"{k};{k + 5000}" for k in range(1000)]))  # fmt: skip
    r = compute_drift(spec, _source(tmp_path, "train", train), _source(tmp_path, "eval", shifted))
    assert r.features["age__0"].psi == pytest.approx(0.0, abs=1e-12) and r.features["age__1"].psi > 8.0
    assert r.psi_of("age") == r.features["age__1"].psi


def test_a_split_lacking_a_column_is_refused_naming_it(spec, tmp_path):
    evaluated = _source(tmp_path, "eval", eval_rows().drop_columns(["shop"]))
    with pytest.raises(SchemaMismatch, match="shop"):
        compute_drift(spec, _source(tmp_path, "train", train_rows()), evaluated)


def test_a_zch_feature_reports_its_tables_evictions_from_training(tmp_path):
    features = [dict(f, zch=True, zch_size=64) if f["name"] == "shop" else f for f in FEATURES]
    spec = build_feature_spec(parse_config(drift_config(features)))
    train, evaluated = _source(tmp_path, "train", train_rows()), _source(tmp_path, "eval", eval_rows())
    r = compute_drift(spec, train, evaluated, zch_evictions={"shop": 37})
    assert r.features["shop"].zch_evictions == 37 and r.features["item"].zch_evictions is None
    assert r.metrics()["drift.zch_evictions.shop"] == 37 and "drift.zch_evictions.item" not in r.metrics()
    assert r.notes == []
    # a training run that recorded none (a result written before they were counted) is said so, not 0
    r = compute_drift(spec, train, evaluated)
    assert r.features["shop"].zch_evictions is None and any("zch evictions" in n for n in r.notes)
