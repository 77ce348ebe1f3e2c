"""Kind ``id``, multi-value: TorchEasyRec's id_feature examples (``separator``, ``value_dim``,
``default_bucketize_value``, ``default_value``, ``weighted``), list and map columns, bad rows, the raw-value
contract, fitting and the fg.json round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kind_rows import config, every_representation, fg, key, same, spec_of
from rowwise import map_id

from recpipe.config import ConfigError
from recpipe.data.sources import open_source
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.fit import fit_feature_spec
from recpipe.features.spec import FeatureSpec, FeatureSpecError

TAGS = {"kind": "id", "name": "tags", "vocab_list": ["xyz", "abc", "efg"], "default_bucketize_value": 0}


# TorchEasyRec's tzrec/features/id_feature_test.py, test_id_feature_with_vocab_list (default_bucketize_value
# set: its ids are the list's positions) and test_id_feature_with_num_buckets, on its input rows.
@pytest.mark.parametrize(
    ("default", "values", "lengths"), [(None, [1, 2, 0], [2, 0, 1]), ("xyz", [1, 2, 0, 0], [2, 1, 1])]
)
def test_torcheasyrec_vocab_list_with_default_bucketize_value(default, values, lengths) -> None:
    spec = spec_of([{**TAGS, "default_value": default, "pooling": "mean"}])
    assert spec.feature("tags").mapping.size == 3  # TorchEasyRec's num_embeddings: len(vocab_list)
    assert key(fg(spec, {"tags": ["abc\x1defg", "", "hij"]}), spec, "tags") == (values, lengths)


@pytest.mark.parametrize(
    ("default", "values", "lengths"), [(None, [0, 1, 2], [2, 0, 1]), ("3", [0, 1, 3, 2], [2, 1, 1])]
)
def test_torcheasyrec_num_buckets_multi_value(default, values, lengths) -> None:
    spec = spec_of([{"kind": "id", "name": "id_int", "num_buckets": 100, "default_value": default}])
    assert key(fg(spec, {"id_int": ["0\x1d1", "", "2"]}), spec, "id_int") == (values, lengths)


def test_a_list_column_is_the_same_ids_as_separated_text() -> None:
    spec = spec_of([{"kind": "id", "name": "c", "hash_bucket_size": 1000}])
    text = fg(spec, {"c": ["a\x1db", None, "", "c"]})
    lists = fg(spec, {"c": pa.array([["a", "b"], None, [], ["c"]])})
    assert key(text, spec, "c") == key(lists, spec, "c") and key(text, spec, "c")[1] == [2, 0, 0, 1]
    ints = spec_of([{"kind": "id", "name": "c", "num_buckets": 10}])
    out = fg(ints, {"c": pa.array([[12, 3], [None], None, [7]], pa.list_(pa.int64()))})
    assert key(out, ints, "c") == ([2, 3, 7], [2, 0, 0, 1])
    # pandas writes integer lists with a missing element as floats: 3.0 is id 3, NaN is no id.
    floats = fg(ints, {"c": pa.array([[12.0, 3.0], [float("nan")], None, [7.0]])})
    assert key(floats, ints, "c") == ([2, 3, 7], [2, 0, 0, 1])


def test_empty_pieces_are_no_id_and_a_row_without_ids_takes_the_default() -> None:
    rows = {"c": ["1\x1d\x1d2\x1d", "\x1d", None, "5"]}
    plain = spec_of([{"kind": "id", "name": "c", "num_buckets": 10}])
    assert key(fg(plain, rows), plain, "c") == ([1, 2, 5], [2, 0, 0, 1])
    default = spec_of([{"kind": "id", "name": "c", "num_buckets": 10, "default_value": "9"}])
    assert key(fg(default, rows), default, "c") == ([1, 2, 9, 9, 5], [2, 1, 1, 1])


def test_value_dim_keeps_the_first_ids_of_a_row() -> None:
    # TorchEasyRec's value_dim (feature.md: 0 = multi-value ids, 1 = one id): value_dim 1 keeps the first
    # id, as its sequence tests show ("ua\x1dub" → the id of "ua"); recpipe keeps the first value_dim of them.
    rows = {"c": ["1\x1d2\x1d3", "4", None]}
    for value_dim, want in (
        (0, ([1, 2, 3, 4], [3, 1, 0])),
        (1, ([1, 4], [1, 1, 0])),
        (2, ([1, 2, 4], [2, 1, 0])),
    ):
        spec = spec_of([{"kind": "id", "name": "c", "num_buckets": 10, "value_dim": value_dim}])
        assert key(fg(spec, rows), spec, "c") == want, value_dim


def test_another_separator() -> None:
    spec = spec_of([{"kind": "id", "name": "c", "num_buckets": 10, "separator": "|"}])
    # "\x1d" is no separator of this feature: "3\x1d4" is one value, not a decimal id
    with pytest.raises(BadRowError, match=r"row 1, column 'c': expected a non-negative integer id"):
        fg(spec, {"c": ["1|2", "3\x1d4"]})
    assert key(fg(spec, {"c": ["1|2", "3|4|5"]}), spec, "c") == ([1, 2, 3, 4, 5], [2, 3])


def test_a_bad_id_names_its_row_and_value_and_skip_drops_the_row() -> None:
    spec = spec_of([{"kind": "id", "name": "c", "num_buckets": 10}])
    rows = pa.table({"c": ["1\x1d2", "3\x1dx", "4"], "label": [0, 1, 0]})
    with pytest.raises(
        BadRowError, match=r"part-0, row 11, column 'c': expected a non-negative integer id .*got 'x'"
    ):
        FeatureGenerator(spec)(rows, file="part-0", first_row=10)
    skip = FeatureGenerator(spec, on_bad_row="skip")
    out = skip(rows)
    assert key(out, spec, "c") == ([1, 2, 4], [2, 1]) and skip.stats.skipped_by_column == {"c": 1}


def test_config_refusals() -> None:
    with pytest.raises(ConfigError, match="weighted: true with zch: recpipe's zero-collision tables"):
        config([{"kind": "id", "name": "c", "hash_bucket_size": 10, "weighted": True, "zch": True}])
    with pytest.raises(
        ConfigError, match="default_bucketize_value is the id of an out-of-vocabulary value: it needs"
    ):
        config([{"kind": "id", "name": "c", "hash_bucket_size": 10, "default_bucketize_value": 1}])
    with pytest.raises(ConfigError, match=r"default_bucketize_value 3 must be below len\(vocab_list\) = 3"):
        config([{**TAGS, "default_bucketize_value": 3}])
    with pytest.raises(ConfigError, match="separator"):
        config([{"kind": "id", "name": "c", "hash_bucket_size": 10, "separator": ""}])


def test_vocab_file_with_default_bucketize_value(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("a\nb\nc\n")
    spec = spec_of(
        [{"kind": "id", "name": "c", "vocab_file": str(tmp_path / "vocab.txt"), "default_bucketize_value": 2}]
    )
    assert spec.feature("c").mapping.size == 3
    assert key(fg(spec, {"c": ["b\x1dzz", "a"]}), spec, "c") == ([1, 2, 0], [2, 1])


def test_fg_json_round_trip_and_plain_ids_read_as_before(tmp_path: Path) -> None:
    spec = spec_of(
        [TAGS, {"kind": "id", "name": "p", "hash_bucket_size": 10, "separator": "|", "value_dim": 2}]
    )
    assert FeatureSpec.load(spec.save(tmp_path / "fg.json")) == spec
    saved = json.loads((tmp_path / "fg.json").read_text())["sparse"]
    assert saved[0]["params"] == {"default_bucketize_value": 0}
    assert saved[1]["params"] == {"separator": "|", "value_dim": 2}
    plain = spec_of([{"kind": "id", "name": "p", "hash_bucket_size": 10}]).to_dict()["sparse"][0]
    assert "params" not in plain  # TorchEasyRec's defaults: nothing written, the digest unchanged
    rows = {"tags": ["abc\x1defg", None], "p": ["a|b|c", "d"]}
    loaded = FeatureSpec.load(tmp_path / "fg.json")
    assert key(fg(loaded, rows), loaded, "p") == key(fg(spec, rows), spec, "p")


def test_min_freq_counts_every_id_of_a_row(tmp_path: Path) -> None:
    cfg = config([{"kind": "id", "name": "c", "min_freq": 2}])
    pq.write_table(
        pa.table({"c": ["a\x1db", "b\x1dc", "a", None], "label": [0, 1, 0, 1]}), tmp_path / "t.parquet"
    )
    spec = fit_feature_spec(cfg, open_source(str(tmp_path)))
    assert spec.feature("c").mapping.vocab == ["a", "b"]
    assert key(fg(spec, {"c": ["b\x1dc\x1da"]}), spec, "c") == ([2, 0, 1], [3])


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(
        [
            {"kind": "id", "name": "c", "num_buckets": 100},
            {"kind": "id", "name": "h", "hash_bucket_size": 100},
        ]
    )
    rows = [
        {"c": "1\x1d2", "h": "a\x1db"},
        {"c": None, "h": None},
        {"c": "", "h": ""},
        {"c": "7", "h": "a"},
    ]
    out = every_representation(cfg, rows, {"c": pa.string(), "h": pa.string()}, tmp_path)
    spec = build_feature_spec(cfg)
    assert key(out, spec, "c") == ([1, 2, 7], [2, 0, 0, 1])
    # list columns (Parquet's list<string>, pandas lists, JSON arrays) mean the same ids
    lists = [
        {"c": [1, 2], "h": ["a", "b"]},
        {"c": None, "h": None},
        {"c": [], "h": []},
        {"c": [7], "h": ["a"]},
    ]
    types = {"c": pa.list_(pa.int64()), "h": pa.list_(pa.string())}
    same(out, every_representation(cfg, lists, types, tmp_path, csv=False), "list columns")
    # at serving, an absent column is all missing
    serve = fg(spec, {"h": ["a\x1db", None, "", "a"]})
    assert key(serve, spec, "c") == ([], [0, 0, 0, 0])


def _reference(rows: list[list[str] | None], spec: FeatureSpec, name: str) -> tuple[list[int], list[int]]:
    f = spec.feature(name)
    values, lengths = [], []
    for r in rows:
        ids = [p for p in (r or []) if p != ""] or (
            [f.mapping.default_value] if f.mapping.default_value else []
        )
        ids = ids[: f.params.get("value_dim") or None]
        values += [map_id(v, f.mapping, f.column) for v in ids]
        lengths.append(len(ids))
    return values, lengths


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(["", "0", "7", "12", "a", "b"]), max_size=4)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 3),
    st.sampled_from([None, "d"]),
)
def test_vectorized_ids_equal_a_per_row_reference(rows, value_dim, default) -> None:
    spec = spec_of(
        [
            {
                "kind": "id",
                "name": "c",
                "hash_bucket_size": 97,
                "value_dim": value_dim,
                "default_value": default,
            }
        ]
    )
    text = [None if r is None else "\x1d".join(r) for r in rows]
    want = _reference([None if t is None else t.split("\x1d") for t in text], spec, "c")
    assert key(fg(spec, {"c": pa.array(text, pa.string())}), spec, "c") == want
    assert key(fg(spec, {"c": pa.array(rows, pa.list_(pa.string()))}), spec, "c") == want


# ------------------------------------------------------------------------------------- weighted ids
def weights(out, spec: FeatureSpec, name: str) -> list[float]:
    """The weights key's values of ``name`` (float64 bits per id) as floats."""
    return out.values[spec.sparse_keys().index(f"{name}__weights")].view(np.float64).tolist()


# TorchEasyRec's tzrec/features/id_feature_test.py, test_id_feature_with_weighted (num_buckets 100000): text
# "k:w" pieces joined by \x1d, and a map<string, float32> column, to ids [123, 1391, 12, 123], lengths
# [1, 1, 0, 2, 0], weights [0.5, 0.3, 0.9, 0.21]; and test_fg_encoded_with_weighted's list<string> of "k:w" and
# map<int64, float32> columns to ids [1, 2, 3, 4], lengths [1, 2, 1], weights [1.0, 1.5, 2.0, 2.5].
@pytest.mark.parametrize(
    "column",
    [
        pa.array(["123:0.5", "1391:0.3", None, "12:0.9\x1d123:0.21", ""]),
        pa.array(
            [{"123": 0.5}, {"1391": 0.3}, None, {"12": 0.9, "123": 0.21}, {}],
            type=pa.map_(pa.string(), pa.float32()),
        ),
    ],
)
def test_torcheasyrec_weighted_ids(column: pa.Array) -> None:
    spec = spec_of([{"kind": "id", "name": "cate", "num_buckets": 100000, "weighted": True}])
    out = fg(spec, {"cate": column})
    assert key(out, spec, "cate") == ([123, 1391, 12, 123], [1, 1, 0, 2, 0])
    np.testing.assert_allclose(weights(out, spec, "cate"), [0.5, 0.3, 0.9, 0.21], rtol=1e-6)
    assert key(out, spec, "cate__weights")[1] == [1, 1, 0, 2, 0]  # one weight per id


@pytest.mark.parametrize(
    "column",
    [
        pa.array(["1:1.0", "2:1.5\x1d3:2.0", "4:2.5"]),
        pa.array([["1:1.0"], ["2:1.5", "3:2.0"], ["4:2.5"]], type=pa.list_(pa.string())),
        pa.array([{1: 1.0}, {2: 1.5, 3: 2.0}, {4: 2.5}], type=pa.map_(pa.int64(), pa.float32())),
    ],
)
def test_torcheasyrec_weighted_list_and_map_columns(column: pa.Array) -> None:
    spec = spec_of([{"kind": "id", "name": "cate", "num_buckets": 10, "weighted": True}])
    out = fg(spec, {"cate": column})
    assert key(out, spec, "cate") == ([1, 2, 3, 4], [1, 2, 1])
    assert weights(out, spec, "cate") == [1.0, 1.5, 2.0, 2.5]


def test_weighted_default_value_weighs_one_value_dim_keeps_pairs_and_a_key_may_hold_colons() -> None:
    spec = spec_of(
        [{"kind": "id", "name": "t", "hash_bucket_size": 50, "weighted": True, "default_value": "x"}]
    )
    out = fg(spec, {"t": ["a:b:0.25", None]})  # the weight follows the last ':'
    plain = spec_of([{"kind": "id", "name": "t", "hash_bucket_size": 50, "default_value": "x"}])
    assert key(out, spec, "t") == key(fg(plain, {"t": ["a:b", None]}), plain, "t")
    assert weights(out, spec, "t") == [0.25, 1.0]
    first = spec_of([{"kind": "id", "name": "t", "num_buckets": 9, "weighted": True, "value_dim": 1}])
    out = fg(first, {"t": ["5:0.5\x1d6:2", "7:3"]})
    assert key(out, first, "t") == ([5, 7], [1, 1]) and weights(out, first, "t") == [0.5, 3.0]


@pytest.mark.parametrize("bad", ["3", "3:", "3:x", "3:inf", ":2", "3:1e999"])
def test_a_bad_weight_names_its_row_and_column_and_skip_drops_the_row(bad: str) -> None:
    spec = spec_of([{"kind": "id", "name": "t", "num_buckets": 9, "weighted": True}])
    rows = pa.table({"t": ["1:0.5", f"2:1\x1d{bad}"], "label": [0, 1]})
    with pytest.raises(BadRowError, match=r"part-0, row 8, column 't': expected ids with weights 'k:w'"):
        FeatureGenerator(spec)(rows, file="part-0", first_row=7)
    skip = FeatureGenerator(spec, on_bad_row="skip")
    out = skip(rows)
    assert key(out, spec, "t") == ([1], [1]) and weights(out, spec, "t") == [0.5]
    assert skip.stats.skipped_by_column == {"t": 1}


def test_weighted_fg_json_records_the_weights_key_and_shared_tables_must_agree(tmp_path: Path) -> None:
    spec = spec_of([{"kind": "id", "name": "t", "num_buckets": 9, "weighted": True}])
    entries = {e["name"]: e for e in spec.to_dict()["sparse"]}
    assert entries["t"]["params"] == {"weights": "t__weights"}
    assert entries["t__weights"]["params"] == {"weights_of": "t"}
    assert [t.name for t in spec.tables()] == ["t"] and spec.tables()[0].weights == {"t": "t__weights"}
    assert FeatureSpec.load(spec.save(tmp_path / "fg.json")) == spec
    with pytest.raises(
        FeatureSpecError, match=r"table 't' is looked up by weighted ids \['t'\] and features without"
    ):
        spec_of(
            [
                {"kind": "id", "name": "t", "num_buckets": 9, "weighted": True},
                {"kind": "id", "name": "u", "num_buckets": 9, "embedding_name": "t"},
            ]
        )
