"""The importer maps TorchEasyRec's multi-value constructs: id features' ``separator`` / ``value_dim`` /
``default_bucketize_value``, raw vectors (``value_dim: 4``, as its tests/configs/dssm_fg_mock.config writes
them), and ``combo_feature`` (``expression: ["user:id_1", "item:id_2"]``, as its multi_tower_din_fg_mock.config
writes it), and ``weighted`` ids (``k:w`` pairs). The snippets below are written for these tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from tzrec_fixtures import HEAD, small_din

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.tzrec import TzrecImportError, import_tzrec

FEATURES = """\
feature_configs {
    id_feature {
        feature_name: "tags"
        expression: "user:tag_list"
        hash_bucket_size: 1000
        embedding_dim: 8
        pooling: "mean"
    }
}
feature_configs {
    id_feature {
        feature_name: "cate"
        expression: "item:cate"
        embedding_dim: 8
        vocab_list: ["xyz", "abc", "efg"]
        default_bucketize_value: 0
        separator: "|"
        value_dim: 1
    }
}
feature_configs {
    raw_feature {
        feature_name: "user_raw_3"
        expression: "user:user_raw_3"
        value_dim: 4
    }
}
feature_configs {
    raw_feature {
        feature_name: "pic_emb"
        expression: "item:pic_emb"
        separator: "|"
        value_dim: 2
        default_value: "0.1|0.4"
        boundaries: [0.05, 0.15, 0.25]
        embedding_dim: 8
    }
}
feature_configs {
    combo_feature {
        feature_name: "combo_1"
        expression: ["user:id_1", "item:id_2"]
        hash_bucket_size: 1000000
        embedding_dim: 8
    }
}
"""
MODEL = """\
model_config {
    feature_groups {
        group_name: "deep"
        feature_names: ["tags", "cate", "user_raw_3", "pic_emb", "combo_1"]
        group_type: DEEP
    }
    multi_tower {
        towers { input: "deep" mlp { hidden_units: [8] } }
        final { hidden_units: [8] }
    }
}
"""


def _import(features: str = FEATURES):
    return import_tzrec(HEAD + features + MODEL)


def test_the_multi_value_constructs_map_to_recpipe_features() -> None:
    cfg = _import().config
    tags, cate, raw3, pic, combo = cfg.features
    assert (tags.kind, tags.column, tags.pooling, tags.separator, tags.value_dim) == (
        "id",
        "tag_list",
        "mean",
        "\x1d",
        0,
    )
    assert (cate.separator, cate.value_dim, cate.default_bucketize_value, cate.vocab_list) == (
        "|",
        1,
        0,
        ["xyz", "abc", "efg"],
    )
    assert (raw3.value_dim, raw3.default) == (4, 0.0)
    assert (pic.value_dim, pic.separator, pic.default, pic.boundaries) == (
        2,
        "|",
        [0.1, 0.4],
        [0.05, 0.15, 0.25],
    )
    assert (combo.kind, combo.columns, combo.hash_bucket_size) == ("combo", ["id_1", "id_2"], 1000000)


def test_the_imported_features_run_as_torcheasyrec_documents() -> None:
    spec = build_feature_spec(_import().config)
    assert spec.group("deep").dense == [f"user_raw_3__{i}" for i in range(4)]
    rows = pa.table(
        {
            "tag_list": ["a\x1db", None],
            "cate": ["abc|efg", "hij"],
            "user_raw_3": [[1.0, 2.0, 3.0, 4.0], None],
            "pic_emb": ["0.2|0.5", ""],
            "id_1": ["ua\x1dub", "uc"],
            "id_2": ["ia", None],
        }
    )
    out = FeatureGenerator(spec, with_labels=False)(rows)
    lengths = dict(zip(spec.sparse_keys(), (x.tolist() for x in out.lengths)))
    values = dict(zip(spec.sparse_keys(), (x.tolist() for x in out.values)))
    assert lengths["tags"] == [2, 0] and lengths["combo_1"] == [2, 0]
    assert (values["cate"], lengths["cate"]) == ([1, 0], [1, 1])  # value_dim 1: the first id; hij → 0
    assert values["pic_emb"] == [2, 3, 1, 3]  # raw_feature_test's boundaries example, "|" as separator
    assert out.dense.tolist() == [[1, 2, 3, 4], [0, 0, 0, 0]]


def test_weighted_ids_import_and_read_k_w_pairs() -> None:
    text = FEATURES.replace('        pooling: "mean"\n', '        pooling: "mean"\n        weighted: true\n')
    imported = _import(text)
    tags = imported.config.features[0]
    assert (tags.kind, tags.weighted, tags.pooling, tags.separator) == ("id", True, "mean", "\x1d")
    spec = build_feature_spec(imported.config)
    assert spec.feature("tags").weights_key == "tags__weights"
    # feature.md's input k1:v1\x1dk2:v2: ids hashed as ever, each with its weight
    rows = pa.table(
        {
            "tag_list": ["a:0.5\x1db:2", None],
            "cate": ["abc", "zz"],
            "user_raw_3": ["1\x1d2\x1d3\x1d4", None],
            "pic_emb": ["0.1|0.2", None],
            "id_1": ["x", None],
            "id_2": ["y", None],
        }
    )
    out = FeatureGenerator(spec, with_labels=False)(rows)
    keys = spec.sparse_keys()
    bits = out.values[keys.index("tags__weights")]
    assert np.asarray(bits).view(np.float64).tolist() == [0.5, 2.0]
    assert out.lengths[keys.index("tags")].tolist() == [2, 0]


def test_weighted_zch_ids_are_refused_by_line() -> None:
    text = FEATURES.replace(
        "        hash_bucket_size: 1000\n",
        "        zch { zch_size: 1000 lfu {} }\n        weighted: true\n",
        1,
    )
    with pytest.raises(TzrecImportError) as err:
        _import(text)
    [problem] = err.value.problems
    assert problem.path == "feature_configs[0].id_feature.weighted"
    assert "zero-collision tables are jagged lookups without per-id weights" in problem.message


def test_multi_value_sub_features_are_refused_by_line() -> None:
    # a history's sub-feature holds one value per item (value_dim 1, TorchEasyRec's default there)
    assert import_tzrec(small_din("value_dim: 1")).config.features[2].sub_features[0].name == "adgroup_id"
    # value_dim 0 is several ids per item (tests/tzrec/test_tzrec_sequences.py); any other count is refused
    assert import_tzrec(small_din("value_dim: 0")).config.features[2].sub_features[0].value_dim == 0
    with pytest.raises(
        TzrecImportError, match=r"line 27: .*id_feature.value_dim: value_dim 2: recpipe reads one"
    ):
        import_tzrec(small_din("value_dim: 2"))


def test_a_combo_of_one_input_or_with_num_buckets_is_refused() -> None:
    one = FEATURES.replace('expression: ["user:id_1", "item:id_2"]', 'expression: ["user:id_1"]')
    with pytest.raises(
        TzrecImportError,
        match=r"line 55: feature_configs\[4\].combo_feature.expression: a combo feature crosses 2",
    ):
        _import(one)
    # TorchEasyRec's ComboFeature has no num_buckets: an unknown field, by line
    buckets = FEATURES.replace("hash_bucket_size: 1000000", "num_buckets: 10")
    with pytest.raises(
        TzrecImportError, match=r"line 56: feature_configs\[4\].combo_feature.num_buckets: unsupported field"
    ):
        _import(buckets)


def test_a_vector_default_of_another_count_is_refused() -> None:
    text = FEATURES.replace('default_value: "0.1|0.4"', 'default_value: "0.1|0.4|0.5"')
    with pytest.raises(
        TzrecImportError, match=r"default_value '0.1\|0.4\|0.5' holds 3 numbers; value_dim is 2"
    ):
        _import(text)


def test_the_written_yaml_reads_back_to_the_same_config(tmp_path) -> None:
    imported = _import()
    (tmp_path / "c.yaml").write_text(imported.to_yaml())
    assert load_config(tmp_path / "c.yaml") == imported.config
