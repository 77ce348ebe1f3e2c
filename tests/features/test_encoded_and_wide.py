"""Pre-encoded input (``data.fg_encoded``: TorchEasyRec's ``fg_mode: FG_NONE``) and the WIDE group's keys in FG."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rowwise import rowwise_fg

from recpipe.config import parse_config
from recpipe.data.parquet import ParquetSource
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.fit import fit_feature_spec
from recpipe.features.hashing import zch_key_py
from recpipe.features.spec import FeatureSpec, FeatureSpecError


def _cfg(
    encoded: bool = True,
    extra_features: list | None = None,
    groups: list | None = None,
    model: dict | None = None,
):
    return parse_config(
        {
            "name": "enc",
            "data": {"label": "label", "fg_encoded": encoded},
            "features": [
                {"kind": "raw", "name": "int_0"},
                {"kind": "raw", "name": "int_1", "boundaries": [1.0, 10.0], "embedding_dim": 4},
                {"kind": "id", "name": "cat_0", "num_buckets": 5, "embedding_dim": 4},
                {"kind": "id", "name": "cat_1", "hash_bucket_size": 3, "embedding_dim": 4},
                *(extra_features or []),
            ],
            "feature_groups": groups
            or [
                {"name": "wide", "type": "wide", "features": ["cat_0", "cat_1", "int_1"]},
                {"name": "deep", "type": "deep", "features": ["int_0", "int_1", "cat_0", "cat_1"]},
            ],
            "model": model or {"type": "wide_and_deep", "deep": {"hidden_units": [4]}},
        }
    )


ROWS = pa.table(
    {
        "int_0": pa.array([3.5, None, 120.0, 0.0], pa.float64()),
        "int_1": pa.array([0, 2, 1, None], pa.int64()),  # bucket ids of [1, 10): 3 buckets
        "cat_0": pa.array([4, 0, None, 2], pa.int64()),
        "cat_1": pa.array(["2", "0", "1", None]),
        "label": pa.array([1, 0, 0, 1]),
    }
)


def test_encoded_columns_are_used_as_they_are() -> None:
    """TorchEasyRec's FG_NONE (``_parse_fg_encoded_sparse_feature_impl`` / ``..._dense_feature_impl``): ids
    cast to int64 and used as rows, no ``% num_buckets``; a null id is no id (``drop_null``); a bucketized raw
    feature's column holds its bucket; a dense value is used as it is (a null reads as the default, what FG
    writes for a missing value)."""
    spec = build_feature_spec(_cfg())
    assert spec.feature("cat_0").mapping.kind == "identity" and spec.feature("cat_0").mapping.size == 5
    out = FeatureGenerator(spec)(ROWS)
    keys = spec.sparse_keys()
    got = {k: (out.values[i].tolist(), out.lengths[i].tolist()) for i, k in enumerate(keys)}
    assert got["cat_0"] == ([4, 0, 2], [1, 1, 0, 1])
    assert got["cat_1"] == ([2, 0, 1], [1, 1, 1, 0])  # decimal text is an id too; not hashed
    assert got["int_1"] == ([0, 2, 1], [1, 1, 1, 0])
    np.testing.assert_array_equal(out.dense[:, 0], [3.5, 0.0, 120.0, 0.0])
    reference, skipped = rowwise_fg(spec, ROWS)
    assert skipped == 0
    for i in range(len(keys)):
        np.testing.assert_array_equal(out.values[i], reference.values[i], err_msg=keys[i])
        np.testing.assert_array_equal(out.lengths[i], reference.lengths[i], err_msg=keys[i])


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("cat_0", 5, r"a pre-encoded id in \[0, 5\)"),
        ("cat_0", -1, r"a pre-encoded id in \[0, 5\)"),
        ("cat_1", "7", r"a pre-encoded id in \[0, 3\)"),
        ("cat_1", "x1", r"a pre-encoded id in \[0, 3\)"),
        ("int_1", 3, r"a pre-encoded id in \[0, 3\)"),
    ],
)
def test_an_id_outside_the_table_is_a_bad_row(column, value, expected) -> None:
    """TorchEasyRec hands an encoded id to the embedding lookup unchecked; recpipe names the file, row
    (counted from the file's first row) and column, and ``skip`` drops and counts the row."""
    spec = build_feature_spec(_cfg())
    values = ROWS.column(column).to_pylist()
    values[2] = value
    rows = ROWS.set_column(ROWS.schema.get_field_index(column), column, pa.array(values, ROWS[column].type))
    with pytest.raises(
        BadRowError, match=rf"part-7.parquet, row 102, column '{column}': expected {expected}"
    ):
        FeatureGenerator(spec)(rows, file="part-7.parquet", first_row=100)
    fg = FeatureGenerator(spec, on_bad_row="skip")
    assert fg(rows).num_rows == 3 and fg.stats.skipped_by_column == {column: 1}


def test_what_encoded_input_cannot_describe_is_refused() -> None:
    """A vocabulary and quantiles to fit map raw values: nothing FG_NONE input can hold (pre-encoded
    sequences: tests/features/test_kind_sequence_numeric.py)."""
    vocab = {"kind": "id", "name": "v", "vocab_list": ["a"], "embedding_dim": 4}
    with pytest.raises(FeatureSpecError, match="feature 'v': pre-encoded input .* needs num_buckets"):
        build_feature_spec(_cfg(extra_features=[vocab]))
    quant = {"kind": "raw", "name": "q", "num_quantile_buckets": 4, "embedding_dim": 4}
    with pytest.raises(FeatureSpecError, match="'q': pre-encoded input holds bucket ids"):
        build_feature_spec(_cfg(extra_features=[quant]))
    seq = {"kind": "sequence", "name": "s", "sub_features": [{"name": "a", "vocab_list": ["x"]}]}
    with pytest.raises(FeatureSpecError, match="feature 'a': pre-encoded input .* needs num_buckets"):
        build_feature_spec(_cfg(extra_features=[seq]))


# A zch id, a zch history sub-feature sharing its table, and a zch combo: pre-encoded, each column holds the raw
# ids (FG's int64 output) the managed-collision modules remap.
ZCH_FEATURES = [
    {"kind": "id", "name": "uid", "hash_bucket_size": 4, "zch": True, "zch_size": 4, "default_value": "7",
     "zch_eviction_policy": "lfu", "embedding_dim": 4},
    {"kind": "combo", "name": "cross", "columns": ["cat_0", "cat_1"], "hash_bucket_size": 4, "zch": True,
     "embedding_dim": 4},
    {"kind": "sequence", "name": "seq", "sub_features": [
        {"name": "uid", "hash_bucket_size": 4, "zch": True, "zch_size": 4, "zch_eviction_policy": "lfu",
         "embedding_dim": 4, "embedding_name": "uid"}]},
]  # fmt: skip
ZCH_GROUPS = [
    {"name": "deep", "type": "deep", "features": ["int_0", "uid", "cross"]},
    {"name": "s", "type": "sequence", "features": ["uid", "seq__uid"]},
]
ZCH_DIN = {
    "type": "multi_tower_din",
    "towers": [{"group": "deep", "mlp": {"hidden_units": [4]}}],
    "din_towers": [{"group": "s", "attn_mlp": {"hidden_units": [4]}}],
    "final": {"hidden_units": [4]},
}
BIG = 2**63 - 2  # TorchEasyRec's zch FG writes hash % (2**63 - 1): ids up to 19 digits


def test_pre_encoded_zch_ids_are_the_raw_ids_the_zch_table_remaps() -> None:
    """TorchEasyRec's FG_NONE zch feature (``_parse_fg_encoded_sparse_feature_impl``, then ``mc_module``): its
    column's int64 ids, any of them (no table-range check), keyed as an integer raw id is under FG (so the
    keys match a model trained on raw ids); a null takes ``default_value``; a history sub-feature (its own
    column ``seq__uid``) and a combo's crossed ids alike; the fg.json keeps it."""
    spec = build_feature_spec(_cfg(True, ZCH_FEATURES, ZCH_GROUPS, ZCH_DIN))
    assert spec.feature("uid").mapping.kind == "identity" and spec.feature("uid").zch
    assert {t.name: t.num_embeddings for t in spec.tables()}["uid"] == 4
    rows = ROWS.append_column("uid", pa.array([9, None, BIG, 0], pa.int64()))
    rows = rows.append_column("cross", pa.array(["12\x1d5", "", None, str(BIG)]))
    rows = rows.append_column("seq__uid", pa.array(["9|3", "", str(BIG), "0"]))
    out = FeatureGenerator(spec)(rows)
    got = {k: (out.values[i].tolist(), out.lengths[i].tolist()) for i, k in enumerate(spec.sparse_keys())}
    keys = [zch_key_py(x) for x in (9, 7, BIG, 0)]
    assert got["uid"] == (keys, [1, 1, 1, 1])
    assert got["cross"] == ([zch_key_py(12), zch_key_py(5), zch_key_py(BIG)], [2, 0, 0, 1])
    assert got["seq__uid"] == ([zch_key_py(9), zch_key_py(3), zch_key_py(BIG), zch_key_py(0)], [2, 0, 1, 1])
    # the key of the raw id 9 under FG (num_buckets, raw input) is the pre-encoded id 9's
    raw = _cfg(False, [{**ZCH_FEATURES[0], "hash_bucket_size": None, "num_buckets": 4}])
    raw_out = FeatureGenerator(build_feature_spec(raw))(ROWS.append_column("uid", pa.array([9, None, 9, 0])))
    assert raw_out.values[build_feature_spec(raw).sparse_keys().index("uid")].tolist()[0] == keys[0]
    assert FeatureSpec.from_dict(spec.to_dict()).digest() == spec.digest()


@pytest.mark.parametrize(
    ("column", "value"), [("uid", -1), ("cross", "-3"), ("cross", str(2**63)), ("seq__uid", "x")]
)
def test_a_pre_encoded_zch_id_that_is_no_int64_is_a_bad_row(column, value) -> None:
    cfg = _cfg(True, ZCH_FEATURES, ZCH_GROUPS, ZCH_DIN)
    rows = ROWS.append_column("uid", pa.array([1, 2, 3, 4], pa.int64()))
    rows = rows.append_column("cross", pa.array(["1", "2", "3", "4"]))
    rows = rows.append_column("seq__uid", pa.array(["1", "2", "3", "4"]))
    values = rows.column(column).to_pylist()
    values[1] = value
    rows = rows.set_column(rows.schema.get_field_index(column), column, pa.array(values, rows[column].type))
    with pytest.raises(BadRowError, match=rf"row 1, column '{column}': expected a pre-encoded zch id"):
        FeatureGenerator(build_feature_spec(cfg))(rows)


def test_wide_keys_repeat_their_features_ids() -> None:
    """TorchEasyRec's WIDE group looks up the same ids in a second table (``<emb_name>_wide``): FG emits
    them under ``<feature>__wide`` (computed once), raw-mapped or encoded alike."""
    for encoded in (True, False):
        spec = build_feature_spec(_cfg(encoded))
        rows = ROWS if encoded else ROWS.set_column(1, "int_1", pa.array([0.5, 20.0, 5.0, None]))
        out = FeatureGenerator(spec)(rows)
        keys = spec.sparse_keys()
        assert spec.group("wide").sparse == ["cat_0__wide", "cat_1__wide", "int_1__wide"]
        for name in ("cat_0", "cat_1", "int_1"):
            a, b = keys.index(name), keys.index(f"{name}__wide")
            assert out.values[a].tolist() == out.values[b].tolist() and len(out.values[a])
            np.testing.assert_array_equal(out.lengths[a], out.lengths[b])
        tables = {t.name: t for t in spec.tables()}
        assert tables["int_1_wide"].num_embeddings == 3 and tables["int_1_wide"].embedding_dim == 4


def test_a_wide_group_takes_no_sequence_or_clashing_key() -> None:
    seq = {"kind": "sequence", "name": "s", "sub_features": [{"name": "a", "num_buckets": 3}]}
    groups = [
        {"name": "wide", "type": "wide", "features": ["s__a"]},
        {"name": "deep", "type": "deep", "features": ["cat_0"]},
    ]
    with pytest.raises(FeatureSpecError, match="feature 's__a' is a sequence sub-feature"):
        build_feature_spec(_cfg(False, [seq], groups))
    clash = {"kind": "id", "name": "x", "num_buckets": 3, "embedding_name": "cat_0_wide"}
    groups = [
        {"name": "wide", "type": "wide", "features": ["cat_0"]},
        {"name": "deep", "type": "deep", "features": ["x"]},
    ]
    with pytest.raises(FeatureSpecError, match=r"table 'cat_0_wide' is already used by \['x'\]"):
        build_feature_spec(_cfg(False, [clash], groups))


def test_fitted_features_in_a_wide_group_give_their_copy_the_fitted_mapping(tmp_path) -> None:
    """A vocabulary fitted from the rows (``min_freq``) and quantile boundaries are fitted once, for the
    feature; its ``__wide`` copy looks up its wide table with the same mapping (so the same rows)."""
    features = [
        {"kind": "id", "name": "v", "min_freq": 2, "embedding_dim": 4},
        {"kind": "raw", "name": "q", "num_quantile_buckets": 3, "embedding_dim": 4},
    ]
    groups = [
        {"name": "wide", "type": "wide", "features": ["v", "q"]},
        {"name": "deep", "type": "deep", "features": ["v", "q", "int_0"]},
    ]
    cfg = _cfg(False, features, groups)
    rows = pa.table(
        {
            "int_0": [1.0] * 6,
            "int_1": [0.5] * 6,
            "cat_0": [1] * 6,
            "cat_1": ["a"] * 6,
            "v": ["x", "x", "y", "y", "z", "x"],
            "q": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "label": [0, 1, 0, 1, 0, 1],
        }
    )
    pq.write_table(rows, tmp_path / "part-0.parquet")
    spec = fit_feature_spec(cfg, ParquetSource(str(tmp_path)))
    assert spec.feature("v").mapping.vocab == ["x", "y"]
    assert spec.feature("v__wide").mapping == spec.feature("v").mapping
    assert spec.feature("q").boundaries and spec.feature("q__wide").boundaries == spec.feature("q").boundaries
    tables = {t.name: t for t in spec.tables()}
    assert tables["v_wide"].num_embeddings == tables["v"].num_embeddings == 3
    out = FeatureGenerator(spec)(rows)
    keys = spec.sparse_keys()
    assert (
        out.values[keys.index("v__wide")].tolist()
        == out.values[keys.index("v")].tolist()
        == [1, 1, 2, 2, 0, 1]
    )
