"""One user × N candidates (``recpipe.features.tile``): the context FG'd once and broadcast gives the FG output of
the full rows, for context-only keys, candidate-only keys and keys crossing both; a probably-mistaken context
is refused, naming why."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from kind_rows import spec_of

from recpipe.data.types import DataError
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.tile import TiledFG, context_table

FEATURES = [
    {"kind": "id", "name": "user_id", "num_buckets": 1000},
    {"kind": "id", "name": "tags", "hash_bucket_size": 50},  # a user's multi-value tags, "a\x1db"
    {"kind": "raw", "name": "age"},  # a user's dense value
    {"kind": "id", "name": "item_id", "num_buckets": 1000},
    {"kind": "raw", "name": "price"},
    {"kind": "combo", "name": "tag_x_item", "columns": ["tags", "item_id"], "hash_bucket_size": 100},
]
USER = {"user_id": 7, "tags": "a\x1db\x1dc", "age": 31.5}


def _candidates(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    price = rng.uniform(0, 9, n).round(2).tolist()
    price[1] = None  # a missing value in a candidate column
    return pa.table({"item_id": rng.integers(0, 1000, n), "price": price})


def _full(context: dict, rows: pa.Table) -> pa.Table:
    for k, v in context.items():
        rows = rows.append_column(k, pa.array([v] * rows.num_rows))
    return rows


def _same(a: FGOutput, b: FGOutput) -> None:
    np.testing.assert_array_equal(a.dense, b.dense)
    for x, y in zip(a.values + a.lengths, b.values + b.lengths, strict=True):
        np.testing.assert_array_equal(x, y)
        assert x.dtype == y.dtype


def test_the_tiled_context_gives_the_full_rows_fg_output() -> None:
    spec = spec_of(FEATURES)
    fg = FeatureGenerator(spec, with_labels=False)
    rows = _candidates(40)
    want = fg(_full(USER, rows))
    got = TiledFG(fg)(context_table(USER, spec, rows.column_names), rows)
    _same(got, want)
    tags = spec.sparse_keys().index("tags")
    assert got.lengths[tags].tolist() == [3] * 40  # the context's three tags in every row
    # A context of JSON text reads the same; an empty context is the rows alone.
    _same(
        TiledFG(fg)(
            context_table('{"user_id": 7, "tags": "a\\u001db\\u001dc", "age": 31.5}', spec, []), rows
        ),
        want,
    )
    _same(TiledFG(fg)(context_table({}, spec, rows.column_names), rows), fg(rows))
    # No candidates: no rows out, the context still read.
    assert TiledFG(fg)(context_table(USER, spec, []), rows.slice(0, 0)).dense.shape == (0, 2)


def test_a_bad_context_value_is_named_as_the_contexts() -> None:
    spec = spec_of(FEATURES)
    fg = FeatureGenerator(spec, with_labels=False)
    rows = _candidates(4)
    with pytest.raises(DataError, match=r"params.context, row 0, column 'user_id'.*'not-an-id'"):
        TiledFG(fg)(context_table({"user_id": "not-an-id"}, spec, rows.column_names), rows)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            '{"user_id": 7, "userid": 8}',
            r"\['userid'\] is no input column of the model; expected some of \['user_id'",
        ),
        ('{"user_id": 7, "item_id": 3}', r"\['item_id'\] also in the rows"),
        ("[7, 8]", r"expected a JSON object of column → value .* got list"),
        ('"user_id"', r"expected a JSON object .* got str"),
        ("{user_id: 7}", r"params.context: not JSON"),
        (
            '{"user_id": [7, 8]}',
            r"column 'user_id' holds list '\[7, 8\]'; the context holds one value per column",
        ),
        ('{"user_id": 7, "user_id": 8}', r"column 'user_id' is given twice"),
        ('{"label": 1}', r"\['label'\] is no input column"),  # a label is not an input at serving
    ],
)
def test_a_probably_mistaken_context_is_refused(context: str, message: str) -> None:
    spec = spec_of(FEATURES)
    with pytest.raises(DataError, match=message):
        context_table(context, spec, ["item_id", "price"])


# A user's weighted tags and click history (a sequence of two sub-features) beside the candidate's item.
SPLIT_FEATURES = [
    *FEATURES,
    {"kind": "id", "name": "wtags", "num_buckets": 100, "weighted": True},
    {"kind": "sequence", "name": "clicks", "sub_features": [
        {"name": "item_id", "num_buckets": 1000}, {"name": "cate", "num_buckets": 50}]},
]  # fmt: skip
SPLIT_USER = {**USER, "wtags": "3:0.5\x1d9:2.0", "clicks": "5\x031|8\x032|13\x031"}


def test_split_fgs_the_context_keys_on_the_context_row_only() -> None:
    """``TiledFG.split``: the keys reading only context columns are FG'd on the one context row and not on the
    candidates (their ids empty, lengths and dense columns zeros there); the rest on the candidates; broadcast
    (``tiled()``) they are the full rows' FG output."""
    spec = spec_of(SPLIT_FEATURES)
    fg = FeatureGenerator(spec, with_labels=False)
    rows = _candidates(30)
    split = TiledFG(fg).split(context_table(SPLIT_USER, spec, rows.column_names), rows)
    want = fg(_full(SPLIT_USER, rows))
    _same(split.tiled(), want)
    keys = spec.sparse_keys()
    context_keys = {
        "user_id",
        "tags",
        "wtags",
        "wtags__weights",
        *[k for k in keys if k.startswith("clicks__")],
    }
    assert {k for k, once in zip(keys, split.once_sparse) if once} == context_keys
    assert split.one is not None and split.one.num_rows == 1 and split.num_rows == 30
    # The context row: only the keys reading a context column (the candidate's item id is not computed there).
    assert split.one.values[keys.index("item_id")].size == 0
    assert split.one.values[keys.index("user_id")].tolist() == [7]
    for k, key in enumerate(keys):
        if key in context_keys:  # not computed on the candidates
            assert split.rows.values[k].size == 0 and not split.rows.lengths[k].any(), key
        else:  # the candidate's own and the cross (tags x item): computed on the candidates, as in the full rows
            np.testing.assert_array_equal(split.rows.values[k], want.values[k])
    age = spec.dense_names().index("age")
    assert split.once_dense[age] and not split.rows.dense[:, age].any()
    np.testing.assert_array_equal(split.tiled_dense(), want.dense)


def test_fg_skip_leaves_the_other_keys_as_they_are() -> None:
    """``FeatureGenerator(..., skip=...)``: a skipped history skips all its sub-features, a skipped weighted id its
    weights key; every key not skipped is what FG computes without ``skip``."""
    spec = spec_of(SPLIT_FEATURES)
    fg = FeatureGenerator(spec, with_labels=False)
    table = _full(SPLIT_USER, _candidates(12))
    want = fg(table)
    keys = spec.sparse_keys()
    skipped = {"wtags", *[k for k in keys if k.startswith("clicks__")]}
    weights = [f.name for f in spec.sparse if f.weights_of == "wtags"]
    assert weights == ["wtags__weights"]
    got = fg(table, skip=frozenset(skipped | {"age"}))
    for k, key in enumerate(keys):
        if key in skipped or key in weights:
            assert got.values[k].size == 0 and got.lengths[k].tolist() == [0] * 12, key
        else:
            np.testing.assert_array_equal(got.values[k], want.values[k])
            np.testing.assert_array_equal(got.lengths[k], want.lengths[k])
    age = spec.dense_names().index("age")
    assert not got.dense[:, age].any()
    np.testing.assert_array_equal(np.delete(got.dense, age, 1), np.delete(want.dense, age, 1))
