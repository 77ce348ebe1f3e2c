"""A feature kind added the way the catalogue documents for a package outside recpipe: one module
(tests/features/toy_kind.py: its config class and its FeatureKind) and one entry-point line. It validates,
builds its FeatureSpec entry, is recorded in fg.json, and runs in FG under the raw-value contract."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from recpipe.config import ConfigError, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec

LINE = "text_length = tests.features.toy_kind"


def _config() -> dict:
    return {
        "name": "toy_kind",
        "data": {"label": "label"},
        "features": [
            {"kind": "id", "name": "user", "hash_bucket_size": 100},
            {"kind": "text_length", "name": "title_len", "column": "title", "max_length": 5},
            {"kind": "raw", "name": "price"},
        ],
        "feature_groups": [{"name": "all", "type": "deep", "features": ["user", "title_len", "price"]}],
        "model": {
            "type": "dlrm",
            "dense_mlp": {"hidden_units": [8, 16]},
            "over_mlp": {"hidden_units": [8]},
            "sparse_group": "all",
        },
    }


def test_an_undeclared_kind_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(
        ConfigError,
        match=r"features\.1: Value error, unknown feature kind 'text_length'; known: \[[^\]]*'id'",
    ):
        parse_config(_config())


def test_a_declared_kind_builds_its_entry_and_fg_json_records_it(
    declare_entry_point: Callable[[str, str], None], tmp_path
) -> None:
    declare_entry_point("recpipe.feature_kinds", LINE)
    cfg = parse_config(_config())
    assert type(cfg.features[1]).__module__ == "tests.features.toy_kind"
    with pytest.raises(
        ConfigError, match=r"features\.1\.max_length: Input should be greater than or equal to 1"
    ):
        parse_config(
            {
                **_config(),
                "features": [*_config()["features"][:1], {**_config()["features"][1], "max_length": 0}],
            }
        )
    spec = build_feature_spec(cfg)
    assert spec.feature("title_len").kind == "text_length" and spec.feature("user").kind == "id"
    assert [d.kind for d in spec.dense] == ["raw"]
    saved = spec.to_dict()
    # Built-in kinds are implied (fg.json of those reads as before); the toy's is written.
    assert "kind" not in saved["sparse"][0] and saved["sparse"][1]["kind"] == "text_length"
    assert FeatureSpec.load(spec.save(tmp_path / "fg.json")) == spec


def test_the_kind_runs_in_fg_with_the_raw_value_contract(
    declare_entry_point: Callable[[str, str], None],
) -> None:
    declare_entry_point("recpipe.feature_kinds", LINE)
    spec = build_feature_spec(parse_config(_config()))
    titles = ["abc", None, "", "a long title", "ü"]
    batch = pa.record_batch(
        {
            "user": ["u1", "u2", "u3", "u4", "u5"],
            "title": titles,
            "price": [1.0, 2.0, 3.0, 4.0, 5.0],
            "label": [0, 1, 0, 1, 0],
        }
    )
    out = FeatureGenerator(spec)(batch)
    j = spec.sparse_keys().index("title_len")
    # A null and an empty text mean one thing (no value: no id); lengths in characters, capped at max_length.
    assert out.lengths[j].tolist() == [1, 0, 0, 1, 1]
    assert out.values[j].tolist() == [3, 5, 1]
    # At serving, a request that leaves the column out has no id in any row.
    serve = FeatureGenerator(spec, with_labels=False)(batch.drop_columns(["title", "label"]))
    assert serve.lengths[j].tolist() == [0] * 5 and serve.values[j].size == 0
    np.testing.assert_array_equal(serve.values[0], out.values[0])
