"""Feature outputs as inputs (``"feature:X"``, TorchEasyRec's FG_DAG side ``feature``): a lookup keyed by a
bucketized raw feature's bucket id or by a dense raw feature's value, values written out by hand; what a request needs (X's source column
only); fg.json; fitting; and every X or reader refused, saying why."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from map_kinds import config, fg, ids, spec_of

from recpipe.config import ConfigError
from recpipe.data.sources import open_source
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.fit import fit_feature_spec
from recpipe.features.raw import column_kinds
from recpipe.features.schema_check import required_columns
from recpipe.features.spec import FeatureSpec, FeatureSpecError

# TorchEasyRec's multi_tower_din_zch_fg_mock.config: raw_6_id buckets item:raw_6; lookup_5 is keyed by its bucket.
RAW = {
    "kind": "raw",
    "name": "raw_6_id",
    "column": "raw_6",
    "boundaries": [0.1, 0.2, 0.3, 0.4],
    "embedding_dim": 4,
}
LOOKUP = {
    "kind": "lookup",
    "name": "lookup_5",
    "map": "map_5",
    "key": "feature:raw_6_id",
    "vocab_list": ["e", "f", "g"],
    "embedding_dim": 4,
}
# raw_6 → bucket: 0.05 → 0, 0.25 → 2, 0.45 → 4, null → default 0.0 → 0, 0.3 → 3 (a boundary: the bucket above).
ROWS = {
    "raw_6": [0.05, 0.25, 0.45, None, 0.3, 0.15],
    "map_5": ["0:e\x1d2:f", "2:g\x1d4:e", "4:f", "0:g\x1d1:e", "3:e\x1d0:f", "0:e"],
}
# The value at the row's bucket, by the vocabulary (e 1, f 2, g 3; 0 unknown); row 5's bucket 1 is not in its
# map: no id (default_value None).
WANT = [[1], [3], [2], [3], [1], []]


def test_a_lookup_keyed_by_a_bucket_id_reads_the_value_at_that_bucket() -> None:
    spec = spec_of(RAW, {**LOOKUP, "default_value": None})
    assert ids(spec, ROWS, key=0) == [[0], [2], [4], [0], [3], [1]]  # raw_6_id itself
    assert ids(spec, ROWS, key=1) == WANT


def test_a_null_takes_the_default_bucket_and_a_dense_lookup_sums_there() -> None:
    raw = {**RAW, "default": 0.35}  # null → 0.35 → bucket 3
    lookup = {"kind": "lookup", "name": "clicks", "map": "m", "key": "feature:raw_6_id"}
    rows = {"raw_6": [None, 0.25, 0.05], "m": ["3:2\x1d0:7", "2:1.5\x1d2:4", "1:9"]}
    out = fg(spec_of(raw, lookup), rows)
    assert out.values[0].tolist() == [3, 2, 0]
    # A key found twice takes its first value (1.5); bucket 0 is not in row 2's map: default_value 0.
    assert out.dense[:, 0].tolist() == [2.0, 1.5, 0.0]


def test_a_request_carries_the_source_column_only_and_fg_json_keeps_the_dependency(tmp_path: Path) -> None:
    spec = spec_of(RAW, {**LOOKUP, "default_value": None})
    assert spec.input_columns() == ["raw_6", "map_5", "label"]
    assert set(column_kinds(spec, with_labels=False)) == {"raw_6", "map_5"}  # the serving signature
    assert set(required_columns(spec, with_labels=False)) == {"raw_6", "map_5"}
    assert spec.feature("lookup_5").inputs == ["feature:raw_6_id"]
    served = FeatureSpec.load(spec.save(tmp_path / "fg.json"))
    assert ids(served, ROWS, key=1) == WANT
    # A column of that name in the rows is not read: FG derives it.
    rows = {**ROWS, "feature:raw_6_id": [4, 4, 4, 4, 4, 4]}
    assert ids(served, rows, key=1) == WANT
    # A request without raw_6 at all: every row's raw_6 is missing, so bucket 0.
    request = pa.table({"map_5": ROWS["map_5"]})
    out = FeatureGenerator(served, with_labels=False)(request)
    assert out.values[1].tolist() == [1, 3, 2, 1]  # rows 0..5 at bucket 0: e, -, -, g, f, e
    assert out.lengths[1].tolist() == [1, 0, 0, 1, 1, 1]


def test_a_bad_raw_value_is_a_bad_row_of_its_column_once() -> None:
    spec = spec_of(RAW, LOOKUP)
    rows = {"raw_6": ["0.05", "abc"], "map_5": ["0:e", "0:e"]}
    with pytest.raises(BadRowError) as err:
        fg(spec, rows)
    assert (err.value.row, err.value.column) == (1, "raw_6")
    out = FeatureGenerator(spec, on_bad_row="skip", with_labels=False)
    assert out(pa.table(rows)).values[1].tolist() == [1]
    assert out.stats.skipped_by_column == {"raw_6": 1}


def test_fitting_a_vocabulary_of_a_feature_output(tmp_path: Path) -> None:
    # An id feature of raw_6_id's bucket ids with a fitted vocabulary (min_freq 2): buckets 0 and 2 are seen twice.
    bucket_ids = {"kind": "id", "name": "b", "column": "feature:raw_6_id", "min_freq": 2, "embedding_dim": 4}
    cfg = config(RAW, bucket_ids)
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"raw_6": [0.05, 0.25, 0.45, None, 0.22], "label": [0, 1, 0, 1, 0]}), path)
    spec = fit_feature_spec(cfg, open_source(str(path)))
    assert spec.feature("b").mapping.vocab == ["0", "2"]
    assert ids(spec, {"raw_6": [0.25, 0.45, 0.0]}, key=1) == [[2], [0], [1]]  # "2", unknown, "0"


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ([{**LOOKUP, "key": "feature:raw_7"}], "input 'feature:raw_7' names no feature 'raw_7'"),
        (
            [{"kind": "id", "name": "raw_6_id", "num_buckets": 5}, LOOKUP],
            "feature 'raw_6_id' is of kind 'id': recpipe reads 'feature:X' of a raw feature only",
        ),
        ([{**RAW, "boundaries": None, "value_dim": 2}, LOOKUP], "has value_dim 2 values a row; 'feature:X'"),
        (
            [{**RAW, "boundaries": None, "normalizer": "log(x+1)"}, LOOKUP],
            "feature 'raw_6_id' normalizes its value \\('log\\(x\\+1\\)'\\)",
        ),
        (
            [{**RAW, "boundaries": None, "num_quantile_buckets": 4}, LOOKUP],
            "fits its boundaries \\(num_quantile_buckets\\); list them",
        ),
        ([{**RAW, "value_dim": 2}, LOOKUP], "has value_dim 2 bucket ids a row"),
        (  # a chain, and so any cycle: X reads a feature output itself
            [RAW, {**RAW, "name": "twice", "column": "feature:raw_6_id"}, {**LOOKUP, "key": "feature:twice"}],
            "feature 'twice' reads 'feature:raw_6_id' itself: a chain \\(or cycle\\)",
        ),
        ([{**RAW, "column": "feature:raw_6_id"}, LOOKUP], "a chain \\(or cycle\\)"),  # X reads itself
    ],
)
def test_the_config_refuses_every_other_feature_output(features: list[dict], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(*features)


def test_a_reader_taking_a_bucket_id_as_a_history_or_text_is_refused() -> None:
    as_map = {"kind": "lookup", "name": "lk", "map": "feature:raw_6_id", "key": "k"}
    with pytest.raises(
        FeatureSpecError, match="feature 'lk': input 'feature:raw_6_id' is a bucket id, which"
    ):
        FeatureGenerator(spec_of(RAW, as_map))


def test_an_fg_json_whose_feature_output_is_not_a_bucket_id_is_refused() -> None:
    d = spec_of(RAW, LOOKUP).to_dict()
    d["sparse"][0]["kind"] = "id"  # hand-edited: raw_6_id is no raw feature any more
    with pytest.raises(
        FeatureSpecError,
        match="feature 'lookup_5': input 'feature:raw_6_id': feature 'raw_6_id' is of kind 'id'",
    ):
        FeatureGenerator(FeatureSpec.from_dict(d))
    d = spec_of(DENSE, DENSE_LOOKUP).to_dict()
    d["dense"][0]["log_offset"] = 1.0  # hand-edited: raw_7 now normalizes its value
    with pytest.raises(FeatureSpecError, match="feature 'raw_7' normalizes its value"):
        FeatureGenerator(FeatureSpec.from_dict(d))


# TorchEasyRec's multi_tower_din_fg_mock.config: lookup_7 is keyed by the dense raw feature raw_7 (autodis, no
# boundaries): its value as FG computes it (no normalizer: x, or its default where missing), a float32 whose key
# text is the shortest that reads back as it.
DENSE = {"kind": "raw", "name": "raw_7", "default": 0.5, "autodis": {"num_channels": 3}, "embedding_dim": 4}
DENSE_LOOKUP = {**LOOKUP, "name": "lookup_7", "key": "feature:raw_7", "default_value": None}
# raw_7 0.25 → "0.25"; null → default 0.5 → "0.5"; 2.0 → "2" (not "2.0"); 0.1 → float32 "0.1"; 1.5 → "1.5",
# which a map key "1.50" is not; "3" (a text number) → 3.0 → "3".
DENSE_ROWS = {
    "raw_7": ["0.25", None, "2.0", "0.1", "1.5", "3"],
    "map_5": ["0.25:e\x1d2:f", "0.5:g\x1d0:e", "2.0:e\x1d2:f", "0.1:g", "1.50:g", "3:e\x1d3.0:f"],
}
DENSE_WANT = [[1], [3], [2], [3], [], [1]]  # e 1, f 2, g 3


def test_a_lookup_keyed_by_a_dense_raw_feature_reads_the_value_at_its_text(tmp_path: Path) -> None:
    spec = spec_of(DENSE, DENSE_LOOKUP)
    assert ids(spec, DENSE_ROWS, key=0) == DENSE_WANT
    assert spec.input_columns() == ["map_5", "raw_7", "label"]
    assert set(required_columns(spec, with_labels=False)) == {"raw_7", "map_5"}  # the serving signature
    served = FeatureSpec.load(spec.save(tmp_path / "fg.json"))
    assert ids(served, {**DENSE_ROWS, "feature:raw_7": [9.0] * 6}, key=0) == DENSE_WANT  # derived, not read
    # raw_7 itself is still the dense column it was (the lookup's key is no second copy of it).
    assert fg(spec, DENSE_ROWS).dense[:, 0].tolist() == pytest.approx([0.25, 0.5, 2.0, 0.1, 1.5, 3.0])


def test_a_float32_value_keys_by_its_float32_text_and_a_dense_lookup_reads_it_too() -> None:
    # 0.123456789 is float32 0.12345679: the key "0.123456789" (its float64 text) is not it.
    rows = {"raw_7": [0.123456789, 0.123456789], "m": ["0.12345679:2", "0.123456789:5"]}
    lookup = {"kind": "lookup", "name": "v", "map": "m", "key": "feature:raw_7"}
    out = fg(spec_of(DENSE, lookup), rows)
    assert out.dense[:, 1].tolist() == [2.0, 0.0]
