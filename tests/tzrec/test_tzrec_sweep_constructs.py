"""Constructs of TorchEasyRec's own test and benchmark configs the importer maps (or refuses precisely), each
in a snippet written here: a pre-encoded (FG_NONE) raw vector, lookup features embedded by ``mlp``/``autodis``,
zch's ``lfu`` / ``lru`` eviction, ``dynamicemb`` as zch, FG_DAG's ``feature:X`` inputs, RTP's ``<sequence>_<feature>`` names in feature groups, and
the training options (Adagrad's initial accumulator, gradient clipping, accumulation, task-space weights)."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from tzrec_fixtures import HEAD, small_din

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.tzrec import TzrecImportError, import_tzrec

ENCODED_HEAD = HEAD.replace("fg_mode: FG_DAG", "fg_mode: FG_NONE")
DEEP_MODEL = """\
model_config {{
    feature_groups {{
        group_name: "deep"
        feature_names: [{names}]
        group_type: DEEP
    }}
    multi_tower {{
        towers {{ input: "deep" mlp {{ hidden_units: [8] }} }}
        final {{ hidden_units: [8] }}
    }}
}}
"""


def _model(*names: str) -> str:
    return DEEP_MODEL.format(names=", ".join(f'"{n}"' for n in names))


ENCODED_VECTOR = """\
feature_configs {
    id_feature { feature_name: "user_id" num_buckets: 100 embedding_dim: 8 }
}
feature_configs {
    raw_feature { feature_name: "raw_3" value_dim: 4 }
}
"""


# ------------------------------------------------------------------- FG_NONE raw vectors (value_dim > 1)
def test_a_pre_encoded_raw_vector_reads_value_dim_numbers_by_the_encoded_separator(tmp_path) -> None:
    imported = import_tzrec(ENCODED_HEAD + ENCODED_VECTOR + _model("user_id", "raw_3"))
    raw3 = imported.config.features[1]
    # FG_NONE joins a row's values by data_config's fg_encoded_multival_sep (default "\x03"), not separator
    assert (raw3.value_dim, raw3.separator, raw3.column) == (4, "\x03", None)
    spec = build_feature_spec(imported.config)
    assert spec.group("deep").dense == [f"raw_3__{i}" for i in range(4)]
    rows = {"user_id": [1, 2, 3, 4], "raw_3": ["0.1\x030.2\x030.3\x030.4", None, "", "1\x032\x033\x034"]}
    out = FeatureGenerator(spec, with_labels=False)(pa.table(rows))
    np.testing.assert_allclose(out.dense, [[0.1, 0.2, 0.3, 0.4], [0] * 4, [0] * 4, [1, 2, 3, 4]], rtol=1e-6)
    # a list column reads the same; fg.json round-trips the entries
    again = FeatureSpec.from_dict(spec.to_dict())
    listed = pa.table(
        {"user_id": [1, 2], "raw_3": pa.array([[0.1, 0.2, 0.3, 0.4], None], pa.list_(pa.float64()))}
    )
    np.testing.assert_allclose(
        FeatureGenerator(again, with_labels=False)(listed).dense, [[0.1, 0.2, 0.3, 0.4], [0] * 4], rtol=1e-6
    )
    (tmp_path / "c.yaml").write_text(imported.to_yaml())
    assert load_config(tmp_path / "c.yaml") == imported.config


def test_a_pre_encoded_vector_of_another_count_is_a_bad_row_and_its_default_reads_by_the_separator() -> None:
    text = ENCODED_VECTOR.replace("value_dim: 4", 'value_dim: 2 fg_encoded_default_value: "0.5\\0030.25"')
    text = (
        ENCODED_HEAD.replace("fg_mode: FG_NONE", 'fg_mode: FG_NONE\n    fg_encoded_multival_sep: "|"') + text
    )
    imported = import_tzrec(text.replace('"0.5\\0030.25"', '"0.5|0.25"') + _model("user_id", "raw_3"))
    raw3 = imported.config.features[1]
    assert (raw3.separator, raw3.default) == ("|", [0.5, 0.25])
    spec = build_feature_spec(imported.config)
    gen = FeatureGenerator(spec, with_labels=False)
    assert gen(pa.table({"user_id": [1, 2], "raw_3": ["1|2", None]})).dense.tolist() == [[1, 2], [0.5, 0.25]]
    with pytest.raises(Exception, match=r"raw_3.*2 numbers separated by '\|'"):
        gen(pa.table({"user_id": [1], "raw_3": ["1|2|3"]}))


def test_a_pre_encoded_bucketized_vector_is_refused_by_line() -> None:
    text = ENCODED_VECTOR.replace("value_dim: 4", "value_dim: 4 boundaries: [0.5] embedding_dim: 4")
    with pytest.raises(TzrecImportError, match=r"line 18: .*bucketized raw features of value_dim > 1"):
        import_tzrec(ENCODED_HEAD + text + _model("user_id", "raw_3"))


# ------------------------------------------------------------------------ RTP names, dynamicemb
def test_a_group_may_name_a_sub_feature_as_torcheasyrecs_rtp_mode_does() -> None:
    # USE_RTP=1 spells a grouped sub-feature "<sequence>_<feature>" (Feature._underline)
    text = small_din().replace(
        'feature_names: "click_50_seq__adgroup_id"', 'feature_names: "click_50_seq_adgroup_id"'
    )
    groups = {g.name: g.features for g in import_tzrec(text).config.feature_groups}
    assert groups["seq"] == ["adgroup_id", "click_50_seq__adgroup_id"]
    # a name no feature or sub-feature has stays an error
    with pytest.raises(TzrecImportError, match="'click_50_seq_brand' is not defined in feature_configs"):
        import_tzrec(text.replace("click_50_seq_adgroup_id", "click_50_seq_brand"))


def _dynamicemb(settings: str, mapping: str = "") -> str:
    return small_din().replace(
        'expression: "user:user_id" num_buckets: 100 embedding_dim: 8',
        f'expression: "user:user_id" {mapping} embedding_dim: 8 dynamicemb {{ max_capacity: 64 {settings} }}',
    )


def test_dynamicemb_imports_as_a_zch_table() -> None:
    """docs/source/feature/dynamicemb.md, zch_to_dynamicemb_convert_tgt.config: a value-keyed table of
    ``max_capacity`` rows (``num_embeddings``), ``STEP`` (the default) evicting the id updated longest ago (zch's
    lru), ``LFU`` the least seen, admitted at once (every step); the storage settings are notes."""
    imported = import_tzrec(_dynamicemb("init_capacity_per_rank: 128 cache_load_factor: 0.5"))
    user = imported.config.features[0]
    assert (user.zch, user.zch_size, user.hash_bucket_size) == (True, 64, 64)
    assert (user.zch_eviction_policy, user.zch_decay_exponent, user.zch_eviction_interval) == ("lru", None, 1)
    assert {n.path.rsplit(".", 1)[-1] for n in imported.notes} >= {
        "init_capacity_per_rank",
        "cache_load_factor",
    }
    # the import says at the dynamicemb line where the zch table behaves otherwise
    (differs,) = [n for n in imported.notes if n.path.endswith(".dynamicemb")]
    assert "spare row" in differs.message and "zero vector" in differs.message
    spec = build_feature_spec(imported.config)
    assert spec.feature("user_id").zch and spec.feature("user_id").zch_eviction_policy == "lru"
    lfu = import_tzrec(
        _dynamicemb('score_strategy: "LFU" initializer_args { mode: "UNIFORM" }', "num_buckets: 9")
    )
    assert (lfu.config.features[0].zch_eviction_policy, lfu.config.features[0].num_buckets) == ("lfu", 9)


@pytest.mark.parametrize(
    ("settings", "field", "why"),
    [
        ('eval_initializer_args { mode: "CONSTANT" }', "eval_initializer_args", "spare row"),
        ("bucket_capacity: 64", "bucket_capacity", "over the whole table"),
        ('init_table: "odps://p/tables/t"', "init_table", "train.init_from"),
        ('score_strategy: "TIMESTAMP"', "score_strategy", "wall-clock"),
        ('score_strategy: "NO_EVICTION"', "score_strategy", "always evict"),
    ],
)
def test_a_dynamicemb_field_without_a_counterpart_is_refused_at_its_line(settings, field, why) -> None:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(_dynamicemb(settings))
    [problem] = err.value.problems
    assert (problem.line, problem.path) == (14, f"feature_configs[0].id_feature.dynamicemb.{field}")
    assert why in problem.message


def test_dynamicemb_frequency_admission_imports_as_zch_admission() -> None:
    """docs/source/feature/dynamicemb.md's admission_strategy (and multi_tower_din_fg_dynamicemb_mock.config's
    user_id): an id gets a row from its ``threshold``-th sighting, reading zeros until then."""
    imported = import_tzrec(_dynamicemb("frequency_admission_strategy { threshold: 5 }"))
    user = imported.config.features[0]
    assert user.zch and user.zch_admission.model_dump() == {
        "threshold": 5,
        "counter_capacity": None,
        "default_value": 0.0,
    }
    (differs,) = [n for n in imported.notes if n.path.endswith(".dynamicemb")]
    assert "reads zeros" in differs.message and "trained spare row" not in differs.message
    spec = build_feature_spec(imported.config)
    table = next(t for t in spec.tables() if t.name == "user_id")
    assert (table.zch_admission.threshold, table.zch_admission.counter_capacity) == (5, None)
    full = import_tzrec(
        _dynamicemb(
            "frequency_admission_strategy { threshold: 2 counter_capacity: 500 counter_bucket_capacity: 64 "
            'initializer_args { mode: "CONSTANT" } }'
        )
    )
    assert full.config.features[0].zch_admission.counter_capacity == 500
    notes = {n.path.rsplit(".", 1)[-1]: n.message for n in full.notes}
    assert "storage" in notes["counter_bucket_capacity"] and "lowest count" in notes["counter_capacity"]


@pytest.mark.parametrize(
    ("initializer", "field", "why"),
    [
        (
            'mode: "NORMAL" std_dev: 0.1',
            "initializer_args.mode",
            "a random vector for an id not yet admitted",
        ),
        ('mode: "CONSTANT" value: 0.5', "initializer_args.value", "evaluation initializer (zeros)"),
        ("value: 1", "initializer_args.value", "evaluation initializer (zeros)"),  # mode unset: CONSTANT
    ],
)
def test_an_admission_initializer_other_than_zeros_is_refused_at_its_line(initializer, field, why) -> None:
    text = _dynamicemb(
        f"frequency_admission_strategy {{ threshold: 3 initializer_args {{ {initializer} }} }}"
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    [problem] = err.value.problems
    assert problem.path == f"feature_configs[0].id_feature.dynamicemb.frequency_admission_strategy.{field}"
    assert problem.line == 14 and why in problem.message


def test_dynamicemb_with_zch_or_a_vocabulary_is_refused() -> None:
    with pytest.raises(TzrecImportError, match="zch and dynamicemb both set"):
        import_tzrec(_dynamicemb("", "zch { zch_size: 8 lfu {} }"))
    with pytest.raises(TzrecImportError, match="dynamicemb with vocab_list"):
        import_tzrec(_dynamicemb("", 'vocab_list: ["a"]'))


# TorchEasyRec's docs/source/feature/data.md example (and multi_tower_din_zch_fg_mock.config's raw_6_id /
# lookup_5): a lookup keyed by a bucketized raw feature's bucket id.
FEATURE_OUTPUT = """\
feature_configs {
    raw_feature { feature_name: "age_binning" expression: "user:age" boundaries: [18, 25] embedding_dim: 4 }
}
feature_configs {
    lookup_feature { feature_name: "lk" map: "item:age_map" key: "feature:age_binning" vocab_list: ["x", "y"]
                     embedding_dim: 4 }
}
"""


def test_an_fg_dag_feature_input_reads_the_bucket_id_of_a_bucketized_raw_feature() -> None:
    imported = import_tzrec(HEAD + FEATURE_OUTPUT + _model("age_binning", "lk"))
    [raw, lookup] = imported.data["features"]
    assert raw == {
        "kind": "raw",
        "name": "age_binning",
        "column": "age",
        "boundaries": [18, 25],
        "embedding_dim": 4,
    }
    assert lookup["key"] == "feature:age_binning" and lookup["map"] == "age_map"
    spec = build_feature_spec(imported.config)
    assert spec.input_columns() == ["age", "age_map", "clk"]  # the bucket id is FG's, not a table column
    # age 30 → bucket 2, 20 → 1, null → 0 (default 0); x is id 1, y id 2 (0: out of the vocabulary).
    rows = pa.table({"age": [30, 20, None], "age_map": ["2:y\x1d1:x", "1:x", "0:y"]})
    out = FeatureGenerator(spec, with_labels=False)(rows)
    assert out.values[spec.sparse_keys().index("lk")].tolist() == [2, 1, 2]


# multi_tower_din_fg_mock.config's raw_7 / lookup_7: a lookup keyed by a dense raw feature (AutoDis-embedded, no
# boundaries): its value, the default where missing, as a float32's shortest text.
DENSE_OUTPUT = """\
feature_configs {
    raw_feature { feature_name: "score" expression: "user:score" default_value: "0.5" embedding_dim: 4
                  autodis { num_channels: 3 temperature: 0.1 keep_prob: 0.8 } }
}
feature_configs {
    lookup_feature { feature_name: "lk" map: "user:score_map" key: "feature:score" vocab_list: ["x", "y"]
                     embedding_dim: 4 }
}
"""


def test_an_fg_dag_feature_input_reads_the_value_of_a_dense_raw_feature() -> None:
    imported = import_tzrec(HEAD + DENSE_OUTPUT + _model("score", "lk"))
    [raw, lookup] = imported.data["features"]
    assert (raw["kind"], raw["name"], raw["default"], "boundaries" in raw) == ("raw", "score", 0.5, False)
    assert lookup["key"] == "feature:score"
    spec = build_feature_spec(imported.config)
    assert spec.input_columns() == ["score_map", "score", "clk"]  # the value is FG's, not a table column
    # 2.0 → key "2" (y; "2.0" is no key of it); null → 0.5 → "0.5" (x); 0.25 → "0.25", not in its map →
    # default_value "0", out of the list: 0. x is id 1, y id 2.
    rows = pa.table({"score": [2.0, None, 0.25], "score_map": ["2:y\x1d2.0:x", "0.5:x", "0.3:y"]})
    out = FeatureGenerator(spec, with_labels=False)(rows)
    assert out.values[spec.sparse_keys().index("lk")].tolist() == [2, 1, 0]


@pytest.mark.parametrize(
    ("first", "key", "field", "message"),
    [
        (
            'raw_feature { feature_name: "age_binning" expression: "user:age" boundaries: [18] embedding_dim: 4 }',
            "feature:age",
            "lookup_feature.key",
            "input 'feature:age' names no feature 'age'",
        ),
        (
            'id_feature { feature_name: "age_binning" expression: "user:age" num_buckets: 9 embedding_dim: 4 }',
            "feature:age_binning",
            "lookup_feature.key",
            "feature 'age_binning' is of kind 'id': recpipe reads 'feature:X' of a raw feature only",
        ),
        (  # a dense raw feature's normalized value
            'raw_feature { feature_name: "age_binning" expression: "user:age" '
            'normalizer: "method=expression,expr=log(x+1)" }',
            "feature:age_binning",
            "lookup_feature.key",
            "feature 'age_binning' normalizes its value",
        ),
        (
            'raw_feature { feature_name: "age_binning" expression: "user:age" value_dim: 2 }',
            "feature:age_binning",
            "lookup_feature.key",
            "has value_dim 2 values a row",
        ),
        (
            'raw_feature { feature_name: "age_binning" expression: "user:age" boundaries: [18] embedding_dim: 4 '
            "value_dim: 2 }",
            "feature:age_binning",
            "lookup_feature.key",
            "has value_dim 2 bucket ids a row",
        ),
        (  # X reads a feature output itself: a chain (and so a cycle, here X reads its own)
            'raw_feature { feature_name: "age_binning" expression: "feature:age_binning" boundaries: [18] '
            "embedding_dim: 4 }",
            "feature:age_binning",
            "lookup_feature.key",
            "reads 'feature:age_binning' itself: a chain \\(or cycle\\)",
        ),
    ],
)
def test_every_other_fg_dag_feature_input_is_refused_at_its_line(
    first: str, key: str, field: str, message: str
) -> None:
    text = f"""\
feature_configs {{ {first} }}
feature_configs {{
    lookup_feature {{ feature_name: "lk" map: "item:age_map" key: "{key}" num_buckets: 9 embedding_dim: 4 }}
}}
"""
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(HEAD + text + _model("age_binning", "lk"))
    problems = [p for p in err.value.problems if p.path == f"feature_configs[1].{field}"]
    assert [p.line for p in problems] == [16] and problems[0].message.startswith("input ")
    assert re.search(message, problems[0].message), problems[0].message


def test_a_history_item_reading_a_feature_output_is_refused() -> None:
    text = small_din(sequence_extra="").replace(
        'features {\n            id_feature {\n                feature_name: "adgroup_id"\n                expression: "item:adgroup_id"',
        'features {\n            id_feature {\n                feature_name: "adgroup_id"\n                expression: "feature:adgroup_id"',
    )
    assert "feature:adgroup_id" in text
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    [problem] = err.value.problems
    assert problem.path.endswith("features[0].id_feature.expression")
    assert "a history's items read their values from the history column" in problem.message
