"""Kind ``raw`` with ``value_dim`` > 1: TorchEasyRec's embedding-feature examples (a vector in one column,
``separator``, list columns, a vector default), value_dim dense columns that a group gets together, each value
bucketized with ``boundaries``, bad rows, the raw-value contract and the fg.json round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kind_rows import config, every_representation, fg, key, same, spec_of

from recpipe.config import ConfigError
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.schema_check import schema_problems
from recpipe.features.spec import FeatureSpec

VEC = {"kind": "raw", "name": "raw_feat", "column": "raw_input", "value_dim": 2, "default": [0.1, 0.4]}
BUCKETS = {**VEC, "name": "raw_bucket", "boundaries": [0.05, 0.15, 0.25], "embedding_dim": 16}


# tzrec/features/raw_feature_test.py, test_raw_feature_dense and test_raw_feature_with_boundaries (value_dim 2,
# default_value "0.1\x1d0.4"), on its rows: text joined by \x1d and list columns.
@pytest.mark.parametrize(
    "column",
    [
        ["0.2\x1d0.5", "", "0.3\x1d0.6"],
        pa.array([["0.2", "0.5"], None, ["0.3", "0.6"]]),
        pa.array([[0.2, 0.5], [], [0.3, 0.6]]),
    ],
)
def test_torcheasyrec_vector_examples(column) -> None:
    spec = spec_of([VEC, BUCKETS])
    assert spec.dense_names() == ["raw_feat__0", "raw_feat__1"]
    out = fg(spec, {"raw_input": column})
    np.testing.assert_allclose(out.dense, [[0.2, 0.5], [0.1, 0.4], [0.3, 0.6]], rtol=1e-6)
    assert key(out, spec, "raw_bucket") == ([2, 3, 1, 3, 3, 3], [2, 2, 2])
    assert spec.feature("raw_bucket").mapping.size == 4  # TorchEasyRec's num_embeddings: len(boundaries) + 1


def test_a_group_listing_the_feature_gets_all_its_columns() -> None:
    cfg = config(
        [{"kind": "id", "name": "u", "hash_bucket_size": 10}, {**VEC, "value_dim": 3, "default": 0.0}]
    )
    spec = build_feature_spec(cfg)
    assert [(g.sparse, g.dense) for g in spec.groups] == [
        (["u"], ["raw_feat__0", "raw_feat__1", "raw_feat__2"])
    ]
    assert spec.dense_dim == 3


def test_another_separator_and_log() -> None:
    spec = spec_of(
        [{"kind": "raw", "name": "pic_emb", "separator": "|", "value_dim": 4, "normalizer": "log(x+1)"}]
    )
    out = fg(spec, {"pic_emb": ["0.1|0.2|0.3|0.4", None]})
    np.testing.assert_allclose(out.dense, np.log1p([[0.1, 0.2, 0.3, 0.4], [0, 0, 0, 0]]), rtol=1e-6)


@pytest.mark.parametrize(
    ("value", "got"),
    [
        ("0.1\x1d0.2\x1d0.3", "0.1\x1d0.2\x1d0.3"),
        ("0.1", "0.1"),
        ("0.1\x1dabc", "0.1\x1dabc"),
        ("0.1\x1d", "0.1\x1d"),
        ("inf\x1d1", "inf\x1d1"),
    ],
)
def test_a_wrong_count_or_a_bad_value_is_a_bad_row(value, got) -> None:
    spec = spec_of([VEC])
    rows = pa.table({"raw_input": ["1\x1d2", value], "label": [0, 1]})
    with pytest.raises(
        BadRowError, match=r"row 1, column 'raw_input': expected 2 numbers separated by '\\x1d'"
    ) as err:
        FeatureGenerator(spec)(rows)
    assert err.value.got == got
    skip = FeatureGenerator(spec, on_bad_row="skip")
    assert skip(rows).dense.tolist() == [[1.0, 2.0]] and skip.stats.skipped_by_column == {"raw_input": 1}


def test_a_list_with_a_missing_element_is_a_bad_row() -> None:
    spec = spec_of([VEC])
    with pytest.raises(BadRowError, match=r"row 0, column 'raw_input'"):
        FeatureGenerator(spec)(pa.table({"raw_input": pa.array([[0.1, None]]), "label": [0]}))


def test_config_refusals() -> None:
    with pytest.raises(ConfigError, match="default lists 3 values; value_dim is 2"):
        config([{**VEC, "default": [1, 2, 3]}])
    with pytest.raises(ConfigError, match="num_quantile_buckets with value_dim > 1 is not supported yet"):
        config([{**VEC, "num_quantile_buckets": 4}])
    with pytest.raises(ConfigError, match="zscore with value_dim > 1 is not supported yet"):
        config([{**VEC, "normalizer": "zscore"}])
    with pytest.raises(ConfigError, match="default -2 is outside the domain of log"):
        config([{**VEC, "default": [0, -2], "normalizer": "log(x+1)"}])


def test_fg_json_round_trip(tmp_path: Path) -> None:
    spec = spec_of([{**VEC, "separator": "|"}, {**BUCKETS, "separator": "|"}, {"kind": "raw", "name": "x"}])
    saved = json.loads(spec.save(tmp_path / "fg.json").read_text())
    assert saved["dense"][1]["params"] == {"value_dim": 2, "separator": "|", "index": 1}
    assert "params" not in saved["dense"][2]  # a plain raw feature reads (and digests) as before
    assert saved["sparse"][0]["params"] == {"value_dim": 2, "separator": "|", "default": [0.1, 0.4]}
    loaded = FeatureSpec.load(tmp_path / "fg.json")
    assert loaded == spec
    rows = {"raw_input": ["1|2", None], "x": [1.0, 2.0]}
    same(fg(loaded, rows), fg(spec, rows), "the loaded fg.json")


def test_the_schema_check_reads_list_columns() -> None:
    spec = spec_of([VEC])
    assert schema_problems(spec, pa.schema([("raw_input", pa.list_(pa.float32()))]), with_labels=False) == []
    assert schema_problems(spec, pa.schema([("raw_input", pa.list_(pa.binary()))]), with_labels=False) != []


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config([VEC, BUCKETS])
    rows = [{"raw_input": "0.2\x1d0.5"}, {"raw_input": None}, {"raw_input": ""}, {"raw_input": "3\x1d-1"}]
    out = every_representation(cfg, rows, {"raw_input": pa.string()}, tmp_path)
    np.testing.assert_allclose(out.dense, [[0.2, 0.5], [0.1, 0.4], [0.1, 0.4], [3, -1]], rtol=1e-6)
    lists = [{"raw_input": [0.2, 0.5]}, {"raw_input": None}, {"raw_input": []}, {"raw_input": [3.0, -1.0]}]
    same(
        out,
        every_representation(cfg, lists, {"raw_input": pa.list_(pa.float64())}, tmp_path, csv=False),
        "lists",
    )
    # at serving, an absent column is all missing: every row takes the default
    serve = fg(build_feature_spec(cfg), {"other": [1, 2]})
    np.testing.assert_allclose(serve.dense, [[0.1, 0.4], [0.1, 0.4]], rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.floats(-5, 5, width=32), min_size=3, max_size=3)),
        min_size=1,
        max_size=20,
    )
)
def test_vectors_equal_a_per_row_reference(rows) -> None:
    spec = spec_of(
        [{**VEC, "value_dim": 3, "default": [1.0, 2.0, 3.0]}, {**BUCKETS, "value_dim": 3, "default": 0.0}]
    )
    text = [None if r is None else "\x1d".join(repr(v) for v in r) for r in rows]
    out = fg(spec, {"raw_input": text})
    want = np.array([[1.0, 2.0, 3.0] if r is None else r for r in rows])
    np.testing.assert_allclose(out.dense, want.astype(np.float32), rtol=1e-6)
    buckets = np.searchsorted([0.05, 0.15, 0.25], [v for r in rows for v in (r or [0.0] * 3)], side="right")
    assert key(out, spec, "raw_bucket") == (buckets.tolist(), [3] * len(rows))
