"""``synthetic:config``: rows for every input column of any recpipe config, with a planted click model.

For every shipped config and for small configs of every kind: the rows pass FG with ``on_bad_row: error``,
hold every column the FeatureSpec reads, are the same for a seed and differ between seeds, and the true
probability ranks the labels well (oracle AUC); each kind's own column carries signal (a lookup's value, a
history holding the candidate...). Then the URI, the CLI and ``recpipe run``'s choice of data, and (slow)
training on the rows.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from recpipe.auc import binary_auc
from recpipe.config import RecpipeConfig, load_config, parse_config
from recpipe.data.sources import check_source, open_source, parse_synthetic
from recpipe.data.synthetic import config as config_gen
from recpipe.data.synthetic import generate
from recpipe.data.synthetic.config import SyntheticConfigError, build_model, make_chunk, plan_columns
from recpipe.data.types import Shard
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.fit import fit_feature_spec
from recpipe.features.raw import to_arrow

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))
ROWS = 3000
DLRM = {
    "type": "dlrm",
    "dense_mlp": {"hidden_units": [16]},
    "over_mlp": {"hidden_units": [8]},
    "sparse_group": "sparse",
}


def small(features: list[dict], sparse: list[str], **data) -> dict:
    """A DLRM config over ``features`` (``sparse``: the sparse group; dense features go to the bottom MLP)."""
    return {
        "name": "synthetic-config-test",
        "data": {
            "label": "label",
            "batch_size": 256,
            "split": {"time_column": None, "eval_fraction": 0.2},
            **data,
        },
        "features": [{"kind": "id", "name": "user", "hash_bucket_size": 500}, *features],
        "feature_groups": [{"name": "sparse", "type": "deep", "features": ["user", *sparse]}],
        "model": DLRM,
        "train": {"sparse_optimizer": {"type": "adagrad", "lr": 0.05}, "log_every_steps": 2},
        "export": {"backends": ["jit"]},
    }


# One small config per kind (and the forms of each): name → config dict.
KIND_CONFIGS: dict[str, dict] = {
    "multi_value_id": small(
        [
            {"kind": "id", "name": "tags", "separator": ",", "hash_bucket_size": 100, "value_dim": 3},
            {"kind": "id", "name": "cats", "num_buckets": 50, "pooling": "mean", "separator": ";"},
            {
                "kind": "id",
                "name": "genre",
                "vocab_list": ["rock", "jazz", "pop"],
                "default_bucketize_value": 0,
            },
        ],
        ["tags", "cats", "genre"],
    ),
    "combo": small(
        [
            {"kind": "id", "name": "age", "num_buckets": 8},
            {"kind": "id", "name": "cate", "hash_bucket_size": 100},
            {"kind": "combo", "name": "age_x_cate", "columns": ["age", "cate"], "hash_bucket_size": 1000},
            {"kind": "combo", "name": "user_x_city", "columns": ["user", "city"], "vocab_list": ["u1_c1"]},
        ],
        ["age", "cate", "age_x_cate", "user_x_city"],
    ),
    "raw_vector": small(
        [
            {"kind": "raw", "name": "pic_emb", "value_dim": 4, "separator": "|"},
            {
                "kind": "raw",
                "name": "pic_bucket",
                "column": "pic_emb2",
                "value_dim": 2,
                "boundaries": [0.0, 1.0],
            },
            {"kind": "raw", "name": "price", "normalizer": "log(x+1),zscore"},
            {"kind": "raw", "name": "score", "boundaries": [0.1, 1.0, 10.0]},
        ],
        ["pic_bucket", "score"],
    ),
    "lookup": small(
        [
            {"kind": "id", "name": "cate", "num_buckets": 100},
            {
                "kind": "lookup",
                "name": "cate_clicks",
                "map": "kv_cate",
                "key": "cate",
                "normalizer": "log(x+1)",
            },
            {
                "kind": "lookup",
                "name": "cate_bucket",
                "map": "kv_cate",
                "key": "cate",
                "boundaries": [2.5, 10.5],
            },
            {
                "kind": "lookup",
                "name": "tag_ids",
                "map": "kv_tag",
                "key": "tags",
                "separator": ",",
                "combiner": "",
                "hash_bucket_size": 50,
                "need_key": True,
            },
        ],
        ["cate", "cate_bucket", "tag_ids"],
    ),
    # TorchEasyRec's FG_DAG input "feature:X": a lookup keyed by a bucketized raw feature's bucket id.
    "feature_output": small(
        [
            {
                "kind": "raw",
                "name": "age_bucket",
                "column": "age",
                "boundaries": [18, 25, 40],
                "embedding_dim": 4,
            },
            {"kind": "lookup", "name": "age_clicks", "map": "kv_age", "key": "feature:age_bucket"},
        ],
        ["age_bucket"],
    ),
    # ... and by a dense raw feature's value (TorchEasyRec's multi_tower_din_fg_mock lookup_7 / raw_7).
    "dense_output": small(
        [
            {"kind": "raw", "name": "score", "default": 3.0},
            {
                "kind": "lookup",
                "name": "score_cat",
                "map": "kv_score",
                "key": "feature:score",
                "vocab_list": ["a", "b"],
            },
        ],
        ["score_cat"],
    ),
    "match": small(
        [
            {"kind": "id", "name": "cate", "hash_bucket_size": 100},
            {"kind": "id", "name": "brand", "num_buckets": 1000},
            {"kind": "match", "name": "cb_clicks", "nested_map": "kkv", "pkey": "cate", "skey": "brand"},
            {
                "kind": "match",
                "name": "b_any",
                "nested_map": "kkv",
                "pkey": "ALL",
                "skey": "brand",
                "num_buckets": 100,
            },
            {
                "kind": "match",
                "name": "c_ids",
                "nested_map": "kkv",
                "pkey": "cate",
                "skey": "ALL",
                "hash_bucket_size": 100,
                "show_pkey": True,
            },
        ],
        ["cate", "brand", "b_any", "c_ids"],
    ),
    "expr": small(
        [
            {"kind": "id", "name": "u_age", "num_buckets": 80},
            {"kind": "expr", "name": "same_age", "expression": "u_age == i_age ? 1 : 0"},
            {
                "kind": "expr",
                "name": "ratio",
                "expression": "log(pv + 1) / (1 + click)",
                "boundaries": [0.5, 1.0],
            },
            {"kind": "expr", "name": "sim", "expression": "dot(u_emb, i_emb) / (1 + len(u_emb))"},
        ],
        ["u_age", "ratio"],
    ),
    "overlap": small(
        [
            {
                "kind": "overlap",
                "name": "ratio",
                "query": "query",
                "title": "title",
                "method": "query_common_ratio",
            },
            {
                "kind": "overlap",
                "name": "contains",
                "query": "query",
                "title": "title",
                "method": "is_contain",
                "boundaries": [0.5],
            },
            {"kind": "overlap", "name": "index", "query": "query", "title": "title", "method": "index_of"},
        ],
        ["contains"],
    ),
    "sequence": small(
        [
            {"kind": "id", "name": "item", "num_buckets": 100000},
            {"kind": "id", "name": "shop", "hash_bucket_size": 1000},
            {
                "kind": "sequence",
                "name": "hist",
                "sequence_length": 20,
                "sub_features": [
                    {"name": "item", "num_buckets": 100000, "embedding_name": "item"},
                    {"name": "shop", "hash_bucket_size": 1000, "embedding_name": "shop"},
                ],
            },
        ],
        ["item", "shop"],
    ),
    "standalone_sequences": small(
        [
            {"kind": "id", "name": "item", "num_buckets": 200},
            {"kind": "sequence_id", "name": "buys", "hash_bucket_size": 300, "sequence_length": 6},
            {"kind": "sequence_raw", "name": "prices", "boundaries": [10, 50], "sequence_length": 4},
            {"kind": "sequence_raw", "name": "embs", "dense": True, "value_dim": 2, "sequence_length": 5},
        ],
        ["item"],
    ),
    "multi_task": small(
        [{"kind": "id", "name": "item", "num_buckets": 1000}, {"kind": "raw", "name": "price"}],
        ["item"],
        label_fields=["clk", "buy"],
        label=None,
        weight="w",
        group_column="session",
    ),
}
KIND_CONFIGS["multi_task"]["model"] = {
    "type": "mmoe",
    "towers": [{"group": "sparse", "mlp": {"hidden_units": [8]}}],
    "expert_mlp": {"hidden_units": [8]},
    "num_experts": 2,
    "task_towers": [
        {"name": "ctr", "label": "clk", "mlp": {"hidden_units": [8]}},
        {"name": "cvr", "label": "buy", "mlp": {"hidden_units": [8]}},
    ],
}


def _cfg(name: str) -> RecpipeConfig:
    if name in KIND_CONFIGS:
        data = copy.deepcopy(KIND_CONFIGS[name])
        if data["data"].get("label") is None:
            data["data"].pop("label", None)
        return parse_config(data, name)
    return load_config(ROOT / "configs" / name)


@pytest.fixture(scope="module")
def generated() -> Callable[[str], tuple[RecpipeConfig, pa.Table, np.ndarray, np.ndarray]]:
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cfg = _cfg(name)
            model = build_model(cfg, seed=7, rows=ROWS)
            cache[name] = (cfg, *make_chunk(model, 7, 0, ROWS))
        return cache[name]

    return get


@pytest.mark.parametrize("name", SHIPPED + sorted(KIND_CONFIGS))
def test_rows_pass_fg_with_every_input_column_and_a_known_oracle(name, generated, tmp_path) -> None:
    cfg, table, labels, probs = generated(name)
    spec = build_feature_spec(cfg)
    missing = [c for c in spec.input_columns() if c not in table.column_names]
    assert not missing
    out = FeatureGenerator(spec, on_bad_row="error")(table)
    assert out.num_rows == table.num_rows == ROWS
    oracle = cfg.data.oracle_column or "true_prob"
    assert np.allclose(table[oracle].to_numpy(), probs[:, 0])
    domain = cfg.model.domains()
    if domain is not None:  # PEPNet's domain label: every row's domain in [0, D), never null
        assert set(np.unique(table[domain[0]].to_numpy())) == set(range(domain[1]))
    for t, label in enumerate(c for c in cfg.data.labels if domain is None or c != domain[0]):
        assert set(np.unique(table[label].to_numpy())) <= {0, 1}
        assert np.array_equal(table[label].to_numpy(), labels[:, t])
        assert binary_auc(labels[:, t], probs[:, t]) > 0.65, (label, binary_auc(labels[:, t], probs[:, t]))
    assert 0.05 < labels[:, 0].mean() < 0.2
    # The fitted spec too (vocabularies, quantiles, zscore), as training runs FG.
    pq.write_table(table, tmp_path / "part-00000.parquet")
    fitted = fit_feature_spec(cfg, open_source(str(tmp_path)))
    assert FeatureGenerator(fitted, on_bad_row="error")(table).num_rows == ROWS


@pytest.mark.parametrize("name", ["din_taobao_small.yaml", "combo", "lookup", "match", "overlap", "sequence"])
def test_rows_are_deterministic_by_seed(name) -> None:
    cfg = _cfg(name)
    a = make_chunk(build_model(cfg, seed=3, rows=500), 3, 0, 500)[0]
    b = make_chunk(build_model(cfg, seed=3, rows=500), 3, 0, 500)[0]
    c = make_chunk(build_model(cfg, seed=4, rows=500), 4, 0, 500)[0]
    assert a.equals(b) and not a.equals(c)
    assert a.schema == c.schema


def test_every_input_column_has_nulls_at_the_rate_and_labels_none() -> None:
    cfg = _cfg("rich_taobao_small.yaml")
    table = make_chunk(build_model(cfg, seed=0, rows=20_000, nulls=0.05), 0, 0, 20_000)[0]
    inputs = config_gen.input_columns(cfg)
    assert set(inputs) >= {"kv_user_cate", "kkv_user_cate_brand", "query", "title", "click_50_seq", "pic_emb"}
    for name in inputs:
        assert 0.035 < table[name].null_count / table.num_rows < 0.065, name
    for name in ("clk", "true_prob", "time_stamp"):
        assert table[name].null_count == 0
    none = make_chunk(build_model(cfg, seed=0, rows=1000, nulls=0.0), 0, 0, 1000)[0]
    assert sum(none[c].null_count for c in inputs) == 0


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(["rich_taobao_small.yaml", *sorted(KIND_CONFIGS)]),
    seed=st.integers(0, 2**20),
    rows=st.integers(10, 300),
    nulls=st.sampled_from([0.0, 0.01, 0.3]),
    lists=st.booleans(),
)
def test_any_seed_size_null_rate_and_layout_passes_fg(name, seed, rows, nulls, lists) -> None:
    cfg = _cfg(name)
    table = make_chunk(build_model(cfg, seed, rows, nulls=nulls, lists=lists), seed, 0, rows)[0]
    assert FeatureGenerator(build_feature_spec(cfg), on_bad_row="error")(table).num_rows == rows


# ------------------------------------------------------------------------------------ what each kind sees
def _fg(cfg: RecpipeConfig, table: pa.Table):
    spec = build_feature_spec(cfg)
    return spec, FeatureGenerator(spec, on_bad_row="error")(table)


def _dense(spec, out, name: str) -> np.ndarray:
    return out.dense[:, spec.dense_names().index(name)]


def test_id_spaces_are_bounded_and_multi_value_columns_split(generated) -> None:
    cfg, table, _, _ = generated("multi_value_id")
    tags = pc.split_pattern(table["tags"], ",")
    counts = pc.list_value_length(tags).to_numpy(zero_copy_only=False)
    assert np.nanmax(counts) == 4 and (counts[~np.isnan(counts)] > 1).mean() > 0.5  # value_dim 3 truncates 4
    cats = pc.list_flatten(pc.split_pattern(table["cats"], ";")).to_pylist()
    assert all(0 <= int(c) < 50 for c in cats if c)
    genre = set(table["genre"].drop_null().to_pylist())
    assert {"rock", "jazz", "pop"} <= genre and len(genre - {"rock", "jazz", "pop"}) >= 1  # OOV values too
    user = set(table["user"].drop_null().to_pylist())
    assert len(user) <= 150  # one value per 20 rows (3000 rows)


@pytest.mark.parametrize("lists", [False, True])
def test_a_weighted_id_column_holds_k_w_pieces_that_fg_reads(lists: bool) -> None:
    cfg = _cfg("rich_taobao_small.yaml")
    table, _, _ = make_chunk(build_model(cfg, seed=3, rows=600, lists=lists), 3, 0, 600)
    prefs = table["user_brand_prefs"]
    pieces = pc.list_flatten(prefs if lists else pc.split_pattern(prefs, "\x1d")).drop_null().to_pylist()
    weights = np.array([float(p.rsplit(":", 1)[1]) for p in pieces if p])  # "": a row without ids
    assert len(weights) > 600 and weights.min() >= 0.1 and weights.max() <= 2.0
    spec = build_feature_spec(cfg)
    out = FeatureGenerator(spec, with_labels=False)(table)  # on_bad_row error: every piece parses
    keys = spec.sparse_keys()
    got = out.values[keys.index("user_brand_prefs__weights")].view(np.float64)
    np.testing.assert_allclose(np.sort(got), np.sort(weights.astype(np.float32)), rtol=1e-7)


def test_a_weighted_id_column_read_by_another_feature_is_refused() -> None:
    data = copy.deepcopy(KIND_CONFIGS["multi_value_id"])
    data["features"] += [
        {"kind": "id", "name": "w1", "column": "wcol", "hash_bucket_size": 9, "weighted": True},
        {"kind": "id", "name": "w2", "column": "wcol", "hash_bucket_size": 9},
    ]
    data["feature_groups"][0]["features"] += ["w1", "w2"]
    with pytest.raises(SyntheticConfigError, match="column 'wcol' holds the weighted ids"):
        build_model(parse_config(data, "x"), seed=0, rows=10)


def test_list_columns_are_read_as_the_text_form(tmp_path) -> None:
    cfg = _cfg("multi_value_id")
    model = build_model(cfg, seed=1, rows=1000, lists=True)
    table = make_chunk(model, 1, 0, 1000)[0]
    assert pa.types.is_list(table.schema.field("tags").type)
    assert pa.types.is_list(table.schema.field("cats").type)
    text = make_chunk(build_model(cfg, seed=1, rows=1000), 1, 0, 1000)[0]
    spec = build_feature_spec(cfg)
    a = FeatureGenerator(spec)(table)
    b = FeatureGenerator(spec)(text)
    for x, y in zip(a.values, b.values):
        assert np.array_equal(x, y)
    # Parquet keeps the lists; the raw-value contract reads them the same.
    pq.write_table(table, tmp_path / "lists.parquet")
    back = to_arrow(pq.read_table(tmp_path / "lists.parquet"))
    for x, y in zip(FeatureGenerator(spec)(back).values, b.values):
        assert np.array_equal(x, y)


def test_a_csv_of_the_rows_reads_as_the_parquet(tmp_path, generated) -> None:
    cfg, table, _, _ = generated("rich_taobao_small.yaml")
    pacsv.write_csv(table, tmp_path / "rows.csv")
    src = open_source(str(tmp_path / "rows.csv"), csv=cfg.csv_options())
    csv = pa.Table.from_batches([sb.batch for sb in src.iter_batches(Shard(0, 1))])
    spec = build_feature_spec(cfg)
    a, b = FeatureGenerator(spec)(table), FeatureGenerator(spec)(csv)
    assert all(np.array_equal(x, y) for x, y in zip(a.values, b.values))
    assert np.allclose(a.dense, b.dense, atol=1e-5)


def test_a_lookup_finds_the_rows_key_and_its_value_carries_the_click(generated) -> None:
    cfg, table, labels, _ = generated("lookup")
    spec, out = _fg(cfg, table)
    clicks = _dense(spec, out, "cate_clicks")
    assert (clicks > 0).mean() > 0.5  # the row's category is in its map most of the time
    assert binary_auc(labels[:, 0], clicks) > 0.58
    maps = table["kv_cate"].drop_null().to_pylist()
    assert all(":" in e for m in maps for e in m.split("\x1d") if m)


def test_a_lookup_keyed_by_a_dense_raw_value_finds_the_rows_value(generated) -> None:
    cfg, table, _, _ = generated("dense_output")
    assert "feature:score" not in table.column_names and "feature:score" not in config_gen.input_columns(cfg)
    assert set(table["score"].drop_null().to_pylist()) == {0.25, 0.5, 1.0, 1.5, 2.5, 4.0}
    keys = {e.split(":")[0] for m in table["kv_score"].drop_null().to_pylist() for e in m.split("\x1d") if m}
    assert {"0.25", "0.5", "1", "1.5", "2.5", "4", "3"} <= keys  # FG's text of each value, default 3 too
    # The value at each row's key (a null score: the default's, "3"; a key twice: its first value).
    own = ["3" if v is None else f"{v:g}" for v in table["score"].to_pylist()]
    maps = [[e.split(":") for e in (m or "").split("\x1d") if e] for m in table["kv_score"].to_pylist()]
    found = [next((v for k, v in m if k == key), None) for key, m in zip(own, maps)]
    assert 0.5 < np.mean([v is not None for v in found]) < 0.9  # planted in most rows
    spec, out = _fg(cfg, table)
    ids = out.values[spec.sparse_keys().index("score_cat")]
    assert ids.tolist() == [{"a": 1, "b": 2}.get(v, 0) for v in found]  # out of the list, or not found: 0


def test_a_lookup_keyed_by_a_bucket_id_finds_the_rows_bucket(generated) -> None:
    cfg, table, labels, _ = generated("feature_output")
    assert "feature:age_bucket" not in table.column_names  # FG derives it from age
    assert "feature:age_bucket" not in config_gen.input_columns(cfg)
    keys = {e.split(":")[0] for m in table["kv_age"].drop_null().to_pylist() for e in m.split("\x1d") if m}
    assert keys == {"0", "1", "2", "3"}  # the bucket ids of boundaries [18, 25, 40]
    spec, out = _fg(cfg, table)
    clicks = _dense(spec, out, "age_clicks")
    assert (clicks > 0).mean() > 0.5  # the row's bucket is in its map most of the time
    assert (
        binary_auc(labels[:, 0], clicks) > 0.53
    )  # the value planted at the row's own bucket carries the click (0.56)


def test_histories_of_one_sequence_group_are_generated_item_by_item_alike() -> None:
    """A sequence group of standalone histories (TorchEasyRec's seq_item group: a sequence_id and a
    sequence_raw feature side by side) is read item by item, so FG refuses rows whose lengths differ: each row's
    histories hold as many items (the shortest sequence_length caps them), and null together. A history of
    several ids per item (value_dim 0, multi_tower_din_fg_mock.config's buy_50_id_6_seq) has no empty item: a
    one-item history of one would be "", no items."""
    features = [
        {"kind": "id", "name": "item", "num_buckets": 50, "embedding_dim": 4},
        {"kind": "sequence_id", "name": "buys", "num_buckets": 50, "embedding_dim": 4, "sequence_length": 6},
        {"kind": "sequence_raw", "name": "prices", "dense": True, "sequence_length": 4},
        {"kind": "sequence_id", "name": "tags", "hash_bucket_size": 20, "embedding_dim": 4, "sequence_length": 5,
         "value_dim": 0},
    ]  # fmt: skip
    din = {
        "type": "multi_tower_din",
        "towers": [],
        "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [4]}}],
        "final": {"hidden_units": [4]},
    }
    group = {"name": "seq", "type": "sequence", "features": ["item", "buys", "prices", "tags"]}
    cfg = parse_config({"name": "aligned", "data": {"label": "label"}, "features": features,
                        "feature_groups": [group], "model": din})  # fmt: skip
    table = make_chunk(build_model(cfg, seed=2, rows=2000), 2, 0, 2000)[0]
    split = {c: pc.split_pattern(table[c], cfg.features[1].delimiter) for c in ("buys", "prices", "tags")}
    count = [pc.fill_null(pc.list_value_length(items), 0).to_numpy() for items in split.values()]
    assert np.array_equal(count[0], count[1]) and np.array_equal(count[0], count[2])
    assert count[0].max() == 4 and (count[0] > 1).mean() > 0.3
    assert all(t is None or t == "" or "" not in t.split("|") for t in table["tags"].to_pylist())
    assert np.array_equal(table["buys"].is_null().to_numpy(), table["prices"].is_null().to_numpy())
    assert FeatureGenerator(build_feature_spec(cfg), on_bad_row="error")(table).num_rows == 2000


def test_a_match_finds_the_rows_pair_and_its_value_carries_the_click(generated) -> None:
    cfg, table, labels, _ = generated("match")
    spec, out = _fg(cfg, table)
    value = _dense(spec, out, "cb_clicks")
    assert (value > 0).mean() > 0.5
    assert binary_auc(labels[:, 0], value) > 0.58
    row = next(v for v in table["kkv"].to_pylist() if v and "|" in v)
    assert all("^" in p and ":" in p for p in row.split("|"))


def test_an_overlap_title_holds_its_query_half_the_time(generated) -> None:
    cfg, table, labels, _ = generated("overlap")
    spec, out = _fg(cfg, table)
    ratio = _dense(spec, out, "ratio")
    assert 0.4 < (ratio == 1.0).mean() < 0.7
    index = _dense(spec, out, "index")
    assert (index >= 0).mean() > 0.4
    assert binary_auc(labels[:, 0], ratio) > 0.55


def test_expr_numbers_and_vectors(generated) -> None:
    cfg, table, _, _ = generated("expr")
    spec, out = _fg(cfg, table)
    assert pa.types.is_integer(table.schema.field("u_age").type)  # an id read as a number: integers
    sim = _dense(spec, out, "sim")
    assert np.isfinite(sim).all() and (sim != 0).mean() > 0.9  # equal vector lengths: dot products
    same = _dense(spec, out, "same_age")
    assert set(np.unique(same)) <= {0.0, 1.0}


def test_a_history_holds_the_candidate_from_the_same_id_space(generated) -> None:
    cfg, table, labels, _ = generated("sequence")
    items = pc.split_pattern(table["hist"], "|").to_pylist()
    found = np.array(
        [
            c is not None and h is not None and any(x.split("\x03")[0] == str(c) for x in h if x)
            for c, h in zip(table["item"].to_pylist(), items)
        ]  # fmt: skip
    )
    assert 0.25 < found.mean() < 0.6
    # DIN has something to learn: a row whose candidate is in its history clicks more often.
    assert labels[found, 0].mean() > 1.5 * labels[~found, 0].mean()
    # The history's other sub-feature is the item's: the same item always has the same shop.
    pairs = {tuple(x.split("\x03")) for h in items if h for x in h if x}
    by_item: dict[str, set] = {}
    for item, shop in pairs:
        by_item.setdefault(item, set()).add(shop)
    assert max(len(s) for s in by_item.values()) == 1
    for item, shop in zip(table["item"].to_pylist(), table["shop"].to_pylist()):
        if item is not None and shop is not None and str(item) in by_item:
            assert by_item[str(item)] == {shop}


def test_multi_task_labels_follow_each_other_with_weight_and_group(generated) -> None:
    cfg, table, labels, probs = generated("multi_task")
    assert (labels[:, 1] <= labels[:, 0]).all() and 0 < labels[:, 1].sum() < labels[:, 0].sum()
    assert (probs[:, 1] <= probs[:, 0] + 1e-6).all()
    assert table.column_names[-1] == "true_buy_prob" and np.allclose(
        table["true_buy_prob"].to_numpy(), probs[:, 1]
    )
    assert table["w"].null_count == 0 and pc.min(table["w"]).as_py() >= 0.5
    assert table["session"].null_count == 0


# --------------------------------------------------------------------------------------------- refusals
def test_a_kind_without_a_generator_is_refused_by_name(monkeypatch) -> None:
    monkeypatch.delitem(config_gen.CLAIMS, "overlap")
    with pytest.raises(
        SyntheticConfigError, match=r"feature 'ratio': synthetic:config has no generator for kind 'overlap'"
    ):
        plan_columns(_cfg("overlap"))


def test_a_new_kind_is_one_entry(declare_entry_point, monkeypatch) -> None:
    declare_entry_point("recpipe.feature_kinds", "text_length = tests.features.toy_kind")
    data = small([{"kind": "text_length", "name": "title_len", "column": "title"}], ["title_len"])
    cfg = parse_config(data)
    with pytest.raises(SyntheticConfigError, match="kind 'text_length'"):
        plan_columns(cfg)
    monkeypatch.setitem(
        config_gen.CLAIMS,
        "text_length",
        lambda f, plan: plan.ids(f.source_column, f.name, f"col:{f.source_column}"),
    )
    table = make_chunk(build_model(cfg, 0, 500), 0, 0, 500)[0]
    assert FeatureGenerator(build_feature_spec(cfg), on_bad_row="error")(table).num_rows == 500


def test_one_column_read_two_incompatible_ways_is_refused() -> None:
    data = small(
        [
            {"kind": "lookup", "name": "clicks", "map": "kv", "key": "cate"},
            {"kind": "raw", "name": "kv_as_number", "column": "kv"},
        ],
        [],
    )
    with pytest.raises(
        SyntheticConfigError, match=r"column 'kv' is read as a key:value map .* and as a number"
    ):
        plan_columns(parse_config(data))


def test_pre_encoded_input_holds_fg_output_that_fg_reads_without_a_bad_row() -> None:
    # TorchEasyRec's FG_NONE layout: ids below the table's rows, bucket ids, numbers, and each history
    # sub-feature's ids in a column <sequence>__<sub>, the same items in every one of them
    features = [
        {"kind": "id", "name": "item", "num_buckets": 40},
        {"kind": "raw", "name": "price", "boundaries": [1.0, 2.0, 3.0], "embedding_dim": 4},
        {"kind": "raw", "name": "emb", "value_dim": 3, "separator": "\x03"},
        {
            "kind": "sequence",
            "name": "seq",
            "sequence_length": 5,
            "sub_features": [
                {"name": "item", "num_buckets": 40},
                {"name": "price", "boundaries": [1.0, 2.0, 3.0], "embedding_dim": 4},
            ],
        },
    ]
    data = small(features, ["item", "price"], fg_encoded=True)
    cfg = parse_config(data)
    assert config_gen.input_columns(cfg) == ["user", "item", "price", "emb", "seq__item", "seq__price"]
    table, _, _ = make_chunk(build_model(cfg, seed=0, rows=2000), 0, 0, 2000)
    assert {"seq__item", "seq__price"} <= set(table.column_names) and "seq" not in table.column_names
    ids, prices = ([v for v in pc.list_flatten(pc.split_pattern(table[c], "|")).to_pylist() if v]
                   for c in ("seq__item", "seq__price"))  # fmt: skip
    assert ids and all(0 <= int(v) < 40 for v in ids) and all(0 <= int(v) < 4 for v in prices)
    lengths = [
        pc.fill_null(pc.list_value_length(pc.split_pattern(table[c], "|")), 0)
        for c in ("seq__item", "seq__price")
    ]
    assert lengths[0].equals(lengths[1]) and pc.max(lengths[0]).as_py() > 1
    assert set(pc.drop_null(table["price"]).to_pylist()) <= {0, 1, 2, 3}
    out = FeatureGenerator(build_feature_spec(cfg))(table)  # on_bad_row: error
    assert out.dense.shape == (2000, 3)


# ------------------------------------------------------------------------------------ URI, CLI, recpipe run
def _write(cfg_dict: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    return path


def test_the_uri_generates_ingests_and_reports_the_oracle(tmp_path) -> None:
    from recpipe.stages import ingest

    config = str(ROOT / "configs" / "rich_taobao_small.yaml")
    uri = f"synthetic:config?path={config}&rows=2000&seed=2&nulls=0.02"
    syn = parse_synthetic(uri)
    assert (syn.kind, syn.rows, syn.seed, syn.options) == (
        "config",
        2000,
        2,
        {"config": config, "nulls": 0.02},
    )
    check_source(uri)
    cfg = load_config(config)
    r = ingest.run(uri, tmp_path / "data", cfg.data.label, cfg.data.split, spec=build_feature_spec(cfg))
    assert r.train_rows + r.eval_rows == 2000 and r.eval_rows > 0
    assert r.oracle_auc is not None and r.oracle_auc > 0.65
    meta = json.loads((tmp_path / "data" / "raw" / "_meta.json").read_text())
    assert meta["kind"] == "config" and meta["params"]["nulls"] == 0.02


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("synthetic:config?rows=100", "needs path=<config.yaml>"),
        ("synthetic:config?path=/no/such.yaml", "does not exist"),
        ("synthetic:config?path=configs/din_taobao.yaml&users=3", r"unknown option\(s\) \['users'\]"),
        ("synthetic:config?path=configs/din_taobao.yaml&nulls=x", "nulls must be a number"),
    ],
)
def test_a_malformed_config_uri_is_refused(uri, message, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(ValueError, match=message):
        check_source(uri)


def test_run_falls_back_to_the_configs_own_columns(tmp_path) -> None:
    from recpipe.pipeline.params import resolve_config, synthetic_source_for

    config = ROOT / "configs" / "rich_taobao_small.yaml"
    cfg = resolve_config(str(config))
    assert synthetic_source_for(cfg, 500, config_path=config) == f"synthetic:config?path={config}&rows=500"
    # Without a path, the resolved config is written where this machine's steps read it.
    uri = synthetic_source_for(cfg, 500)
    written = parse_synthetic(uri).options["config"]
    assert load_config(written).digest() == cfg.digest()
    # Taobao- and Criteo-schema configs keep their generators.
    assert synthetic_source_for(
        resolve_config(str(ROOT / "configs" / "din_taobao_small.yaml")), 10
    ).startswith("synthetic:taobao")


TZREC = """\
train_input_path: "data/train"
eval_input_path: "data/eval"
model_dir: "experiments/small"
train_config {
    sparse_optimizer { adagrad_optimizer { lr: 0.01 } constant_learning_rate {} }
    dense_optimizer { adam_optimizer { lr: 0.001 } constant_learning_rate {} }
}
data_config { batch_size: 64 dataset_type: ParquetDataset fg_mode: FG_DAG label_fields: "clk" }
feature_configs { id_feature { feature_name: "item_id" expression: "item:item_id" num_buckets: 10000 embedding_dim: 8 } }
feature_configs { id_feature { feature_name: "tags" expression: "user:tags" hash_bucket_size: 100 separator: "," embedding_dim: 8 } }
feature_configs { lookup_feature { feature_name: "cate_cnt" map: "user:kv_cate" key: "item:cate" } }
feature_configs {
    match_feature { feature_name: "brand_any" nested_map: "user:kkv" pkey: "ALL" skey: "item:brand" hash_bucket_size: 100 embedding_dim: 8 }
}
feature_configs { expr_feature { feature_name: "gap" expression: "a - b" variables: ["user:a", "item:b"] } }
feature_configs {
    overlap_feature { feature_name: "ratio" query: "user:query" title: "item:title" method: "query_common_ratio" }
}
feature_configs {
    combo_feature { feature_name: "tag_x_item" expression: ["user:tags", "item:item_id"] hash_bucket_size: 1000 embedding_dim: 8 }
}
model_config {
    feature_groups {
        group_name: "all"
        feature_names: ["item_id", "tags", "cate_cnt", "brand_any", "gap", "ratio", "tag_x_item"]
        group_type: DEEP
    }
    multi_tower { towers { input: "all" mlp { hidden_units: [16] } } final { hidden_units: [8] } }
    metrics { auc {} }
    losses { binary_cross_entropy {} }
}
"""


def test_an_imported_torcheasyrec_config_gets_rows_for_its_own_columns(tmp_path) -> None:
    from recpipe.pipeline.params import synthetic_source_for
    from recpipe.stages import ingest
    from recpipe.tzrec import import_tzrec

    imported = import_tzrec(TZREC)
    path = tmp_path / "imported.yaml"
    path.write_text(imported.to_yaml())
    cfg = load_config(path)
    source = synthetic_source_for(cfg, 2000, config_path=path)
    assert source.startswith("synthetic:config?")
    data = ingest.run(source, tmp_path / "data", cfg.data.label, cfg.data.split, spec=build_feature_spec(cfg))
    assert data.oracle_auc is not None and data.oracle_auc > 0.6
    train = pq.read_table(data.train_dir)
    assert FeatureGenerator(build_feature_spec(cfg), on_bad_row="error")(train).num_rows == data.train_rows
    tags = pc.split_pattern(train["tags"], ",")
    assert pc.max(pc.list_value_length(tags)).as_py() > 1  # the separator "," makes them multi-valued


def test_cli_data_generate_config(tmp_path, capsys) -> None:
    from recpipe.cli.main import main

    out = tmp_path / "raw"
    code = main(["data", "generate", "--config", str(ROOT / "configs" / "rich_taobao_small.yaml"),
                 "--rows", "1000", "--out", str(out), "--seed", "1"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "wrote 1000 rows" in printed and "clk: positive_rate=" in printed
    assert pq.read_table(out).num_rows == 1000
    assert main(["data", "generate", "taobao", "--config", "x.yaml", "--rows", "10", "--out", str(out)]) == 2


# --------------------------------------------------------------------------------------------- training
SHORT = {"train.max_steps": 4, "data.batch_size": 128, "data.num_workers": 0, "train.log_every_steps": 2}


def _train_on_generated(config: Path, root: Path) -> dict:
    from recpipe.stages import ingest, train

    cfg = load_config(config)
    data = ingest.run(f"synthetic:config?path={config}&rows=1500", root / "data", cfg.data.label,
                      cfg.data.split, spec=build_feature_spec(cfg))  # fmt: skip
    r = train.run(str(config), data.train_dir, data.eval_dir, str(root / "train"), overrides=SHORT)
    result = json.loads((Path(r.checkpoint_dir) / "train_result.json").read_text())
    assert result["steps"] == 4 and np.isfinite(result["final_loss"])
    return result


@pytest.mark.slow
def test_a_config_of_lookup_combo_and_multi_value_ids_trains(tmp_path) -> None:
    data = small(
        [
            {"kind": "id", "name": "tags", "separator": ",", "hash_bucket_size": 100, "pooling": "mean"},
            {"kind": "id", "name": "cate", "num_buckets": 100},
            {"kind": "combo", "name": "user_x_cate", "columns": ["user", "cate"], "hash_bucket_size": 1000},
            {
                "kind": "lookup",
                "name": "cate_clicks",
                "map": "kv_cate",
                "key": "cate",
                "normalizer": "log(x+1)",
            },
        ],
        ["tags", "cate", "user_x_cate"],
    )
    _train_on_generated(_write(data, tmp_path / "small.yaml"), tmp_path)


@pytest.mark.slow
def test_rich_taobao_small_trains_evaluates_exports_registers_and_serves(tmp_path, monkeypatch) -> None:
    """Issue 26's done-when for the config of every kind, its tokenize feature included: generated rows pass FG
    with ``on_bad_row: error`` (the ad titles tokenized), it trains, evaluates, exports to jit, onnx, rtp and
    aoti with parity, registers, and the registered model serves raw rows from a folder where the
    tokenizer file is not (fg.json carries it) as rtp scores them. Minutes: aoti compiles C++."""
    from stage_flow import export_with_parity

    from recpipe import tracking
    from recpipe.eval.metrics import sigmoid
    from recpipe.export.loaders import load_backend
    from recpipe.stages import evaluate, ingest, register, train

    monkeypatch.chdir(ROOT)  # the config's vocab_file is a path in the checkout, as `recpipe run` reads it
    config = ROOT / "configs" / "rich_taobao_small.yaml"
    cfg = load_config(config)
    kinds = {f.kind for f in cfg.features}
    assert kinds >= {"id", "raw", "combo", "lookup", "match", "expr", "overlap", "tokenize", "sequence"}
    assert cfg.data.on_bad_row == "error"
    spec = build_feature_spec(cfg)
    data = ingest.run(f"synthetic:config?path={config}&rows=2000&seed=3", tmp_path / "data", cfg.data.label,
                      cfg.data.split, spec=spec)  # fmt: skip
    rows = pq.read_table(data.train_dir)
    lengths = FeatureGenerator(spec, on_bad_row="error")(rows).lengths[
        spec.sparse_keys().index("title_tokens")
    ]
    titled = pc.fill_null(pc.utf8_length(rows["ad_title"]), 0).to_numpy() > 0
    assert titled.mean() > 0.9 and (lengths[titled] > 0).all() and (lengths[~titled] == 0).all()
    assert pc.count_distinct(rows["ad_title"]).as_py() < 0.5 * rows.num_rows  # titles repeat, as items do

    r = train.run(str(config), data.train_dir, data.eval_dir, str(tmp_path / "train"), overrides=SHORT)
    report = evaluate.run(r.checkpoint_dir, data.eval_dir, str(tmp_path / "report.json"))
    assert report.rows == data.eval_rows
    export_with_parity(
        Path(r.checkpoint_dir), ["jit", "onnx", "rtp", "aoti"], tmp_path / "export", data.eval_dir
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    version = register.run(str(tmp_path / "export"), report.report_path, "taobao-rich-small", uri,
                           example_data=data.eval_dir).version  # fmt: skip
    assert version == 1

    monkeypatch.chdir(tmp_path)  # configs/rich_taobao_small_tokenizer.json is not here
    raw = pq.read_table(data.eval_dir).slice(0, 64)
    rtp = load_backend(tmp_path / "export" / "rtp")
    assert {e.kind for e in rtp.spec.fg_entries()} >= {"tokenize"}
    want = sigmoid(np.asarray(rtp.predict_raw(raw.drop_columns([cfg.data.label])), np.float64))
    served = tracking.load_pyfunc_model(uri, "models:/taobao-rich-small@challenger")
    np.testing.assert_allclose(np.asarray(served.predict(raw.to_pandas()), np.float64), want, atol=1e-6)


@pytest.mark.parametrize("encoded", [False, True])
def test_histories_with_numeric_sub_values_pass_fg(tmp_path, encoded) -> None:
    """A history's bucketized and dense per-item numbers (TorchEasyRec's raw sub-features) are generated as
    numbers FG reads, in one history column or, pre-encoded, a column per sub-feature: TorchEasyRec's DIN mock
    configs failed here (a dense sub-feature has no id mapping)."""
    data = load_config("configs/din_taobao_small.yaml").model_dump()
    for f in data["features"]:
        if f["kind"] == "sequence":
            f["sub_features"] += [
                {"name": "age", "dense": True, "default": -1.0},
                {"name": "price", "boundaries": [1.0, 10.0, 50.0], "embedding_dim": 16},
            ]
    if encoded:
        data["data"]["fg_encoded"] = True
        for f in data["features"]:
            for item in (f, *f.get("sub_features", [])):
                if item.get("hash_bucket_size"):
                    item["num_buckets"], item["hash_bucket_size"] = item.pop("hash_bucket_size"), None
    cfg = parse_config(data)
    generate("config", 3000, tmp_path / "rows", seed=1, config=cfg)
    table = pq.read_table(tmp_path / "rows")
    out = FeatureGenerator(build_feature_spec(cfg), on_bad_row="error")(table)
    assert out.num_rows == 3000


def test_a_history_of_float_vectors_is_generated_as_fg_reads_it(tmp_path) -> None:
    """A dense sub-feature of value_dim 2: each item's sub-value is two numbers by its separator, which FG
    reads without a bad row (``on_bad_row: error``)."""
    import pyarrow.parquet as _pq

    from recpipe.config import parse_config as _parse
    from recpipe.data.synthetic import generate as _generate
    from recpipe.features.build import build_feature_spec as _build
    from recpipe.features.fg import FeatureGenerator as _FG

    subs = [
        {"name": "item", "num_buckets": 20, "embedding_dim": 4},
        {"name": "emb", "dense": True, "value_dim": 2},
    ]
    cfg = _parse(
        {
            "name": "vec_hist",
            "data": {"label": "label", "on_bad_row": "error"},
            "features": [
                {"kind": "id", "name": "item", "num_buckets": 20, "embedding_dim": 4},
                {"kind": "sequence", "name": "clicks", "sequence_length": 5, "sub_features": subs},
            ],
            "feature_groups": [
                {"name": "seq", "type": "sequence", "features": ["item", "clicks__item", "clicks__emb"]}
            ],
            "model": {
                "type": "multi_tower_din",
                "towers": [],
                "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [4]}}],
                "final": {"hidden_units": [4]},
            },
        }
    )
    _generate("config", 300, tmp_path, seed=3, config=cfg)
    table = _pq.read_table(sorted(tmp_path.glob("part-*.parquet"))[0])
    item = next(h for h in table.column("clicks").to_pylist() if h).split("|")[0]
    assert item.count("\x03") == 1 and item.split("\x03")[1].count("\x1d") == 1
    spec = _build(cfg)
    out = _FG(spec, on_bad_row="error")(table)
    keys = spec.sparse_keys()
    a, b = keys.index("clicks__emb__0"), keys.index("clicks__emb__1")
    assert out.lengths[a].tolist() == out.lengths[b].tolist() and out.lengths[a].sum() > 0


@pytest.mark.parametrize("lists", [False, True])
def test_a_tokenize_column_is_text_of_words_that_fg_tokenizes(tmp_path, lists: bool) -> None:
    from tokenizer_files import write_bpe

    vocab = write_bpe(tmp_path / "tokenizer.json")
    token = {"kind": "tokenize", "name": "title_token", "column": "title", "vocab_file": str(vocab)}
    cfg = parse_config(small([token], ["title_token"]))
    model = build_model(cfg, seed=5, rows=2000, lists=lists)
    table = make_chunk(model, 5, 0, 2000)[0]
    # Words joined by spaces, text even where lists=1 writes the other multi-value columns as lists.
    assert pa.types.is_string(table["title"].type)
    words = pc.split_pattern(table["title"].drop_null(), " ")
    assert (
        1 <= pc.min(pc.list_value_length(words)).as_py() and pc.max(pc.list_value_length(words)).as_py() == 3
    )
    spec, out = _fg(cfg, table)
    lengths = out.lengths[spec.sparse_keys().index("title_token")]
    text = pc.fill_null(pc.utf8_length(table["title"]), 0).to_numpy()
    assert (lengths[text == 0] == 0).all() and (lengths[text > 0] > 0).all()  # a null or "" has no token
    # A title a row from a Zipf catalogue: titles repeat across rows as items do, the popular ones oftenest.
    counts = pc.value_counts(table["title"].drop_null()).field("counts").to_numpy()
    assert counts.size < 0.5 * len(table) and counts.max() > 20


def test_the_rich_configs_tokenizer_spells_every_generated_title_word(monkeypatch) -> None:
    """configs/rich_taobao_small_tokenizer.json (scripts/make_rich_tokenizer.py) reads the ``ad_title`` words
    synthetic:config writes for the rich config: no ``[UNK]``, and a word's later pieces are ``##`` pieces."""
    from tokenizers import Tokenizer

    monkeypatch.chdir(ROOT)
    cfg = _cfg("rich_taobao_small.yaml")
    table = make_chunk(build_model(cfg, seed=2, rows=40_000), 2, 0, 5000)[0]
    titles = pc.filter(table["ad_title"], pc.fill_null(pc.not_equal(table["ad_title"], ""), False))
    words = pc.unique(pc.list_flatten(pc.split_pattern(titles, " "))).to_pylist()
    tok = Tokenizer.from_file(str(ROOT / "configs" / "rich_taobao_small_tokenizer.json"))
    assert 190 <= tok.get_vocab_size() <= 210 and len(words) > 500
    for word, enc in zip(words, tok.encode_batch(words, add_special_tokens=False)):
        assert "[UNK]" not in enc.tokens and "".join(t.removeprefix("##") for t in enc.tokens) == word, word
        assert not enc.tokens[0].startswith("##") and all(t.startswith("##") for t in enc.tokens[1:]), word
