"""TorchEasyRec's lookup_feature, match_feature, expr_feature and overlap_feature blocks → recpipe kinds lookup,
match, expr and overlap, written as TorchEasyRec's tzrec/tests/configs use them (multi_tower_din_fg_mock.config:
lookup by item:id_2 with no mapping, with hash_bucket_size / num_buckets / vocab_list; match by two item
keys; an expression over two item columns) plus the doc's own examples; what recpipe cannot honour is
reported at its line."""

from __future__ import annotations

import pytest
from tzrec_fixtures import HEAD

from recpipe.features.build import build_feature_spec
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError

FEATURES = """\
feature_configs { id_feature { feature_name: "id_2" expression: "item:id_2" hash_bucket_size: 100 embedding_dim: 8 } }
feature_configs { lookup_feature { feature_name: "lookup_1" map: "user:map_1" key: "item:id_2" } }
feature_configs {
    lookup_feature { feature_name: "lookup_2" map: "user:map_2" key: "item:id_2" hash_bucket_size: 10000 embedding_dim: 8 }
}
feature_configs {
    lookup_feature { feature_name: "lookup_3" map: "user:map_3" key: "item:id_2" num_buckets: 1000 embedding_dim: 8 }
}
feature_configs {
    lookup_feature { feature_name: "lookup_4" map: "user:map_4" key: "item:id_2" vocab_list: ["e", "f", "g"] embedding_dim: 16 }
}
feature_configs {
    lookup_feature {
        feature_name: "user_cate_cnt"
        map: "user:kv_cate_cnt"
        key: "item:cate"
        embedding_dim: 16
        boundaries: [0, 1, 2, 3, 4]
        combiner: "mean"
    }
}
feature_configs { match_feature { feature_name: "match_1" nested_map: "user:nested_map_1" pkey: "item:id_2" skey: "item:id_3" } }
feature_configs {
    match_feature {
        feature_name: "match_2"
        nested_map: "user:nested_map_2"
        pkey: "ALL"
        skey: "item:id_3"
        hash_bucket_size: 100000
        embedding_dim: 16
        show_skey: true
    }
}
feature_configs { expr_feature { feature_name: "expr_1" expression: "raw_1 + raw_2" variables: ["item:raw_1", "item:raw_2"] } }
feature_configs {
    expr_feature {
        feature_name: "combo_age_cate"
        variables: ["user:u_age", "item:i_age"]
        expression: "u_age == i_age ? 1 : 0"
        embedding_dim: 8
        boundaries: [0.5]
    }
}
feature_configs {
    overlap_feature {
        feature_name: "title_ratio"
        query: "user:query"
        title: "item:title"
        method: "title_common_ratio"
        embedding_dim: 8
        boundaries: [0.2, 0.5, 0.8]
    }
}
"""
DENSE = ["lookup_1", "match_1", "expr_1"]
SPARSE = [
    "id_2",
    "lookup_2",
    "lookup_3",
    "lookup_4",
    "user_cate_cnt",
    "match_2",
    "combo_age_cate",
    "title_ratio",
]


def _config(features: str = FEATURES, sparse: list[str] = SPARSE, dense: list[str] = DENSE) -> str:
    names = ", ".join(f'"{n}"' for n in sparse + dense)
    return (
        HEAD
        + features
        + f"""\
model_config {{
    feature_groups {{ group_name: "all" feature_names: [{names}] group_type: DEEP }}
    multi_tower {{ towers {{ input: "all" mlp {{ hidden_units: [16] }} }} final {{ hidden_units: [8] }} }}
    metrics {{ auc {{}} }}
    losses {{ binary_cross_entropy {{}} }}
}}
"""
    )


def test_each_block_maps_to_its_kind() -> None:
    cfg = import_tzrec(_config()).config
    by_name = {f.name: f for f in cfg.features}
    lk = by_name["lookup_1"]
    assert (lk.kind, lk.map, lk.key, lk.combiner, lk.sparse_output) == (
        "lookup",
        "map_1",
        "id_2",
        "sum",
        False,
    )
    assert by_name["lookup_2"].hash_bucket_size == 10000 and by_name["lookup_3"].num_buckets == 1000
    assert by_name["lookup_4"].vocab_list == ["e", "f", "g"]
    assert (
        by_name["user_cate_cnt"].boundaries == [0, 1, 2, 3, 4] and by_name["user_cate_cnt"].combiner == "mean"
    )
    m = by_name["match_2"]
    assert (m.kind, m.nested_map, m.pkey, m.skey, m.show_skey) == (
        "match",
        "nested_map_2",
        "ALL",
        "id_3",
        True,
    )
    assert by_name["match_1"].pkey == "id_2"
    ex = by_name["combo_age_cate"]
    assert (ex.kind, ex.variables, ex.boundaries) == ("expr", ["u_age", "i_age"], [0.5])
    ov = by_name["title_ratio"]
    assert (ov.kind, ov.query, ov.title, ov.method) == ("overlap", "query", "title", "title_common_ratio")
    spec = build_feature_spec(cfg)
    assert spec.dense_names() == DENSE
    assert spec.feature("lookup_2").table == "lookup_2" and spec.feature("lookup_2").embedding_dim == 8
    assert spec.feature("user_cate_cnt").mapping.size == 6
    assert {c for c in spec.input_columns()} >= {
        "map_1",
        "id_2",
        "nested_map_2",
        "id_3",
        "raw_1",
        "u_age",
        "title",
    }


def test_shared_embedding_names_share_a_table() -> None:
    text = _config().replace(
        'feature_name: "lookup_3" map: "user:map_3" key: "item:id_2" num_buckets: 1000 embedding_dim: 8',
        'feature_name: "lookup_3" map: "user:map_3" key: "item:id_2" hash_bucket_size: 10000 embedding_dim: 8 '
        'embedding_name: "lookup_2_emb"',
    )
    spec = build_feature_spec(import_tzrec(text).config)
    assert spec.feature("lookup_3").table == "lookup_2"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            'lookup_feature { feature_name: "x" map: "feature:m" key: "item:k" }',
            "input 'feature:m' names no feature 'm'",
        ),
        (
            'lookup_feature { feature_name: "x" map: "user:m" key: "item:k" value_dim: 2 }',
            "value_dim 2: a looked-up vector is not supported",
        ),
        (
            'lookup_feature { feature_name: "x" map: "user:m" key: "item:k" value_separator: "," }',
            "value_separator",
        ),
        (
            'match_feature { feature_name: "x" nested_map: "user:m" pkey: "item:a" skey: "item:b" normalizer: "method=zscore,mean=0,standard_deviation=1" }',
            "normalizer 'method=zscore,mean=0,standard_deviation=1' is not supported",
        ),
        (
            'lookup_feature { feature_name: "x" map: "user:m" key: "item:k" boundaries: [1] }',
            "has ids \\(boundaries or a mapping\\) but no embedding_dim",
        ),
    ],
)
def test_what_recpipe_cannot_honour_is_reported(block: str, message: str) -> None:
    text = _config(f"feature_configs {{ {block} }}\n", sparse=[], dense=["x"])
    with pytest.raises(TzrecImportError, match=message):
        import_tzrec(text)


def test_an_expression_recpipe_refuses_is_a_config_error() -> None:
    text = _config(
        'feature_configs { expr_feature { feature_name: "x" expression: "rnd() + a" variables: ["item:a"] } }\n',
        sparse=[],
        dense=["x"],
    )
    with pytest.raises(Exception, match="rnd\\(\\) is a random number"):
        import_tzrec(text)
