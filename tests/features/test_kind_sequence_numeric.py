"""Numeric history values: a grouped sequence's numeric sub-feature (kind ``sequence``, a sub-feature with
``boundaries``) and the standalone kinds ``sequence_raw`` and ``sequence_id`` (TorchEasyRec's raw_feature inside a
sequence_feature, sequence_raw_feature, sequence_id_feature). TorchEasyRec's examples
(tzrec/features/raw_feature_test.py, test_sequence_raw_feature_with_boundaries and
test_simple_sequence_raw_feature_dense: inputs and outputs written here), bad items, the raw-value contract,
pre-encoded input, fg.json and a hypothesis check against a per-item reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import every_representation, round_trip

from recpipe.config import ConfigError, RecpipeConfig, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.spec import FeatureSpec

BOUNDS = [0.05, 0.15, 0.25]


def config(*features: dict[str, Any], history: list[str], encoded: bool = False) -> RecpipeConfig:
    """``features`` after a target ``item``, one sequence group: ``item`` and ``history`` (widths may differ)."""
    item = {"kind": "id", "name": "item", "num_buckets": 10, "embedding_dim": 4}
    return parse_config(
        {
            "name": "seq",
            "data": {"label": "label", "fg_encoded": encoded},
            "features": [item, *features],
            "feature_groups": [{"name": "seq", "type": "sequence", "features": ["item", *history]}],
            "model": {
                "type": "multi_tower_din",
                "towers": [],
                "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [4]}}],
                "final": {"hidden_units": [4]},
            },
        }
    )


def seq_raw(**kw: Any) -> dict[str, Any]:
    return {
        "kind": "sequence_raw",
        "name": "prices",
        "boundaries": BOUNDS,
        "embedding_dim": 4,
        "sequence_length": 50,
        **kw,
    }


def clicks(**kw: Any) -> dict[str, Any]:
    subs = [
        {"name": "item", "num_buckets": 10, "embedding_dim": 4},
        {"name": "price", "boundaries": BOUNDS, "embedding_dim": 4, **kw},
    ]
    return {"kind": "sequence", "name": "clicks", "sequence_length": 50, "sub_features": subs}


def items(spec: FeatureSpec, rows: Any, key: str) -> list[list[int]]:
    """The ids of ``key``, row by row."""
    table = rows if isinstance(rows, pa.Table) else pa.table(rows)
    out = FeatureGenerator(spec, with_labels=False)(table)
    k = spec.sparse_keys().index(key)
    return [v.tolist() for v in np.split(out.values[k], np.cumsum(out.lengths[k])[:-1])]


def test_torcheasyrec_examples() -> None:
    """TorchEasyRec: ``["0.1;0.2", "", "0.3"]`` by [0.05, 0.15, 0.25] → values [1, 2, 0, 3], lengths [2, 1, 1]: its
    FG makes an empty history one item of the default. recpipe's histories keep their items: an empty one has
    none (docs/tzrec.md), so the same rows give [[1, 2], [], [3]]."""
    spec = build_feature_spec(config(seq_raw(), history=["prices"]))
    assert items(spec, {"prices": ["0.1;0.2", "", "0.3"]}, "prices") == [[1, 2], [], [3]]
    # Grouped: the same values as the second sub-value of each item.
    spec = build_feature_spec(config(clicks(), history=["clicks__item", "clicks__price"]))
    rows = {"clicks": ["3\x030.1|8\x030.2", "", "1\x030.3"]}
    assert items(spec, rows, "clicks__price") == [[1, 2], [], [3]]
    assert items(spec, rows, "clicks__item") == [[3, 8], [], [1]]


def test_bucket_edges_defaults_and_truncation() -> None:
    """A value on a boundary goes up (``side="right"``, as a raw feature's bucket); an empty item or sub-value is
    ``default``; items past ``sequence_length`` are dropped."""
    spec = build_feature_spec(config(seq_raw(default=0.2, sequence_length=3), history=["prices"]))
    assert items(spec, {"prices": ["0.05;0.15;0.25;0.3", "0.1;;-1", "1e-3"]}, "prices") == [
        [1, 2, 3],
        [1, 2, 0],
        [0],
    ]
    spec = build_feature_spec(config(clicks(default=1.0), history=["clicks__item", "clicks__price"]))
    assert items(spec, {"clicks": ["3\x03|4\x030"]}, "clicks__price") == [[3, 0]]


@pytest.mark.parametrize(
    ("feature", "history", "column", "bad", "expected"),
    [
        (seq_raw(), ["prices"], "prices", "0.1;abc", "a finite number in sub-feature 'prices'"),
        (seq_raw(), ["prices"], "prices", "0.1;inf", "a finite number in sub-feature 'prices'"),
        (
            clicks(),
            ["clicks__item", "clicks__price"],
            "clicks",
            "3\x030.1|8\x03x1",
            "a finite number in sub-feature 'clicks__price'",
        ),
        (clicks(), ["clicks__item", "clicks__price"], "clicks", "3\x030.1|8", "items of 2 sub-values"),
    ],
)
def test_a_bad_item_names_its_column_and_what_was_expected(feature, history, column, bad, expected) -> None:
    spec = build_feature_spec(config(feature, history=history))
    rows = pa.table({column: ["", bad]})
    with pytest.raises(BadRowError) as err:
        FeatureGenerator(spec, with_labels=False)(rows, file="part-0.parquet")
    assert (err.value.file, err.value.row, err.value.column) == ("part-0.parquet", 1, column)
    assert expected in err.value.expected
    fg = FeatureGenerator(spec, on_bad_row="skip", with_labels=False)
    assert fg(rows).num_rows == 1 and fg.stats.skipped_by_column == {column: 1}


def test_raw_value_contract(tmp_path: Path) -> None:
    """null and "" are empty histories; an absent column at serving is empty in every row; Parquet, CSV, a
    DataFrame, one-row DataFrames and JSON records give the same ids."""
    cfg = config(seq_raw(), clicks(), history=["clicks__item", "clicks__price"])
    rows = [
        {"item": 1, "prices": "0.1;0.2", "clicks": "3\x030.1|8\x030.3", "label": 1},
        {"item": 2, "prices": None, "clicks": None, "label": 0},
        {"item": 3, "prices": "", "clicks": "", "label": 1},
        {"item": 4, "prices": "7", "clicks": "5\x030.2", "label": 0},
    ]
    out = every_representation(cfg, rows, tmp_path)
    spec = build_feature_spec(cfg)
    k = spec.sparse_keys()
    assert out.lengths[k.index("prices")].tolist() == [2, 0, 0, 1]
    assert out.values[k.index("clicks__price")].tolist() == [1, 3, 2]
    absent = FeatureGenerator(spec, with_labels=False)(pa.table({"item": [1, 2]}))
    assert absent.lengths[k.index("prices")].tolist() == [0, 0]
    assert absent.lengths[k.index("clicks__price")].tolist() == [0, 0]


def test_sequence_id_items() -> None:
    """kind ``sequence_id``: each item an id; an empty item is ``default_value`` (TorchEasyRec's "0" for a
    sequence), else a bad row."""
    feature = {
        "kind": "sequence_id",
        "name": "buys",
        "num_buckets": 10,
        "embedding_dim": 4,
        "sequence_length": 2,
    }
    spec = build_feature_spec(config(feature, history=["buys"]))
    assert items(spec, {"buys": ["3;18;5", "", None]}, "buys") == [[3, 8], [], []]
    with pytest.raises(BadRowError, match="column 'buys': expected items of 1 sub-values"):
        FeatureGenerator(spec, with_labels=False)(pa.table({"buys": ["3;;5"]}))
    spec = build_feature_spec(config({**feature, "default_value": "0"}, history=["buys"]))
    assert items(spec, {"buys": ["3;;5"]}, "buys") == [[3, 0]]


def test_pre_encoded_histories_hold_bucket_ids() -> None:
    """``data.fg_encoded``: a grouped sequence's sub-features are columns ``<sequence>__<sub>`` of ids (a numeric
    one's bucket ids), checked against the table's rows."""
    spec = build_feature_spec(
        config(clicks(), seq_raw(), history=["clicks__item", "clicks__price"], encoded=True)
    )
    assert {s.name: s.column for s in spec.sequences} == {
        "clicks__item": "clicks__item",
        "clicks__price": "clicks__price",
        "prices": "prices",
    }
    rows = {"item": [1], "clicks__item": ["3|8"], "clicks__price": ["3|0"], "prices": ["1;2"]}
    assert items(spec, rows, "clicks__price") == [[3, 0]]
    with pytest.raises(BadRowError, match=r"column 'prices': expected a pre-encoded id in \[0, 4\)"):
        items(spec, {**rows, "prices": ["4"]}, "prices")


def test_config_refusals() -> None:
    with pytest.raises(ConfigError, match="sequence_raw feature 'prices' needs exactly one of boundaries"):
        config(seq_raw(boundaries=None), history=["prices"])
    with pytest.raises(ConfigError, match="strictly increasing"):
        config(clicks(boundaries=[1.0, 1.0]), history=["clicks__item", "clicks__price"])
    with pytest.raises(ConfigError, match="sequence_length"):
        config({k: v for k, v in seq_raw().items() if k != "sequence_length"}, history=["prices"])
    # The query is wider than an item: DIN pads a narrower query, never a wider one.
    wide = {"kind": "id", "name": "item2", "num_buckets": 10, "embedding_dim": 8}
    cfg = config(seq_raw(), wide, history=["prices"])
    cfg.feature_groups[0].features.insert(1, "item2")
    with pytest.raises(ValueError, match="wider than a history item"):
        build_feature_spec(cfg)


def test_fg_json_round_trip() -> None:
    spec = build_feature_spec(config(seq_raw(), clicks(), history=["clicks__item", "clicks__price"]))
    kinds = {e.name: e.kind for e in spec.fg_entries()}
    assert (kinds["prices"], kinds["clicks"]) == ("sequence_raw", "sequence")
    round_trip(spec, pa.table({"item": [1, 2], "prices": ["0.1;0.3", None], "clicks": ["3\x030.2", ""]}))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.floats(-1, 1, allow_nan=False, width=32).map(lambda x: round(x, 4)), max_size=6),
        min_size=1,
        max_size=8,
    )
)
def test_buckets_match_a_per_item_reference(histories: list[list[float]]) -> None:
    spec = build_feature_spec(config(seq_raw(sequence_length=4), history=["prices"]))
    text = [";".join(repr(x) for x in h) for h in histories]
    want = [[int(np.searchsorted(BOUNDS, x, side="right")) for x in h[:4]] for h in histories]
    assert items(spec, {"prices": text}, "prices") == want
