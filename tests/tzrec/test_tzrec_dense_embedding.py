"""TorchEasyRec's ``autodis {}`` and ``mlp {}`` of a raw feature (docs/source/feature/autodis.md, feature.md
RawFeature), written as its tzrec/tests/configs use them (multi_tower_din_fg_mock.config: ``autodis {
num_channels: 3 }`` with embedding_dim 16; ``mlp {}``) → recpipe's raw ``autodis`` / ``mlp``."""

from __future__ import annotations

import pytest
from tzrec_fixtures import HEAD

from recpipe.features.build import build_feature_spec
from recpipe.models.registry import build_model
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError


def _config(features: str) -> str:
    return (
        HEAD
        + features
        + """\
model_config {
    feature_groups { group_name: "all" feature_names: ["raw_1", "raw_2", "id_1"] group_type: DEEP }
    multi_tower { towers { input: "all" mlp { hidden_units: [8] } } final { hidden_units: [4] } }
}
"""
    )


ID = 'feature_configs { id_feature { feature_name: "id_1" expression: "item:id_1" num_buckets: 10 embedding_dim: 4 } }\n'
FEATURES = (
    ID
    + """\
feature_configs {
    raw_feature {
        feature_name: "raw_1"
        expression: "item:raw_1"
        embedding_dim: 16
        autodis { num_channels: 3 temperature: 0.1 keep_prob: 0.8 }
    }
}
feature_configs { raw_feature { feature_name: "raw_2" expression: "item:raw_2" embedding_dim: 8 mlp {} } }
"""
)


def test_autodis_and_mlp_map_and_build() -> None:
    imported = import_tzrec(_config(FEATURES))
    raw = {f["name"]: f for f in imported.data["features"]}
    assert raw["raw_1"] == {
        "kind": "raw",
        "name": "raw_1",
        "embedding_dim": 16,
        "autodis": {"num_channels": 3, "temperature": 0.1, "keep_prob": 0.8},
    }
    assert raw["raw_2"] == {"kind": "raw", "name": "raw_2", "embedding_dim": 8, "mlp": {}}
    assert not [n for n in imported.notes if "embedding_dim" in n.path]
    spec = build_feature_spec(imported.config)
    model = build_model(spec, imported.config.model)
    assert set(model.dense.embed.embeddings) == {"raw_1", "raw_2"}
    assert model.dense.embed.embeddings["raw_1"].meta_emb.shape == (3, 16)


@pytest.mark.parametrize(
    ("block", "path", "message"),
    [
        ("autodis { num_channels: 3 }", "feature_configs[1].raw_feature", "has autodis but no embedding_dim"),
        (
            "embedding_dim: 8 boundaries: [0.1, 0.2] mlp {}",
            "feature_configs[1].raw_feature.mlp",
            "autodis / mlp embed a dense value",
        ),
    ],
)
def test_what_recpipe_cannot_honour_is_reported(block: str, path: str, message: str) -> None:
    text = _config(
        ID
        + f'feature_configs {{ raw_feature {{ feature_name: "raw_1" expression: "item:raw_1" {block} }} }}\n'
        + 'feature_configs { raw_feature { feature_name: "raw_2" expression: "item:raw_2" } }\n'
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == path and message in problem.message and problem.line == 15


VALUE_FEATURES = (
    ID
    + """\
feature_configs {
    lookup_feature {
        feature_name: "raw_1"
        map: "user:map_1"
        key: "item:id_1"
        embedding_dim: 8
        mlp {
        }
    }
}
feature_configs {
    expr_feature {
        feature_name: "raw_2"
        expression: "a+b"
        variables: ["item:a", "item:b"]
        embedding_dim: 16
        autodis { num_channels: 3 }
    }
}
"""
)


def test_a_value_features_autodis_and_mlp_map_and_build() -> None:
    """multi_tower_din_fg_rtp_mock.config's ``lookup_feature { ... embedding_dim: 8 mlp {} }``: feature.proto's
    dense_emb of every value feature, mapped as a raw feature's."""
    imported = import_tzrec(_config(VALUE_FEATURES))
    got = {f["name"]: f for f in imported.data["features"]}
    assert (got["raw_1"]["kind"], got["raw_1"]["mlp"], got["raw_1"]["embedding_dim"]) == ("lookup", {}, 8)
    assert (got["raw_2"]["autodis"], got["raw_2"]["embedding_dim"]) == ({"num_channels": 3}, 16)
    assert not [n for n in imported.notes if "embedding_dim" in n.path]
    spec = build_feature_spec(imported.config)
    assert {d.name: d.embedding["type"] for d in spec.dense} == {"raw_1": "mlp", "raw_2": "autodis"}
    model = build_model(spec, imported.config.model)
    assert model.dense.embed.embeddings["raw_2"].meta_emb.shape == (3, 16)


def test_a_value_features_embedding_of_ids_is_refused() -> None:
    text = _config(
        ID
        + 'feature_configs { lookup_feature { feature_name: "raw_1" map: "user:map_1" key: "item:id_1"\n'
        + "    embedding_dim: 8 boundaries: [0.5, 1.5] mlp {} } }\n"
        + 'feature_configs { raw_feature { feature_name: "raw_2" expression: "item:raw_2" } }\n'
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == "feature_configs[1].lookup_feature.mlp" and "an id output" in problem.message
