"""Kind ``bool_mask`` (TorchEasyRec's bool_mask_feature): the documented examples of feature.md
(BoolMaskFeature, written here from its table of inputs and outputs), the id mappings, the choices recpipe makes
where the docs are silent, bad rows, the raw-value contract, fg.json and a hypothesis check against a
row-by-row mask."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, every_representation, fg, ids, round_trip, spec_of

from recpipe.config import ConfigError
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.hashing import fnv1a64_py


def mask(**kw) -> dict:
    base = {"kind": "bool_mask", "name": "valid_clicks", "column": "click_items", "mask": "is_valid"}
    return {**base, **kw}


@pytest.mark.parametrize(
    ("values", "flags"),
    [
        # feature.md, BoolMaskFeature (separator ","): input, mask → the values kept before bucketize
        (pa.array(["123,456,90,80"]), pa.array(["true,false,true,false"])),
        (pa.array(["123,456,90,80"]), pa.array([[1, 0, 1, 0]])),
        (pa.array([[123, 456, 90, 80]]), pa.array([[1, 0, 1, 0]])),
        (pa.array([[123, 456, 90, 80]]), pa.array(["true,false,true,false"])),
    ],
)
def test_the_documented_examples(values: pa.Array, flags: pa.Array) -> None:
    # num_buckets 1000: an id is itself, so the ids are the values kept (the doc's [1, 3] is [123, 90] here).
    spec = spec_of(mask(separator=",", num_buckets=1000))
    assert ids(spec, {"click_items": values, "is_valid": flags}) == [[123, 90]]


def test_the_id_mappings() -> None:
    rows = {"click_items": ["a\x1db\x1dc", "c"], "is_valid": ["1\x1d0\x1d1", "TRUE"]}
    assert ids(spec_of(mask(hash_bucket_size=100)), rows) == [
        [fnv1a64_py("a") % 100, fnv1a64_py("c") % 100],
        [fnv1a64_py("c") % 100],
    ]
    assert ids(spec_of(mask(vocab_list=["c", "a"])), rows) == [[2, 1], [1]]
    bools = pa.array([[True, False, True], [False]])
    assert ids(spec_of(mask(vocab_list=["c", "a"])), {**rows, "is_valid": bools}) == [[2, 1], []]


def test_recpipes_choices_where_the_docs_are_silent() -> None:
    rows = {"click_items": ["1\x1d2", None, "3", "4\x1d5"], "is_valid": ["0\x1d0", "1", None, "1\x1d0"]}
    # A row that keeps nothing (all false, a missing column) has no id, or the id of default_value.
    assert ids(spec_of(mask(num_buckets=10)), rows) == [[], [], [], [4]]
    assert ids(spec_of(mask(num_buckets=10, default_value="0")), rows) == [[0], [0], [0], [4]]


def test_bad_rows_name_the_mask_column_and_what_was_expected() -> None:
    spec = spec_of(mask(num_buckets=10))
    with pytest.raises(BadRowError, match=r"row 1, column 'is_valid': expected mask items true/false or 1/0"):
        fg(spec, {"click_items": ["1\x1d2", "1\x1d2"], "is_valid": ["1\x1d0", "1"]})
    with pytest.raises(BadRowError, match=r"row 0, column 'is_valid': expected mask items"):
        fg(spec, {"click_items": ["1\x1d2"], "is_valid": ["yes\x1d0"]})
    with pytest.raises(BadRowError, match=r"row 0, column 'is_valid': expected mask items"):
        fg(spec, {"click_items": pa.array([[1, 2]]), "is_valid": pa.array([[2, 0]])})
    gen = FeatureGenerator(spec, on_bad_row="skip", with_labels=False)
    out = gen(pa.table({"click_items": ["1\x1d2", "1\x1d2", "3"], "is_valid": ["1\x1d0", "1", "1"]}))
    assert out.values[0].tolist() == [1, 3] and gen.stats.skipped_by_column == {"is_valid": 1}
    with pytest.raises(BadRowError, match=r"row 0, column 'click_items'"):
        fg(spec, {"click_items": ["x"], "is_valid": ["1"]})  # num_buckets takes integer ids


def test_configs_that_are_probably_mistakes_are_refused() -> None:
    with pytest.raises(ConfigError, match="exactly one id mapping is required"):
        config(mask())
    with pytest.raises(ConfigError, match="exactly one id mapping is required"):
        config(mask(num_buckets=10, hash_bucket_size=10))
    with pytest.raises(ConfigError, match="is the values column itself"):
        config(mask(num_buckets=10, mask="click_items"))


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(mask(num_buckets=100), {**mask(num_buckets=100, default_value="0"), "name": "with_default"})
    rows = [
        {"click_items": "12\x1d34", "is_valid": "true\x1dfalse"},
        {"click_items": None, "is_valid": "1"},
        {"click_items": "", "is_valid": "1"},
        {"click_items": "7", "is_valid": None},
        {"click_items": 7, "is_valid": 1},
        {"click_items": 7.0, "is_valid": 1.0},
    ]
    out = every_representation(cfg, rows, tmp_path)
    assert out.values[0].tolist() == [12, 7, 7] and out.lengths[0].tolist() == [1, 0, 0, 0, 1, 1]
    assert out.values[1].tolist() == [12, 0, 0, 0, 7, 7]
    # A column a request does not carry is all missing at serving: nothing kept.
    spec = spec_of(mask(num_buckets=100))
    assert ids(spec, {"click_items": ["1"]}) == [[]] and ids(spec, {"is_valid": ["1"]}) == [[]]


def test_fg_json_round_trip() -> None:
    rows = pa.table({"click_items": ["a\x1db", "c"], "is_valid": ["1\x1d1", "0"]})
    for kw in ({"hash_bucket_size": 10}, {"vocab_list": ["a", "c"], "default_value": "c"}):
        spec = spec_of(mask(**kw))
        (entry,) = spec.sparse
        assert entry.kind == "bool_mask" and entry.column == "click_items" and entry.inputs == ["is_valid"]
        round_trip(spec, rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(st.integers(0, 99), st.booleans()), max_size=5), min_size=1, max_size=8))
def test_matches_a_row_by_row_mask(rows) -> None:
    values = ["\x1d".join(str(v) for v, _ in r) for r in rows]
    flags = ["\x1d".join("true" if b else "false" for _, b in r) for r in rows]
    want = [[v for v, b in r if b] for r in rows]
    assert ids(spec_of(mask(num_buckets=100)), {"click_items": values, "is_valid": flags}) == want
