"""Constructs of TorchEasyRec's own test and benchmark configs the importer maps (or refuses precisely), each
in a snippet written here: a pre-encoded (FG_NONE) raw vector, lookup features embedded by ``mlp``/``autodis``,
zch's ``lfu`` / ``lru`` eviction, ``dynamicemb``, RTP's ``<sequence>_<feature>`` names in feature groups, and
the training options (Adagrad's initial accumulator, gradient clipping, accumulation, task-space weights)."""

from __future__ import annotations

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


def test_dynamicemb_is_refused_once_at_its_line_saying_why() -> None:
    text = small_din().replace(
        'expression: "user:user_id" num_buckets: 100 embedding_dim: 8',
        'expression: "user:user_id" embedding_dim: 8 dynamicemb { }',
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    [problem] = err.value.problems
    assert (problem.line, problem.path) == (14, "feature_configs[0].id_feature.dynamicemb")
    assert "dynamicemb (dynamic embeddings" in problem.message and "fixed number of rows" in problem.message


def test_an_fg_dag_feature_input_is_refused_saying_what_it_means() -> None:
    lookup = """\
feature_configs {
    raw_feature { feature_name: "age_binning" expression: "user:age" boundaries: [18, 25] embedding_dim: 4 }
}
feature_configs {
    lookup_feature { feature_name: "lk" map: "item:age_map" key: "feature:age_binning" }
}
"""
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(HEAD + lookup + _model("age_binning", "lk"))
    [problem] = err.value.problems
    assert (problem.line, problem.path) == (18, "feature_configs[1].lookup_feature.key")
    assert "'feature:age_binning' is the output of feature 'age_binning''s own FG" in problem.message
    assert "no order between features" in problem.message and "bucket id" in problem.message
