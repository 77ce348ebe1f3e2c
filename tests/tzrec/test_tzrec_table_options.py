"""TorchEasyRec's common embedding-table settings ``data_type`` and ``trainable`` (feature.md, 共用配置), written
as its tzrec/tests/configs use them (multi_tower_din_fg_mock_bf16_emb_fp16.config: FP16 id, lookup and sequence
tables; multi_tower_din_mock_frozen.config: frozen id and bucketized raw tables, a frozen sequence
sub-feature)."""

from __future__ import annotations

import pytest
from tzrec_fixtures import HEAD, small_din

from recpipe.features.build import build_feature_spec
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError


def test_fp16_and_frozen_tables_map() -> None:
    text = (
        small_din(sequence_extra='data_type: "FP16"\n                trainable: false')
        .replace(
            "num_buckets: 50 embedding_dim: 8 } }",
            'num_buckets: 50 embedding_dim: 8 data_type: "FP16" trainable: False } }',
            1,
        )
        .replace(
            "num_buckets: 100 embedding_dim: 8 }", 'num_buckets: 100 embedding_dim: 8 data_type: "FP32" }', 1
        )
    )
    imported = import_tzrec(text)
    features = {f["name"]: f for f in imported.data["features"]}
    assert "data_type" not in features["user_id"] and "trainable" not in features["user_id"]  # FP32: default
    assert (features["adgroup_id"]["data_type"], features["adgroup_id"]["trainable"]) == ("fp16", False)
    sub = features["click_50_seq"]["sub_features"][0]
    assert (sub["data_type"], sub["trainable"]) == ("fp16", False)
    tables = {t.name: t for t in build_feature_spec(imported.config).tables()}
    assert (tables["adgroup_id"].data_type, tables["adgroup_id"].trainable) == ("fp16", False)
    assert (tables["user_id"].data_type, tables["user_id"].trainable) == ("fp32", True)


def test_a_shared_table_with_different_settings_is_refused() -> None:
    # The history's adgroup_id shares the target's table by its embedding_name.
    text = small_din(sequence_extra='data_type: "FP16"\n                embedding_name: "adgroup_id_emb"')
    with pytest.raises(
        TzrecImportError, match="differ in their buckets, embedding_dim, data_type, trainable or init"
    ):
        import_tzrec(text)


def test_a_bucketized_raw_feature_takes_them_and_a_dense_one_notes_them() -> None:
    text = (
        HEAD
        + """\
feature_configs { raw_feature { feature_name: "raw_1" expression: "item:raw_1" boundaries: [0.1, 0.2] embedding_dim: 8 trainable: false } }
feature_configs { raw_feature { feature_name: "raw_2" expression: "item:raw_2" data_type: "FP16" } }
model_config {
    feature_groups { group_name: "all" feature_names: ["raw_1", "raw_2"] group_type: DEEP }
    multi_tower { towers { input: "all" mlp { hidden_units: [8] } } final { hidden_units: [4] } }
}
"""
    )
    imported = import_tzrec(text)
    features = {f["name"]: f for f in imported.data["features"]}
    assert features["raw_1"]["trainable"] is False and "data_type" not in features["raw_2"]
    (note,) = [n for n in imported.notes if n.path.endswith("data_type")]
    assert note.path == "feature_configs[1].raw_feature.data_type"
    assert note.message == "ignored: a dense value has no embedding table" and note.line == 15


def test_an_unknown_data_type_is_refused() -> None:
    text = small_din().replace(
        "num_buckets: 100 embedding_dim: 8 }", 'num_buckets: 100 embedding_dim: 8 data_type: "BF16" }', 1
    )
    with pytest.raises(TzrecImportError, match="data_type 'BF16' is not 'FP32' or 'FP16'"):
        import_tzrec(text)


def test_recpipe_refuses_table_settings_on_a_dense_feature() -> None:
    from recpipe.config import ConfigError, parse_config

    data = {
        "name": "x",
        "data": {"label": "clk"},
        "features": [{"kind": "raw", "name": "price", "data_type": "fp16"}],
        "feature_groups": [{"name": "all", "type": "deep", "features": ["price"]}],
        "model": {
            "type": "multi_tower",
            "towers": [{"group": "all", "mlp": {"hidden_units": [4]}}],
            "final": {"hidden_units": [4]},
        },
    }
    with pytest.raises(
        ConfigError, match="data_type set a feature's embedding table; this feature is a dense value"
    ):
        parse_config(data)
