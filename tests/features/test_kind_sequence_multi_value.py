"""Histories of several ids per item (TorchEasyRec's ``value_dim: 0`` on a sequence_feature's id sub-feature or
on a sequence_id_feature): the ids key holds every item's ids (lengths: ids per row) and
``<key>__item_lengths`` each item's id count (lengths: items per row), values computed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.spec import FeatureSpec, FeatureSpecError

MODEL = {
    "type": "multi_tower_din",
    "towers": [],
    "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [4]}}],
    "final": {"hidden_units": [4]},
}
ITEM = {"kind": "id", "name": "item_id", "num_buckets": 100, "embedding_dim": 4}


def grouped(pooling: str = "sum", default: str | None = None, encoded: bool = False) -> FeatureSpec:
    tags = {"name": "tags", "num_buckets": 10, "embedding_dim": 4, "value_dim": 0, "pooling": pooling}
    if default is not None:
        tags["default_value"] = default
    seq = {
        "kind": "sequence",
        "name": "clicks",
        "sequence_length": 3,
        "delimiter": ";",
        "sub_features": [{"name": "item_id", "num_buckets": 100, "embedding_dim": 4}, tags],
    }
    return _spec([ITEM, seq], ["item_id", "clicks__item_id", "clicks__tags"], encoded)


def standalone() -> FeatureSpec:
    buys = {
        "kind": "sequence_id",
        "name": "buys",
        "num_buckets": 100,
        "embedding_dim": 4,
        "sequence_length": 50,
        "value_dim": 0,
    }
    return _spec([ITEM, buys], ["item_id", "buys"])


def _spec(features: list, group: list, encoded: bool = False) -> FeatureSpec:
    cfg = {
        "name": "multi_value",
        "data": {"label": "label", "fg_encoded": encoded},
        "features": features,
        "feature_groups": [{"name": "seq", "type": "sequence", "features": group}],
        "model": MODEL,
    }
    return build_feature_spec(parse_config(cfg))


def fg(s: FeatureSpec, table: pa.Table) -> dict[str, tuple[list[int], list[int]]]:
    out = FeatureGenerator(s, with_labels=False)(table)
    return {k: (v.tolist(), n.tolist()) for k, v, n in zip(s.sparse_keys(), out.values, out.lengths)}


def test_grouped_items_of_several_ids_an_empty_item_and_a_null_row() -> None:
    s = grouped(pooling="mean")
    tags = s.feature("clicks__tags")
    assert tags.item_lengths_key == "clicks__tags__item_lengths" and tags.pooling == "mean"
    assert s.feature("clicks__tags__item_lengths").item_lengths_of == "clicks__tags"
    assert s.sequences[0].sub_features == [
        "clicks__item_id",
        "clicks__tags",
    ]  # the counts key is no sub-value
    (t,) = [t for t in s.tables() if t.name == "tags"]
    assert t.items == {"clicks__tags": ["clicks__tags__item_lengths", "mean"]}
    # rows: 3 items (2 ids, 1 id, none), a null row, 4 items (the last past sequence_length 3)
    column = ["1\x0311\x1d12;2\x0313;3\x03", None, "4\x031;5\x032\x1d3\x1d4;6\x035;7\x036"]
    got = fg(s, pa.table({"item_id": [1, 2, 3], "clicks": column}))
    assert got["clicks__item_id"] == ([1, 2, 3, 4, 5, 6], [3, 0, 3])
    assert got["clicks__tags"] == ([1, 2, 3, 1, 2, 3, 4, 5], [3, 0, 5])  # ids mod 10
    assert got["clicks__tags__item_lengths"] == ([2, 1, 0, 1, 3, 1], [3, 0, 3])


def test_empty_item_takes_the_default_id_when_there_is_one() -> None:
    got = fg(grouped(default="9"), pa.table({"item_id": [1], "clicks": ["1\x03;2\x037\x1d8"]}))
    assert got["clicks__tags"] == ([9, 7, 8], [3])
    assert got["clicks__tags__item_lengths"] == ([1, 2], [2])


@pytest.mark.parametrize(
    ("bad", "what"),
    [("1\x037\x1d\x1d8", "ids separated by '\\\\x1d'"), ("1\x037\x1dx", "ids separated by '\\\\x1d'")],
)
def test_a_bad_id_in_an_item_names_row_and_column(bad: str, what: str) -> None:
    with pytest.raises(BadRowError, match=rf"row 1, column 'clicks': expected {what}.*'clicks__tags'"):
        fg(grouped(), pa.table({"item_id": [1, 1], "clicks": ["1\x037", bad]}))


def test_standalone_sequence_id_of_several_ids_per_item() -> None:
    s = standalone()
    got = fg(s, pa.table({"item_id": [1, 2, 3], "buys": ["3\x1d103;8", "", None]}))
    assert got["buys"] == ([3, 3, 8], [3, 0, 0])
    assert got["buys__item_lengths"] == ([2, 1], [2, 0, 0])
    assert s.groups[0].history == ["buys"]


def test_fg_json_round_trip_and_pre_encoded_refused(tmp_path: Path) -> None:
    for s in (grouped("mean"), standalone()):
        back = FeatureSpec.load(s.save(tmp_path / "fg.json"))
        assert back == s and back.digest() == s.digest()
    with pytest.raises(FeatureSpecError, match=r"pre-encoded input .*\(value_dim 0\)"):
        grouped(encoded=True)


def test_values_are_int64() -> None:
    out = FeatureGenerator(standalone(), with_labels=False)(pa.table({"item_id": [1], "buys": ["1\x1d2"]}))
    assert all(v.dtype == np.int64 for v in out.values)
