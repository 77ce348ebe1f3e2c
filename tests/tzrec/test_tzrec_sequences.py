"""TorchEasyRec's sequences as its own test and benchmark configs write them, in protobuf text written here:
numeric sub-features of a grouped sequence (``raw_feature`` in ``sequence_feature.features``), standalone
``sequence_id_feature`` / ``sequence_raw_feature``, ``JAGGED_SEQUENCE`` groups, ``sequence_groups`` /
``sequence_encoders`` (DIN encoders inside a DEEP group) and pre-encoded (FG_NONE) sequences."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from tzrec_fixtures import HEAD

from recpipe.batch import to_batch
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.models.registry import build_model
from recpipe.tzrec import TzrecImportError, import_tzrec

# multi_tower_din_fg_mock.config's constructs: a grouped sequence with id and numeric sub-features (the
# numeric one bucketized), three standalone sequences in one SEQUENCE group paired with their query by
# position (user_id <-> buy_50_user_id_seq), not by name.
FEATURES = """\
feature_configs { id_feature { feature_name: "user_id" expression: "user:user_id" hash_bucket_size: 100 embedding_dim: 8 } }
feature_configs { id_feature { feature_name: "item_id" expression: "item:item_id" num_buckets: 50 embedding_dim: 8 } }
feature_configs { raw_feature { feature_name: "raw_1" expression: "item:raw_1" boundaries: [0.1, 0.2, 0.3] embedding_dim: 8 } }
feature_configs {
    sequence_feature {
        sequence_name: "click_50_seq"
        sequence_length: 50
        sequence_delim: "|"
        features { id_feature { feature_name: "item_id" expression: "item:item_id" num_buckets: 50 embedding_dim: 8 } }
        features {
            raw_feature {
                feature_name: "raw_1"
                expression: "item:raw_1"
                boundaries: [0.1, 0.2, 0.3]
                embedding_dim: 8
            }
        }
        features { raw_feature { feature_name: "ts" expression: "user:ts" boundaries: [60, 3600] embedding_dim: 8 } }
    }
}
feature_configs {
    sequence_id_feature {
        feature_name: "buy_50_user_id_seq"
        sequence_length: 50
        sequence_delim: "|"
        expression: "item:buy_50_user_id_seq"
        hash_bucket_size: 100
        embedding_dim: 8
    }
}
feature_configs {
    sequence_raw_feature {
        feature_name: "buy_50_raw_seq"
        sequence_length: 50
        expression: "item:buy_50_raw_seq"
        boundaries: [1, 10]
        embedding_dim: 8
    }
}
"""

GROUPS = """\
    feature_groups { group_name: "deep" feature_names: ["user_id", "item_id", "raw_1"] group_type: DEEP }
    feature_groups {
        group_name: "seq"
        feature_names: ["item_id", "raw_1", "click_50_seq__item_id", "click_50_seq__raw_1", "click_50_seq__ts"]
        group_type: SEQUENCE
    }
    feature_groups {
        group_name: "seq_item"
        feature_names: ["user_id", "buy_50_user_id_seq", "buy_50_raw_seq"]
        group_type: JAGGED_SEQUENCE
    }
"""

DIN = """\
    multi_tower_din {
        towers { input: "deep" mlp { hidden_units: [16] } }
        din_towers { input: "seq" attn_mlp { hidden_units: [8] } }
        din_towers { input: "seq_item" attn_mlp { hidden_units: [8] } }
        final { hidden_units: [8] }
    }
"""


def din_config(features: str = FEATURES, head: str = HEAD) -> str:
    return head + features + "model_config {\n" + GROUPS + DIN + "}\n"


def _problems(text: str) -> list[str]:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text, "x.config")
    return [f"{p.line}: {p.message}" for p in err.value.problems]


def _line(text: str, where: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if where in line)


def rows() -> pa.Table:
    return pa.table(
        {
            "user_id": ["u1", "u2", "u3"],
            "item_id": [3, 7, 9],
            "raw_1": [0.15, 0.05, 0.35],
            "click_50_seq": ["3\x030.15\x0330|8\x030.25\x037200", "", None],
            "buy_50_user_id_seq": ["u7|u8", None, "u1"],
            "buy_50_raw_seq": ["0.5;20", "", "5"],
            "clk": [1, 0, 1],
        }
    )


def test_numeric_sub_features_standalone_sequences_and_jagged_groups_import_and_run():
    imported = import_tzrec(din_config(), "din_fg_mock.config")
    assert "0 refused" in imported.summary
    features = {f["name"]: f for f in imported.data["features"]}
    subs = {s["name"]: s for s in features["click_50_seq"]["sub_features"]}
    # TorchEasyRec's table names: <sequence>__<feature>_emb unless embedding_name shares one.
    assert subs["raw_1"] == {
        "name": "raw_1",
        "boundaries": [0.1, 0.2, 0.3],
        "embedding_dim": 8,
        "embedding_name": "click_50_seq__raw_1",
    }
    assert features["buy_50_user_id_seq"] == {
        "kind": "sequence_id",
        "name": "buy_50_user_id_seq",
        "hash_bucket_size": 100,
        "embedding_dim": 8,
        "default_value": "0",
        "sequence_length": 50,
        "delimiter": "|",
    }
    # sequence_delim's default is ";" (feature.proto).
    assert features["buy_50_raw_seq"]["kind"] == "sequence_raw"
    assert features["buy_50_raw_seq"]["delimiter"] == ";"
    groups = {g["name"]: g for g in imported.data["feature_groups"]}
    assert groups["seq_item"]["type"] == "sequence"  # JAGGED_SEQUENCE: recpipe's groups are jagged already

    spec = build_feature_spec(imported.config)
    seq_item = spec.group("seq_item")
    assert (seq_item.query, seq_item.history) == (["user_id"], ["buy_50_user_id_seq", "buy_50_raw_seq"])
    out = FeatureGenerator(spec)(rows())
    batch = to_batch(out, spec.sparse_keys())
    kjt = batch.sparse.to_dict()
    # Items of row 0: raw_1 0.15 -> bucket 1, 0.25 -> 2; ts 30 -> 0, 7200 -> 2 (searchsorted, side right).
    assert kjt["click_50_seq__raw_1"].values().tolist() == [1, 2]
    assert kjt["click_50_seq__ts"].values().tolist() == [0, 2]
    assert kjt["buy_50_raw_seq"].values().tolist() == [0, 2, 1]
    assert kjt["buy_50_raw_seq"].lengths().tolist() == [2, 0, 1]
    model = build_model(spec, imported.config.model)
    logits = model(batch.dense, batch.sparse)
    assert logits.shape == (3,) and torch.isfinite(logits).all()
    # seq: the query (item_id, raw_1: 16) is padded to the item (item_id, raw_1, ts: 24), as DINEncoder does.
    assert model.dense.din["seq"].pad == 8 and model.dense.din["seq_item"].pad == 8


def test_standalone_sequences_of_one_group_must_have_equal_lengths():
    spec = build_feature_spec(import_tzrec(din_config()).config)
    bad = rows().set_column(5, "buy_50_raw_seq", pa.array(["0.5", "", "5"]))
    with pytest.raises(BadRowError, match="row 0, column 'buy_50_raw_seq': expected as many items as column"):
        FeatureGenerator(spec)(bad)


DENSE_TS = (
    'features { raw_feature { feature_name: "ts" expression: "user:ts" boundaries: [60, 3600] embedding_dim: 8 } }',
    'features { raw_feature { feature_name: "ts" expression: "user:ts" default_value: "-1" } }',
)


def test_a_raw_sub_feature_without_boundaries_is_a_float_per_item():
    """TorchEasyRec's documented grouped sequence (feature.md, 分组序列特征: raw_feature ts, no boundaries): one
    float per item beside the item's embeddings; an empty sub-value is its default_value, a bad one a bad row."""
    text = din_config(FEATURES.replace(*DENSE_TS))
    cfg = import_tzrec(text).config
    seq = next(f for f in cfg.features if f.name == "click_50_seq")
    ts = seq.sub_features[2]
    assert (ts.name, ts.dense, ts.default) == ("ts", True, -1.0)
    spec = build_feature_spec(cfg)
    assert spec.item_float_keys() == ["click_50_seq__ts"]
    assert "click_50_seq__ts" not in {k for t in spec.tables() for k in t.feature_names}
    table = rows().set_column(3, "click_50_seq", pa.array(["3\x030.15\x0330|8\x030.25\x03", "", None]))
    out = FeatureGenerator(spec)(table)
    k = spec.sparse_keys().index("click_50_seq__ts")
    assert out.values[k].view("float64").tolist() == [30.0, -1.0] and out.lengths[k].tolist() == [2, 0, 0]
    model = build_model(spec, cfg.model)
    with torch.no_grad():
        emb = model.sparse_arch(to_batch(out, spec.sparse_keys()).sparse)
    assert emb["seq__values"].shape == (2, 8 + 8 + 1)
    assert emb["seq__values"][:, -1].tolist() == [30.0, -1.0]
    bad = rows().set_column(3, "click_50_seq", pa.array(["3\x030.15\x03soon", "", None]))
    with pytest.raises(
        BadRowError, match="row 0, column 'click_50_seq': expected a finite number in sub-feature"
    ):
        FeatureGenerator(spec)(bad)


def test_a_float_per_item_with_a_normalizer_or_value_dim_0_is_refused():
    with_norm = FEATURES.replace(
        DENSE_TS[0],
        'features { raw_feature { feature_name: "ts" expression: "user:ts" normalizer: "log(x+1)" } }',
    )
    line = _line(din_config(with_norm), 'feature_name: "ts"')
    assert _problems(din_config(with_norm)) == [
        f"{line}: a normalizer of a float per history item is not supported in recpipe"
    ]
    zero = FEATURES.replace(
        DENSE_TS[0], 'features { raw_feature { feature_name: "ts" expression: "user:ts" value_dim: 0 } }'
    )
    found = _problems(din_config(zero))
    line = _line(din_config(zero), 'feature_name: "ts"')
    assert found == [f"{line}: value_dim 0 is not a raw feature's: its values are value_dim numbers"]


def test_value_dim_floats_per_item_and_a_sequence_raw_feature_without_boundaries_import_and_run():
    """multi_tower_din_fg_mock.config's ``raw_3`` (value_dim 4) in ``click_50_seq`` and its standalone
    ``buy_50_raw_5_seq`` without boundaries (raw_feature_test.py ``test_sequence_raw_feature_dense``,
    ``test_simple_sequence_raw_feature_dense``): floats per item, paired in their groups by position."""
    vec = FEATURES.replace(
        DENSE_TS[0], 'features { raw_feature { feature_name: "ts" expression: "user:ts" value_dim: 2 } }'
    )
    dense_seq = vec.replace("boundaries: [1, 10]\n        embedding_dim: 8\n", "")
    imported = import_tzrec(din_config(dense_seq))
    features = {f["name"]: f for f in imported.data["features"]}
    assert features["buy_50_raw_seq"] == {
        "kind": "sequence_raw", "name": "buy_50_raw_seq", "dense": True, "sequence_length": 50, "delimiter": ";",
    }  # fmt: skip
    assert features["click_50_seq"]["sub_features"][2] == {"name": "ts", "dense": True, "value_dim": 2}
    spec = build_feature_spec(imported.config)
    assert spec.item_float_keys() == ["click_50_seq__ts__0", "click_50_seq__ts__1", "buy_50_raw_seq"]
    table = rows().set_column(
        3, "click_50_seq", pa.array(["3\x030.15\x0330\x1d1|8\x030.25\x032\x1d3", "", None])
    )
    out = FeatureGenerator(spec)(table)
    keys = spec.sparse_keys()
    get = lambda k: out.values[keys.index(k)].view("float64").tolist()  # noqa: E731
    assert get("click_50_seq__ts__0") == [30.0, 2.0] and get("click_50_seq__ts__1") == [1.0, 3.0]
    assert get("buy_50_raw_seq") == [0.5, 20.0, 5.0]
    model = build_model(spec, imported.config.model)
    with torch.no_grad():
        emb = model.sparse_arch(to_batch(out, keys).sparse)
    assert emb["seq__values"].shape == (2, 8 + 8 + 2)
    assert emb["seq__values"][:, -2:].tolist() == [[30.0, 1.0], [2.0, 3.0]]
    assert emb["seq_item__values"].shape == (3, 8 + 1)


def test_sequence_length_is_required_and_value_dim_is_unsupported():
    text = FEATURES.replace(
        'sequence_length: 50\n        sequence_delim: "|"\n        expression', "expression"
    )
    found = _problems(din_config(text))
    assert found == [
        f"{_line(din_config(text), 'sequence_id_feature {')}: sequence_id_feature 'buy_50_user_id_seq' needs sequence_length (TorchEasyRec's proto has no default)"
    ]
    multi = FEATURES.replace(
        "hash_bucket_size: 100\n        embedding_dim: 8\n    }",
        "hash_bucket_size: 100\n        embedding_dim: 8\n        value_dim: 0\n    }",
    )
    found = _problems(
        din_config(
            multi.replace(
                "hash_bucket_size: 100\n        embedding_dim: 8\n        value_dim: 0",
                "hash_bucket_size: 100\n        embedding_dim: 8\n        value_dim: 2",
            )
        )
    )
    assert len(found) == 1 and "value_dim 2" in found[0], found


def test_value_dim_0_histories_import_and_pool_each_item():
    """multi_tower_din_fg_mock.config's ``id_3`` of value_dim 0 in ``click_50_seq`` and its ``sequence_id_feature
    buy_50_id_6_seq`` of value_dim 0: several ids per item (``\x1d`` between them), each item pooled (sum)."""
    multi = FEATURES.replace(
        "hash_bucket_size: 100\n        embedding_dim: 8\n    }",
        "hash_bucket_size: 100\n        embedding_dim: 8\n        value_dim: 0\n    }",
    ).replace(
        'features { id_feature { feature_name: "item_id" expression: "item:item_id" num_buckets: 50 embedding_dim: 8 } }\n        features {\n            raw_feature',
        'features { id_feature { feature_name: "item_id" expression: "item:item_id" num_buckets: 50 embedding_dim: 8 value_dim: 0 } }\n        features {\n            raw_feature',
    )
    imported = import_tzrec(din_config(multi))
    features = {f["name"]: f for f in imported.data["features"]}
    assert features["buy_50_user_id_seq"]["value_dim"] == 0
    assert features["click_50_seq"]["sub_features"][0]["value_dim"] == 0
    spec = build_feature_spec(imported.config)
    table = rows().set_column(
        3, "click_50_seq", pa.array(["3\x1d4\x030.15\x0330|8\x030.25\x037200", "", None])
    )
    table = table.set_column(4, "buy_50_user_id_seq", pa.array(["u7\x1du8|u9", None, "u1"]))
    out = FeatureGenerator(spec)(table)
    keys = spec.sparse_keys()
    got = {k: (out.values[keys.index(k)].tolist(), out.lengths[keys.index(k)].tolist()) for k in keys}
    assert got["click_50_seq__item_id"] == ([3, 4, 8], [3, 0, 0])
    assert got["click_50_seq__item_id__item_lengths"] == ([2, 1], [2, 0, 0])
    assert got["buy_50_user_id_seq__item_lengths"] == ([2, 1, 1], [2, 0, 1])
    model = build_model(spec, imported.config.model)
    with torch.no_grad():
        emb = model.sparse_arch(to_batch(out, keys).sparse)
    assert emb["seq__values"].shape == (2, 8 + 8 + 8) and emb["seq__offsets"].tolist() == [0, 2, 2, 2]
    assert emb["seq_item__values"].shape == (3, 8 + 8) and emb["seq_item__offsets"].tolist() == [0, 2, 2, 3]


def test_names_paired_out_of_order_are_refused():
    text = din_config().replace(
        '["item_id", "raw_1", "click_50_seq__item_id", "click_50_seq__raw_1", "click_50_seq__ts"]',
        '["raw_1", "item_id", "click_50_seq__item_id", "click_50_seq__raw_1", "click_50_seq__ts"]',
    )
    imported = import_tzrec(text)
    with pytest.raises(ValueError, match="in the order of their query features"):
        build_feature_spec(imported.config)


# dbmtl_has_sequence_mock.config's constructs: DIN encoders over sequence groups inside the one DEEP group.
MULTITASK_HEAD = HEAD.replace('label_fields: "clk"', 'label_fields: "clk"\n    label_fields: "buy"')
DBMTL = """\
model_config {
    feature_groups {
        group_name: "all"
        feature_names: ["user_id", "item_id", "raw_1"]
        group_type: DEEP
        sequence_groups {
            group_name: "click_50_seq"
            feature_names: ["item_id", "raw_1", "click_50_seq__item_id", "click_50_seq__raw_1", "click_50_seq__ts"]
        }
        sequence_groups {
            group_name: "buys"
            feature_names: ["user_id", "buy_50_user_id_seq", "buy_50_raw_seq"]
        }
        sequence_encoders { din_encoder { input: "click_50_seq" attn_mlp { hidden_units: [16, 8] } } }
        sequence_encoders { din_encoder { input: "buys" attn_mlp { hidden_units: [8] } } }
    }
    dbmtl {
        bottom_mlp { hidden_units: [16] }
        task_towers { tower_name: "ctr" label_name: "clk" mlp { hidden_units: [8] } losses { binary_cross_entropy {} } }
        task_towers { tower_name: "cvr" label_name: "buy" mlp { hidden_units: [8] } losses { binary_cross_entropy {} } }
    }
}
"""


def test_sequence_encoders_of_a_multitask_group_become_din_towers():
    imported = import_tzrec(MULTITASK_HEAD + FEATURES + DBMTL, "dbmtl_has_sequence.config")
    assert "0 refused" in imported.summary
    model = imported.data["model"]
    assert model["towers"] == [{"group": "all"}]
    assert model["din_towers"] == [
        {"group": "click_50_seq", "attn_mlp": {"hidden_units": [16, 8]}},
        {"group": "buys", "attn_mlp": {"hidden_units": [8]}},
    ]
    groups = [(g["name"], g["type"]) for g in imported.data["feature_groups"]]
    assert groups == [("all", "deep"), ("click_50_seq", "sequence"), ("buys", "sequence")]
    spec = build_feature_spec(imported.config)
    table = rows().append_column("buy", pa.array([0, 0, 1]))
    batch = to_batch(FeatureGenerator(spec)(table), spec.sparse_keys())
    model = build_model(spec, imported.config.model)
    logits = model(batch.dense, batch.sparse)
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()


def test_one_unnamed_sequence_group_is_named_after_its_group_and_an_encoder_without_input_reads_it():
    text = (
        DBMTL.replace('group_name: "click_50_seq"\n', "", 1)
        .replace('input: "click_50_seq" ', "")
        .replace(
            'sequence_groups {\n            group_name: "buys"\n            feature_names: ["user_id", "buy_50_user_id_seq", "buy_50_raw_seq"]\n        }\n',
            "",
        )
        .replace('sequence_encoders { din_encoder { input: "buys" attn_mlp { hidden_units: [8] } } }\n', "")
    )
    imported = import_tzrec(MULTITASK_HEAD + FEATURES + text)
    assert imported.data["model"]["din_towers"] == [
        {"group": "all_seq", "attn_mlp": {"hidden_units": [16, 8]}}
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('input: "buys"', 'input: "nope"', "input 'nope' is not one of the sequence_groups"),
        (
            'sequence_encoders { din_encoder { input: "buys" attn_mlp { hidden_units: [8] } } }\n',
            "",
            "sequence group 'buys' has no sequence encoder",
        ),
        (
            "attn_mlp { hidden_units: [8] } }",
            "attn_mlp { hidden_units: [8] } max_seq_length: 10 }",
            "set sequence_length to 10 instead",
        ),
    ],
)
def test_sequence_encoder_mistakes_are_refused(old, new, expected):
    found = _problems(MULTITASK_HEAD + FEATURES + DBMTL.replace(old, new))
    assert len(found) == 1 and expected in found[0], found


def test_sequence_encoders_feeding_a_tower_mlp_are_refused():
    """TorchEasyRec's multi_tower reads the group with its encoders' outputs appended; recpipe's DIN towers
    join at the final MLP."""
    model = DBMTL[: DBMTL.index("    dbmtl {")].replace('"all"', '"deep"', 1) + (
        '    multi_tower { towers { input: "deep" mlp { hidden_units: [8] } } final { hidden_units: [8] } }\n}\n'
    )
    found = _problems(HEAD + FEATURES + model)
    assert len(found) == 1 and "a different model" in found[0], found


# dbmtl_taobao_seq.config's construct: pre-encoded (FG_NONE) sequences, one column per sub-feature.
ENCODED_HEAD = HEAD.replace("fg_mode: FG_DAG", "fg_mode: FG_NONE")


def test_pre_encoded_sequences_read_one_column_per_sub_feature():
    imported = import_tzrec(din_config(head=ENCODED_HEAD))
    assert imported.config.data.fg_encoded
    spec = build_feature_spec(imported.config)
    columns = {s.name: s.column for s in spec.sequences}
    assert columns["click_50_seq__ts"] == "click_50_seq__ts" and columns["buy_50_raw_seq"] == "buy_50_raw_seq"
    table = pa.table(
        {
            "user_id": [1, 2],
            "item_id": [3, 7],
            "raw_1": [1, 0],
            "click_50_seq__item_id": ["3|8", ""],
            "click_50_seq__raw_1": ["1|2", None],
            "click_50_seq__ts": ["0|2", ""],
            "buy_50_user_id_seq": ["7|8", "1"],
            "buy_50_raw_seq": ["0;2", "1"],
            "clk": [1, 0],
        }
    )
    kjt = to_batch(FeatureGenerator(spec)(table), spec.sparse_keys()).sparse.to_dict()
    assert kjt["click_50_seq__ts"].values().tolist() == [0, 2]  # bucket ids as they are
    assert kjt["click_50_seq__item_id"].lengths().tolist() == [2, 0]
    assert kjt["buy_50_raw_seq"].values().tolist() == [0, 2, 1]
    wrong = table.set_column(5, "click_50_seq__ts", pa.array(["0|3", ""]))  # 2 boundaries: ids 0..2
    with pytest.raises(
        BadRowError, match=r"row 0, column 'click_50_seq__ts': expected a pre-encoded id in \[0, 3\)"
    ):
        FeatureGenerator(spec)(wrong)
    short = table.set_column(5, "click_50_seq__ts", pa.array(["0", ""]))
    with pytest.raises(BadRowError, match="column 'click_50_seq__ts': expected as many items as column"):
        FeatureGenerator(spec)(short)
