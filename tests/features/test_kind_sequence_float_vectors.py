"""Histories of ``value_dim`` floats per item, TorchEasyRec's raw_feature_test.py cases: a grouped sequence's
raw sub-feature without boundaries of ``value_dim`` 2 (``test_sequence_raw_feature_dense``) and a standalone
``sequence_raw_feature`` without boundaries (``test_simple_sequence_raw_feature_dense``, value_dim 1 and 2).
Each value is a KJT key of one float per item (``<key>__<i>``, float64 bits); TorchEasyRec's empty history is one
default item, recpipe's has none (docs/tzrec.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from recpipe.config import ConfigError, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.spec import FeatureSpec

MODEL = {
    "type": "multi_tower_din",
    "towers": [],
    "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [4]}}],
    "final": {"hidden_units": [4]},
}


def grouped(value_dim: int = 2, default: float = 0.0) -> FeatureSpec:
    sub = {"name": "raw_feat", "dense": True, "value_dim": value_dim, "default": default}
    seq = {
        "kind": "sequence",
        "name": "click_50_seq",
        "sequence_length": 50,
        "delimiter": ";",
        "sub_features": [{"name": "item_id", "num_buckets": 100, "embedding_dim": 4}, sub],
    }
    return _spec([{"kind": "id", "name": "item_id", "num_buckets": 100, "embedding_dim": 4}, seq],
                 ["item_id", "click_50_seq__item_id", "click_50_seq__raw_feat"])  # fmt: skip


def standalone(value_dim: int) -> FeatureSpec:
    seq = {
        "kind": "sequence_raw",
        "name": "click_50_seq_raw_feat",
        "column": "click_50_seq_raw_input",
        "dense": True,
        "value_dim": value_dim,
        "sequence_length": 50,
        "delimiter": ";",
    }
    user = {"kind": "id", "name": "user_id", "num_buckets": 100, "embedding_dim": 4}
    ids = {
        "kind": "sequence_id",
        "name": "click_ids",
        "num_buckets": 100,
        "embedding_dim": 4,
        "sequence_length": 50,
    }
    return _spec([user, ids, seq], ["user_id", "click_ids", "click_50_seq_raw_feat"])


def _spec(features: list, group: list) -> FeatureSpec:
    cfg = {
        "name": "float_vectors",
        "data": {"label": "label"},
        "features": features,
        "feature_groups": [{"name": "seq", "type": "sequence", "features": group}],
        "model": MODEL,
    }
    return build_feature_spec(parse_config(cfg))


def values(s: FeatureSpec, table: pa.Table, keys: list[str]) -> tuple[list[list[float]], list[int]]:
    """Each item's floats (one list an item, over ``keys``) and the history lengths."""
    out = FeatureGenerator(s, with_labels=False)(table)
    idx = [s.sparse_keys().index(k) for k in keys]
    lengths = [out.lengths[i].tolist() for i in idx]
    assert all(n == lengths[0] for n in lengths)  # the values of one item are one item in every key
    cols = [out.values[i].view(np.float64) for i in idx]
    return [list(v) for v in zip(*cols)], lengths[0]


def test_grouped_value_dim_2_is_two_floats_per_item_paired_in_the_group() -> None:
    s = grouped()
    keys = ["click_50_seq__raw_feat__0", "click_50_seq__raw_feat__1"]
    assert s.item_float_keys() == keys
    (g,) = s.groups
    assert g.history == ["click_50_seq__item_id", *keys]  # the group listing the sub-feature gets both
    # raw_feature_test.py: ["0.1\x1d1.1;0.2\x1d1.2", "", "0.3\x1d1.3"] -> [0.1, 1.1], [0.2, 1.2], [0.3, 1.3]
    column = ["1\x030.1\x1d1.1;2\x030.2\x1d1.2", "", "3\x030.3\x1d1.3"]
    got, lengths = values(s, pa.table({"item_id": [1, 2, 3], "click_50_seq": column}), keys)
    np.testing.assert_allclose(got, [[0.1, 1.1], [0.2, 1.2], [0.3, 1.3]])
    assert lengths == [2, 0, 1]


def test_grouped_vector_empty_sub_value_is_default_and_a_wrong_count_is_a_bad_row() -> None:
    s = grouped(default=-1.0)
    keys = ["click_50_seq__raw_feat__0", "click_50_seq__raw_feat__1"]
    got, _ = values(s, pa.table({"item_id": [1], "click_50_seq": ["1\x03;2\x030.5\x1d2"]}), keys)
    assert got == [[-1.0, -1.0], [0.5, 2.0]]
    for bad, what in (("1\x030.1", "2 numbers separated by"), ("1\x030.1\x1dsoon", "2 numbers separated by")):
        with pytest.raises(
            BadRowError, match=rf"row 1, column 'click_50_seq': expected {what}.*'click_50_seq__raw_feat__0'"
        ):
            values(s, pa.table({"item_id": [1, 1], "click_50_seq": ["1\x030\x1d0", bad]}), keys)


@pytest.mark.parametrize(
    ("value_dim", "column", "want", "keys"),
    [
        # test_simple_sequence_raw_feature_dense, value_dim 1 and 2
        (1, ["0.1;0.2", "", "0.3"], [[0.1], [0.2], [0.3]], ["click_50_seq_raw_feat"]),
        (
            2,
            ["0.1\x1d1.1;0.2\x1d1.2", "", "0.3\x1d1.3"],
            [[0.1, 1.1], [0.2, 1.2], [0.3, 1.3]],
            ["click_50_seq_raw_feat__0", "click_50_seq_raw_feat__1"],
        ),
    ],
)
def test_standalone_sequence_raw_without_boundaries(
    value_dim: int, column: list, want: list, keys: list
) -> None:
    s = standalone(value_dim)
    assert s.item_float_keys() == keys and s.groups[0].history == ["click_ids", *keys]
    table = pa.table({"user_id": [1, 2, 3], "click_ids": ["1;2", "", "3"], "click_50_seq_raw_input": column})
    got, lengths = values(s, table, keys)
    np.testing.assert_allclose(got, want)
    assert lengths == [2, 0, 1]


def test_fg_json_round_trip(tmp_path: Path) -> None:
    for s in (grouped(), standalone(2)):
        back = FeatureSpec.load(s.save(tmp_path / "fg.json"))
        assert back.to_dict() == s.to_dict() and back.item_float_keys() == s.item_float_keys()


def test_standalone_needs_boundaries_or_dense() -> None:
    seq = {"kind": "sequence_raw", "name": "p", "sequence_length": 5}
    base = {"name": "x", "data": {"label": "label"}, "model": MODEL}
    with pytest.raises(ConfigError, match="exactly one of boundaries"):
        parse_config({**base, "features": [seq]})
    with pytest.raises(ConfigError, match="exactly one of boundaries"):
        parse_config({**base, "features": [{**seq, "dense": True, "boundaries": [1.0]}]})
