"""Kind ``combo``: TorchEasyRec's combo_feature examples (the cartesian product of multi-value columns, the
crossed text ``"ua_ia"``, the default replacing the whole cross), hashing, vocabularies, the raw-value contract,
fitting and the fg.json round trip."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kind_rows import config, every_representation, fg, key, same, spec_of

from recpipe.config import ConfigError
from recpipe.data.sources import open_source
from recpipe.features.build import build_feature_spec
from recpipe.features.fit import fit_feature_spec
from recpipe.features.hashing import fnv1a64_py
from recpipe.features.schema_check import schema_problems
from recpipe.features.spec import FeatureSpec

# tzrec/features/combo_feature_test.py, test_combo_feature_with_vocab_list: its input rows.
UID = ["ua\x1dub", "ua\x1dub", "ua\x1dub", "ua", "ua", "ua", None, "", ""]
IID = ["ia\x1dib", "ia", "", "ia\x1dib", "ib", "", "ia\x01dib", "ia", None]


@pytest.mark.parametrize(
    ("default", "values", "lengths"),
    [
        ("", [2, 3, 4, 1, 2, 4, 2, 3, 3], [4, 2, 0, 2, 1, 0, 0, 0, 0]),
        ("xyz", [2, 3, 4, 1, 2, 4, 0, 2, 3, 3, 0, 0, 0, 0], [4, 2, 1, 2, 1, 1, 1, 1, 1]),
    ],
)
def test_torcheasyrec_vocab_list_example(default, values, lengths) -> None:
    # TorchEasyRec's ids without default_bucketize_value: [default_value, "<OOV>", *vocab_list] by position, the
    # unknown 1 (tzrec/features/feature.py, vocab_list). The same list with default_bucketize_value 1 is exactly
    # that mapping, as its faq.md writes it.
    vocab = [default, "<OOV>", "ua_ia", "ua_ib", "ub_ia"]
    f = {"kind": "combo", "name": "combo_feat", "columns": ["uid_str", "iid_str"], "vocab_list": vocab}
    spec = spec_of([{**f, "default_bucketize_value": 1, "default_value": default or None}])
    out = fg(spec, {"uid_str": UID, "iid_str": IID})
    assert key(out, spec, "combo_feat") == (values, lengths)


def _hash(text: str, size: int = 100) -> int:
    return fnv1a64_py(text) % size


def test_torcheasyrec_hash_example_lengths_and_the_crossed_text() -> None:
    # test_combo_feature_with_hash_bucket_size's rows and lengths; the values are recpipe's FNV-1a 64 of the
    # crossed text (TorchEasyRec's pyfg hashes with its own function).
    uid = ["ua\x1dub", "uc\x1dud", "uee\x1duf", "ug", "uh", "uj", "", None, ""]
    iid = ["ia\x1dib", "ic", "", "id\x1die", "if", None, "ig\x01dih", "ij", ""]
    f = {"kind": "combo", "name": "c", "columns": ["uid_str", "iid_str"], "hash_bucket_size": 100}
    spec = spec_of([f])
    values, lengths = key(fg(spec, {"uid_str": uid, "iid_str": iid}), spec, "c")
    assert lengths == [4, 2, 0, 2, 1, 0, 0, 0, 0]
    crossed = ["ua_ia", "ua_ib", "ub_ia", "ub_ib", "uc_ic", "ud_ic", "ug_id", "ug_ie", "uh_if"]
    assert values == [_hash(t) for t in crossed]
    with_default = spec_of([{**f, "default_value": "xyz"}])
    assert key(fg(with_default, {"uid_str": uid, "iid_str": iid}), with_default, "c")[1] == [
        4,
        2,
        1,
        2,
        1,
        1,
        1,
        1,
        1,
    ]


def test_three_columns_numbers_and_lists() -> None:
    f = {"kind": "combo", "name": "c", "columns": ["a", "b", "d"], "hash_bucket_size": 1000}
    spec = spec_of([f])
    rows = {"a": pa.array([1, 2]), "b": pa.array([["x", "y"], ["z"]]), "d": ["7\x1d8", "9"]}
    values, lengths = key(fg(spec, rows), spec, "c")
    assert lengths == [4, 1]
    assert values == [_hash(t, 1000) for t in ["1_x_7", "1_x_8", "1_y_7", "1_y_8", "2_z_9"]]
    # 12, "12" and 12.0 are one id, so one crossed text
    for a in (pa.array(["1", "2"]), pa.array([1.0, 2.0])):
        assert key(fg(spec, {**rows, "a": a}), spec, "c") == (values, lengths)


def test_value_dim_keeps_the_first_crossed_values() -> None:
    f = {"kind": "combo", "name": "c", "columns": ["a", "b"], "hash_bucket_size": 1000, "value_dim": 2}
    spec = spec_of([f])
    values, lengths = key(fg(spec, {"a": ["1\x1d2"], "b": ["x\x1dy"]}), spec, "c")
    assert (values, lengths) == ([_hash("1_x", 1000), _hash("1_y", 1000)], [2])


def test_config_refusals() -> None:
    base = {"kind": "combo", "name": "c", "columns": ["a", "b"], "hash_bucket_size": 10}
    with pytest.raises(ConfigError, match=r"features.0.columns: List should have at least 2 items"):
        config([{**base, "columns": ["a"]}])
    with pytest.raises(ConfigError, match="a combo feature has no num_buckets"):
        config([{**{k: v for k, v in base.items() if k != "hash_bucket_size"}, "num_buckets": 10}])
    with pytest.raises(ConfigError, match="give columns, not column"):
        config([{**base, "column": "a"}])
    with pytest.raises(ConfigError, match="name a column twice"):
        config([{**base, "columns": ["a", "a"]}])


def test_the_schema_check_names_every_input_column() -> None:
    spec = spec_of([{"kind": "combo", "name": "c", "columns": ["a", "b"], "hash_bucket_size": 10}])
    assert spec.input_columns() == ["a", "b", "label"]
    assert schema_problems(spec, pa.schema([("a", pa.string()), ("label", pa.int8())])) == [
        "missing columns ['b'] (read by feature 'c')"
    ]


def test_fg_json_round_trip(tmp_path: Path) -> None:
    f = {"kind": "combo", "name": "c", "columns": ["a", "b"], "hash_bucket_size": 10, "separator": "|"}
    spec = spec_of([f])
    saved = spec.save(tmp_path / "fg.json")
    entry = json.loads(saved.read_text())["sparse"][0]
    assert (entry["kind"], entry["column"], entry["inputs"], entry["params"]) == (
        "combo",
        "a",
        ["b"],
        {"separator": "|"},
    )
    loaded = FeatureSpec.load(saved)
    assert loaded == spec
    rows = {"a": ["1|2", None], "b": ["x", "y"]}
    assert key(fg(loaded, rows), loaded, "c") == key(fg(spec, rows), spec, "c")


def test_zch_settings_reach_the_spec() -> None:
    """A zch combo keeps its eviction interval and policy (combo_feature takes id_feature's zch block)."""
    f = {"kind": "combo", "name": "c", "columns": ["a", "b"], "hash_bucket_size": 64, "zch": True}
    f.update(zch_eviction_interval=3, zch_eviction_policy="lru", zch_decay_exponent=2.0)
    (table,) = spec_of([f]).tables()
    assert (
        table.zch_size,
        table.zch_eviction_interval,
        table.zch_eviction_policy,
        table.zch_decay_exponent,
    ) == (
        64,
        3,
        "lru",
        2.0,
    )


def test_min_freq_counts_crossed_values(tmp_path: Path) -> None:
    cfg = config([{"kind": "combo", "name": "c", "columns": ["a", "b"], "min_freq": 2}])
    table = pa.table({"a": ["1\x1d2", "1", "2", None], "b": ["x", "x", "y", "x"], "label": [0, 1, 0, 1]})
    pq.write_table(table, tmp_path / "t.parquet")
    spec = fit_feature_spec(cfg, open_source(str(tmp_path)))
    assert spec.feature("c").mapping.vocab == ["1_x"]


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config([{"kind": "combo", "name": "c", "columns": ["a", "b"], "hash_bucket_size": 1000}])
    rows = [
        {"a": "1\x1d2", "b": "x"},
        {"a": None, "b": "x"},
        {"a": "", "b": "y"},
        {"a": "3", "b": None},
        {"a": "4", "b": "z\x1dw"},
    ]
    out = every_representation(cfg, rows, {"a": pa.string(), "b": pa.string()}, tmp_path)
    spec = build_feature_spec(cfg)
    assert key(out, spec, "c")[1] == [2, 0, 0, 0, 2]
    lists = [
        {"a": [1, 2], "b": ["x"]},
        {"a": None, "b": ["x"]},
        {"a": [], "b": ["y"]},
        {"a": [3], "b": None},
        {"a": [4], "b": ["z", "w"]},
    ]
    types = {"a": pa.list_(pa.int64()), "b": pa.list_(pa.string())}
    same(out, every_representation(cfg, lists, types, tmp_path, csv=False), "list columns")
    # at serving, an absent column is all missing: no row has a crossed value
    assert key(fg(spec, {"a": ["1", "2", "3", "4", "5"]}), spec, "c") == ([], [0] * 5)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            *[st.one_of(st.none(), st.lists(st.sampled_from(["", "0", "7", "a", "bb"]), max_size=3))] * 3
        ),
        min_size=1,
        max_size=10,
    ),
    st.sampled_from([None, "d"]),
)
def test_the_vectorized_product_equals_itertools_product(rows, default) -> None:
    f = {
        "kind": "combo",
        "name": "c",
        "columns": ["a", "b", "d"],
        "hash_bucket_size": 97,
        "default_value": default,
    }
    spec = spec_of([f])
    want_values, want_lengths = [], []
    for r in rows:
        parts = [[p for p in (col or []) if p] for col in r]
        crossed = ["_".join(t) for t in itertools.product(*parts)] or ([default] if default else [])
        want_values += [_hash(t, 97) for t in crossed]
        want_lengths.append(len(crossed))
    columns = {
        c: pa.array([None if r[j] is None else "\x1d".join(r[j]) for r in rows], pa.string())
        for j, c in enumerate("abd")
    }
    assert key(fg(spec, columns), spec, "c") == (want_values, want_lengths)
