"""Kind ``lookup`` (TorchEasyRec's lookup_feature): TorchEasyRec's own examples (tzrec/features/lookup_feature_test.py
rows, written here from its documented inputs and outputs), Arrow maps and lists, the options, bad rows, the
raw-value contract, fg.json and a hypothesis check against a dict lookup."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, dense, every_representation, fg, ids, round_trip, spec_of

from recpipe.config import ConfigError
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.hashing import fnv1a64_py

KV = ["ca:1\x1dcb:2"] * 5 + ["", ""]
KEYS = ["ca\x1dcb", "ca", "ca\x1dcd", "cd", "", "ca", ""]
ROWS = {"kv_cate": KV, "cate": KEYS}
BOUNDS = [-0.5, 0.5, 1.5, 2.5]


def lookup(**kw) -> dict:
    return {"kind": "lookup", "name": "lk", "map": "kv_cate", "key": "cate", **kw}


@pytest.mark.parametrize(
    ("combiner", "want"), [("sum", [3, 1, 1, 0, 0, 0, 0]), ("mean", [1.5, 1, 1, 0, 0, 0, 0])]
)
def test_dense_values_combine_the_keys_found(combiner: str, want: list[float]) -> None:
    # A missing key ("cd") is skipped; a row where nothing is found takes default_value "0".
    assert dense(spec_of(lookup(combiner=combiner)), ROWS) == want


def test_min_max_count_and_a_default() -> None:
    assert dense(spec_of(lookup(combiner="max")), ROWS) == [2, 1, 1, 0, 0, 0, 0]
    assert dense(spec_of(lookup(combiner="min")), ROWS) == [1, 1, 1, 0, 0, 0, 0]
    assert dense(spec_of(lookup(combiner="count", default_value="-1")), ROWS) == [2, 1, 1, -1, -1, -1, -1]
    assert dense(spec_of(lookup(combiner="avg")), ROWS)[0] == 1.5  # avg is mean


def test_arrow_maps_and_list_keys_read_as_the_text() -> None:
    kv = pa.array([{"ca": 1, "cb": 2}] * 5 + [{}, None], type=pa.map_(pa.string(), pa.int64()))
    keys = pa.array([["ca", "cb"], ["ca"], ["ca", "cd"], ["cd"], [], ["ca"], None])
    assert dense(spec_of(lookup()), {"kv_cate": kv, "cate": keys}) == [3, 1, 1, 0, 0, 0, 0]
    struct = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float64())]))
    kv = pa.array([[{"key": "ca", "value": 1.5}], None], type=struct)
    assert dense(spec_of(lookup()), {"kv_cate": kv, "cate": ["ca", "ca"]}) == [1.5, 0]
    # Integer keys on both sides: 7 is "7".
    kv = pa.array([{7: 2.0}, {8: 1.0}], type=pa.map_(pa.int64(), pa.float64()))
    assert dense(spec_of(lookup()), {"kv_cate": kv, "cate": [7, 7]}) == [2, 0]


@pytest.mark.parametrize(
    ("combiner", "want"),
    [
        ("sum", [[4], [2], [2], [1], [1], [1], [1]]),
        ("mean", [[3], [2], [2], [1], [1], [1], [1]]),
        ("", [[2, 3], [2], [2], [1], [1], [1], [1]]),  # no combiner: each value its bucket
    ],
)
def test_boundaries_bucketize_the_combined_value(combiner: str, want: list[list[int]]) -> None:
    spec = spec_of(lookup(boundaries=BOUNDS, combiner=combiner))
    assert spec.feature("lk").mapping.size == 5
    assert ids(spec, ROWS) == want


@pytest.mark.parametrize(
    ("default", "want"),
    [(None, [[1, 2], [1], [1], [], [], [], []]), ("0", [[1, 2], [1], [1], [0], [0], [0], [0]])],
)
def test_num_buckets_maps_the_value_as_an_id(default: str | None, want: list[list[int]]) -> None:
    rows = {"kv_cate": [*KV[:-1], None], "cate": ["ca\x1dcb", "ca", "ca\x1dcd", "cd", None, "ca", ""]}
    assert ids(spec_of(lookup(num_buckets=10, default_value=default)), rows) == want


def test_need_key_hashes_key_and_value() -> None:
    spec = spec_of(lookup(hash_bucket_size=1000, need_key=True, default_value=None))
    got = ids(spec, {"kv_cate": ["ca:x\x1dcb:y"], "cate": ["ca\x1dcb"]})
    assert got == [[fnv1a64_py("ca_x") % 1000, fnv1a64_py("cb_y") % 1000]]
    plain = ids(spec_of(lookup(hash_bucket_size=1000)), {"kv_cate": ["ca:x"], "cate": ["ca"]})
    assert plain == [[fnv1a64_py("x") % 1000]]


def test_a_vocabulary_maps_the_value() -> None:
    spec = spec_of(lookup(vocab_list=["e", "f"], default_value=None))
    assert ids(spec, {"kv_cate": ["a:f\x1db:g"], "cate": ["a\x1db"]}) == [[2, 0]]


def test_a_duplicate_key_takes_its_first_value() -> None:
    assert dense(spec_of(lookup()), {"kv_cate": ["a:1\x1da:5"], "cate": ["a"]}) == [1]


def test_bad_rows_name_the_column_and_what_was_expected() -> None:
    spec = spec_of(lookup())
    with pytest.raises(
        BadRowError, match=r"row 1, column 'kv_cate': expected key:value pairs separated by '\\x1d', got 'cb'"
    ):
        fg(spec, {"kv_cate": ["ca:1", "cb"], "cate": ["ca", "cb"]})
    with pytest.raises(
        BadRowError, match=r"row 0, column 'kv_cate': expected a finite number as the value of a key"
    ):
        fg(spec, {"kv_cate": ["ca:x"], "cate": ["ca"]})
    # Under on_bad_row: skip the row goes, counted under its column.
    gen = FeatureGenerator(spec, on_bad_row="skip", with_labels=False)
    out = gen(pa.table({"kv_cate": ["ca:1", "ca:x", "cb"], "cate": ["ca", "ca", "ca"]}))
    assert out.dense[:, 0].tolist() == [1.0] and gen.stats.skipped_by_column == {"kv_cate": 2}
    bucketed = spec_of(lookup(boundaries=BOUNDS))
    gen = FeatureGenerator(bucketed, on_bad_row="skip", with_labels=False)
    assert gen(pa.table({"kv_cate": ["ca:1", "ca:x", "cb"], "cate": ["ca", "ca", "ca"]})).num_rows == 1


def test_configs_that_are_probably_mistakes_are_refused() -> None:
    with pytest.raises(
        ConfigError, match="combiner 'gap_min': TorchEasyRec's docs name it but do not define it"
    ):
        config(lookup(combiner="gap_min"))
    with pytest.raises(ConfigError, match="a dense lookup value needs a combiner"):
        config(lookup(combiner=""))
    with pytest.raises(ConfigError, match="need_discrete makes the value an id: give an id mapping"):
        config(lookup(need_discrete=True))
    with pytest.raises(ConfigError, match="an id prefixed with its key is text"):
        config(lookup(num_buckets=10, need_key=True))
    with pytest.raises(
        ConfigError, match="boundaries bucketize a numeric value and hash_bucket_size maps an id"
    ):
        config(lookup(boundaries=[1.0], hash_bucket_size=10))
    with pytest.raises(ConfigError, match="default_value 'x' is not a number"):
        config(lookup(default_value="x"))
    with pytest.raises(ConfigError, match="normalizer applies to a dense value"):
        config(lookup(boundaries=[1.0], normalizer="log(x+1)"))
    with pytest.raises(ConfigError, match="names its input columns itself; column is not used"):
        config(lookup(column="kv_cate"))


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(lookup(), {**lookup(hash_bucket_size=100, default_value=None), "name": "lk_id"})
    rows = [
        {"kv_cate": "ca:1\x1dcb:2", "cate": "ca"},
        {"kv_cate": None, "cate": "ca"},
        {"kv_cate": "", "cate": "cb"},
        {"kv_cate": "ca:1\x1dcb:2", "cate": None},
        {"kv_cate": "ca:1\x1d7:4", "cate": 7},
        {"kv_cate": "ca:1\x1d7:4", "cate": 7.0},
    ]
    out = every_representation(cfg, rows, tmp_path)
    assert out.dense[:, 0].tolist() == [1, 0, 0, 0, 4, 4]
    assert out.lengths[0].tolist() == [1, 0, 0, 0, 1, 1]
    # A column a request does not carry is all missing at serving.
    spec = spec_of(lookup())
    assert dense(spec, {"cate": ["ca"]}) == [0] and dense(spec, {"kv_cate": ["ca:1"]}) == [0]


def test_fg_json_round_trip() -> None:
    for kw in ({}, {"boundaries": BOUNDS, "combiner": ""}, {"hash_bucket_size": 10, "need_key": True}):
        spec = spec_of(lookup(**kw))
        entry = (spec.dense or spec.sparse)[0]
        assert entry.kind == "lookup" and entry.column == "kv_cate" and entry.inputs == ["cate"]
        round_trip(spec, pa.table(ROWS))


_KEY = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.dictionaries(_KEY, st.integers(-5, 5), max_size=4), st.lists(_KEY, max_size=3)),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["sum", "mean", "min", "max", "count"]),
)
def test_matches_a_dict_lookup_row_by_row(rows, combiner: str) -> None:
    kv = ["\x1d".join(f"{k}:{v}" for k, v in m.items()) for m, _ in rows]
    keys = ["\x1d".join(k) for _, k in rows]
    want = []
    for m, k in rows:
        found = [m[x] for x in k if x in m]
        if not found:
            want.append(0.0)
            continue
        agg = {"sum": sum, "mean": np.mean, "min": min, "max": max, "count": len}[combiner]
        want.append(round(float(agg(found)), 6))
    got = dense(spec_of(lookup(combiner=combiner)), {"kv_cate": kv, "cate": keys})
    np.testing.assert_allclose(got, want, atol=1e-5)
