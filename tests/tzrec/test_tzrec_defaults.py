"""TorchEasyRec's defaults and placeholders as its example configs rely on them, each test naming the
TorchEasyRec rule it reproduces."""

import pyarrow as pa
import pytest
from tzrec_fixtures import small_din

from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.tzrec import TzrecImportError, import_tzrec

ODPS_HEAD = (
    'train_input_path: "odps://{PROJECT}/tables/taobao_multitask_sample_v1_train"\n'
    'eval_input_path: "odps://{PROJECT}/tables/taobao_multitask_sample_v1/ds={DS}"\n'
)


def _odps_din() -> str:
    body = small_din().split("\n", 2)[2]  # without the two input paths of HEAD
    return ODPS_HEAD + body.replace("ParquetDataset", "OdpsDataset")


def test_project_and_any_name_in_an_odps_path_are_kept_as_parameters():
    """TorchEasyRec's example paths hold {PROJECT}, filled with str.format at run time
    (tzrec/benchmark/benchmark.py: ``train_input_path.format(PROJECT=project)``)."""
    imported = import_tzrec(_odps_din())
    data = imported.config.data
    assert data.train == "odps://{PROJECT}/tables/taobao_multitask_sample_v1_train"
    assert data.eval.endswith("/ds={DS}") and data.params == {"PROJECT": None, "DS": None}
    assert "params: {PROJECT: null, DS: null}" in imported.to_yaml()


def test_a_placeholder_does_not_hide_a_malformed_path():
    with pytest.raises(TzrecImportError, match=r"line 1: train_input_path: bad ODPS URI"):
        import_tzrec(_odps_din().replace("/tables/taobao_multitask_sample_v1_train", "/views/x"))


def test_a_model_config_imports_without_input_paths():
    """The paths are required in TorchEasyRec's pipeline.proto, but only to run there: a recpipe run takes
    its data from the pipeline's data source."""
    imported = import_tzrec(small_din().split("\n", 2)[2])
    assert (imported.config.data.train, imported.config.data.eval, imported.config.data.params) == (
        None,
        None,
        {},
    )


def test_split_is_a_hashed_fraction_not_a_time_column():
    """TorchEasyRec reads train and eval from two inputs and names no time column."""
    split = import_tzrec(small_din()).config.data.split
    assert (split.time_column, split.eval_fraction) == (None, 0.1)


def test_an_empty_sub_value_of_a_history_is_id_zero():
    """TorchEasyRec resets an empty sequence default_value to "0" (tzrec/features/feature.py,
    ``Feature.default_value``: "not support empty default value now. reset to zero"): the Taobao history
    item ``782577\\x037511\\x03`` (no brand) is not a bad row."""
    # A second sub-feature, cate_id, after adgroup_id (the extra closes adgroup_id's block, opens cate_id's).
    cate = '} } features { id_feature { feature_name: "cate_id" expression: "item:cate_id" num_buckets: 20 embedding_dim: 8'
    cfg = import_tzrec(small_din(cate)).config
    assert [s.default_value for s in cfg.features[2].sub_features] == ["0", "0"]
    given = import_tzrec(small_din('default_value: "7"')).config
    assert given.features[2].sub_features[0].default_value == "7"  # a given one is kept
    spec = build_feature_spec(cfg)
    rows = pa.table(
        {
            "clk": [0, 1],
            "user_id": ["1", "2"],
            "adgroup_id": ["3", "4"],
            "click_50_seq": ["9\x035", "\x036|8\x03"],
        }
    )
    out = FeatureGenerator(spec, on_bad_row="error")(rows)
    values = dict(zip(spec.sparse_keys(), out.values))
    assert values["click_50_seq__adgroup_id"].tolist() == [9, 0, 8]
    assert values["click_50_seq__cate_id"].tolist() == [5, 6, 0]
