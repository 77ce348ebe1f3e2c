"""TorchEasyRec's kv_dot_product and bool_mask_feature blocks → recpipe kinds kv_dot_product and bool_mask,
written as feature.md documents them; what recpipe cannot honour is reported at its line."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tzrec_fixtures import HEAD

from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError

FEATURES = """\
feature_configs {
    kv_dot_product {
        feature_name: "query_doc_sim"
        query: "user:query"
        document: "item:title"
        separator: "|"
        default_value: "0"
    }
}
feature_configs {
    kv_dot_product {
        feature_name: "sim_bucket"
        query: "user:query"
        document: "item:title"
        separator: "|"
        boundaries: [0.1, 0.5]
        embedding_dim: 8
    }
}
feature_configs {
    bool_mask_feature {
        feature_name: "valid_clicks"
        expression: ["user:click_items", "item:is_valid"]
        separator: ","
        num_buckets: 1000
        embedding_dim: 8
    }
}
"""


def _config(features: str = FEATURES) -> str:
    return (
        HEAD
        + features
        + """\
model_config {
    feature_groups {
        group_name: "all"
        feature_names: ["query_doc_sim", "sim_bucket", "valid_clicks"]
        group_type: DEEP
    }
    multi_tower { towers { input: "all" mlp { hidden_units: [16] } } final { hidden_units: [8] } }
}
"""
    )


def test_each_block_maps_to_its_kind() -> None:
    imported = import_tzrec(_config())
    features = {f["name"]: f for f in imported.data["features"]}
    assert features["query_doc_sim"] == {
        "kind": "kv_dot_product",
        "name": "query_doc_sim",
        "query": "query",
        "document": "title",
        "separator": "|",
        "default_value": "0",
    }
    assert features["sim_bucket"]["boundaries"] == [0.1, 0.5]
    assert features["valid_clicks"] == {
        "kind": "bool_mask",
        "name": "valid_clicks",
        "column": "click_items",
        "mask": "is_valid",
        "num_buckets": 1000,
        "embedding_dim": 8,
        "separator": ",",
    }
    # The imported config runs: the doc's examples through FG.
    spec = build_feature_spec(imported.config)
    rows = pa.table(
        {
            "query": ["a:0.5|b:0.5"],
            "title": ["d:0.5|b:0.5"],
            "click_items": ["123,456,90,80"],
            "is_valid": ["true,false,true,false"],
            "clk": [1],
        }
    )
    out = FeatureGenerator(spec)(rows)
    assert out.dense[:, 0].tolist() == [0.25]
    keys = spec.sparse_keys()
    assert out.values[keys.index("valid_clicks")].tolist() == [123, 90]
    assert out.values[keys.index("sim_bucket")].tolist() == [1]


@pytest.mark.parametrize(
    ("block", "path", "message"),
    [
        (
            'kv_dot_product { feature_name: "s" query: "user:q" document: "item:d" kv_delimiter: 1 }',
            "kv_dot_product.kv_delimiter",
            "kv_delimiter is a float field",
        ),
        (
            'kv_dot_product { feature_name: "s" query: "feature:q" document: "item:d" }',
            "kv_dot_product.query",
            "input 'feature:q' names no feature 'q'",
        ),
        (
            'bool_mask_feature { feature_name: "s" expression: ["user:a"] num_buckets: 10 embedding_dim: 4 }',
            "bool_mask_feature.expression",
            "needs [values, mask] inputs",
        ),
        (
            'bool_mask_feature { feature_name: "s" expression: ["user:a", "item:m"] embedding_dim: 4 }',
            "bool_mask_feature",
            "needs exactly one of hash_bucket_size",
        ),
        (
            'bool_mask_feature { feature_name: "s" expression: ["user:a", "item:m"] num_buckets: 9 '
            "embedding_dim: 4 value_dim: 1 }",
            "bool_mask_feature.value_dim",
            "value_dim 1 (a fixed number of values per row) is not supported",
        ),
    ],
)
def test_what_recpipe_cannot_honour_is_reported(block: str, path: str, message: str) -> None:
    text = _config(FEATURES + f"feature_configs {{ {block} }}\n")
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == f"feature_configs[3].{path}" and message in problem.message
    assert problem.line == text.splitlines().index(f"feature_configs {{ {block} }}") + 1
