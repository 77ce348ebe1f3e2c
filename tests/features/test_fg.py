"""Vectorized FG equals the per-row reference, including every bad-input case under the skip policy."""

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rowwise import rowwise_fg

from recpipe.batch import to_batch
from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.data.types import DataError
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.kinds.sequence import _sequence_fast


@pytest.fixture(scope="module")
def taobao_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("taobao")
    generate("taobao", rows=3000, out=out, seed=3, chunk_rows=3000)
    return pq.read_table(out).to_pylist()


@pytest.fixture(scope="module")
def din_spec():
    return build_feature_spec(load_config("configs/din_taobao_small.yaml"))


def _assert_same(a, b):
    assert a.num_rows == b.num_rows
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.dense, b.dense, rtol=1e-6)
    for k, (va, vb, la, lb) in enumerate(zip(a.values, b.values, a.lengths, b.lengths)):
        np.testing.assert_array_equal(la, lb, err_msg=f"lengths of key {k}")
        np.testing.assert_array_equal(va, vb, err_msg=f"values of key {k}")


BAD = {
    # row index: (column, value) — each a different bad-input case
    5: ("user_id", -7),  # negative id
    11: ("price", float("inf")),  # inf in a raw feature
    17: ("clk", 2),  # label not 0/1
    23: ("clk", None),  # missing label
    29: ("click_50_seq", "1\x032|4\x035\x036"),  # malformed \x03 group
    31: ("click_50_seq", "abc\x031\x032"),  # text where an id is expected
    37: ("click_50_seq", "99999999999999999999\x031\x032"),  # overflowing id
    41: ("click_50_seq", "1\x032\x033||4\x035\x036"),  # empty item between delimiters
    43: ("user_id", 10**18),  # an integer target id as large as histories refuse
}
EDGE = {
    3: ("click_50_seq", ""),  # empty history: zero items, not an error
    7: ("click_50_seq", "|".join(f"{i}\x03{i}\x03{i}" for i in range(150))),  # longer than max: truncated
    13: ("brand", None),  # missing id: absent
    19: ("price", None),  # missing raw: default
    9: ("price", float("nan")),  # NaN is a missing value (the raw-value contract): default
}


def _inject(rows, cases):
    rows = [dict(r) for r in rows]
    for i, (col, v) in cases.items():
        rows[i][col] = v
    return rows


def test_vectorized_equals_rowwise_with_every_bad_case_skipped(taobao_rows, din_spec):
    rows = _inject(taobao_rows, {**BAD, **EDGE})
    table = pa.Table.from_pylist(rows)
    fg = FeatureGenerator(din_spec, on_bad_row="skip")
    got = fg(table, file="gen.parquet")
    want, skipped = rowwise_fg(din_spec, table)
    _assert_same(got, want)
    assert skipped == len(BAD)
    st = fg.stats
    assert (st.rows_read, st.rows_skipped, st.rows_emitted) == (3000, len(BAD), 3000 - len(BAD))
    assert st.rows_read == st.rows_emitted + st.rows_skipped
    assert st.truncated_histories >= 1
    assert st.skipped_by_column == {"user_id": 2, "price": 1, "clk": 2, "click_50_seq": 4}


def test_text_in_numeric_columns_string_typed(taobao_rows, din_spec):
    rows = _inject(taobao_rows[:200], {})
    for r in rows:
        r["price"] = None if r["price"] is None else repr(r["price"])
        r["adgroup_id"] = str(r["adgroup_id"])
    rows[4]["price"] = "abc"
    rows[8]["adgroup_id"] = "12x"
    table = pa.Table.from_pylist(rows)
    got = FeatureGenerator(din_spec, on_bad_row="skip")(table)
    want, skipped = rowwise_fg(din_spec, table)
    _assert_same(got, want)
    assert skipped == 2
    with pytest.raises(BadRowError) as e:
        FeatureGenerator(din_spec)(table, file="t.csv", first_row=1000)
    assert (e.value.file, e.value.row, e.value.column) == ("t.csv", 1004, "price")
    assert "t.csv, row 1004, column 'price': expected a finite number, got 'abc'" in str(e.value)


@pytest.mark.parametrize("row", sorted(BAD))
def test_each_bad_case_is_a_clear_error(taobao_rows, din_spec, row):
    col, _ = BAD[row]
    table = pa.Table.from_pylist(_inject(taobao_rows[:60], {row: BAD[row]}))
    with pytest.raises(BadRowError) as e:
        FeatureGenerator(din_spec)(table, file="part-00007.parquet", first_row=500)
    assert e.value.row == 500 + row and e.value.column == col and e.value.file == "part-00007.parquet"
    assert "expected" in str(e.value)


def test_edge_cases_are_defined_outcomes(taobao_rows, din_spec):
    table = pa.Table.from_pylist(_inject(taobao_rows[:20], EDGE))
    out = FeatureGenerator(din_spec)(table)
    keys = din_spec.sparse_keys()
    seq = out.lengths[keys.index("click_50_seq__cate_id")]
    assert seq[3] == 0 and seq[7] == 100
    assert out.lengths[keys.index("brand")][13] == 0
    # price null -> default 0.0 -> bucket 0
    price_vals = out.values[keys.index("price")]
    assert price_vals[19] == 0


def test_column_level_errors(taobao_rows, din_spec):
    table = pa.Table.from_pylist(taobao_rows[:10]).drop_columns(["pid"])
    with pytest.raises(DataError, match=r"f\.parquet: missing columns \['pid'\]"):
        FeatureGenerator(din_spec)(table, file="f.parquet")
    table = pa.Table.from_pylist(taobao_rows[:10])
    table = table.set_column(
        table.schema.get_field_index("click_50_seq"), "click_50_seq", pa.array(range(10))
    )
    with pytest.raises(DataError, match="click_50_seq.*expected a string column"):
        FeatureGenerator(din_spec)(table)
    # A column FG cannot read at all is named with its file, as every other FG error is.
    with pytest.raises(DataError, match=r"^f\.parquet: column 'click_50_seq': expected a string column"):
        FeatureGenerator(din_spec)(table, file="f.parquet")


def test_empty_batch(taobao_rows, din_spec):
    table = pa.Table.from_pylist(taobao_rows[:1]).slice(0, 0)
    out = FeatureGenerator(din_spec)(table)
    assert out.num_rows == 0
    b = to_batch(out, din_spec.sparse_keys())
    assert b.dense.shape == (0, 0) and b.labels.shape == (0,)


def test_to_batch_is_jagged(taobao_rows, din_spec):
    rows = _inject(
        taobao_rows[:4], {0: ("click_50_seq", "1\x032\x033|4\x035\x036|7\x038\x039"), 1: ("click_50_seq", "")}
    )
    b = to_batch(FeatureGenerator(din_spec)(pa.Table.from_pylist(rows)), din_spec.sparse_keys())
    assert b.sparse.keys() == din_spec.sparse_keys()
    jt = b.sparse["click_50_seq__cate_id"]
    assert jt.lengths()[:2].tolist() == [3, 0]
    assert jt.values()[:3].tolist() == [2, 5, 8]  # a 3-item history is 3 values, most recent first
    assert b.labels.dtype == b.dense.dtype == np.float32 or str(b.labels.dtype) == "torch.float32"


def test_criteo_dense_log_and_hash(tmp_path):
    generate("criteo", rows=500, out=tmp_path, seed=1, chunk_rows=500)
    spec = build_feature_spec(load_config("configs/dlrm_criteo_small.yaml"))
    table = pq.read_table(tmp_path)
    got = FeatureGenerator(spec, on_bad_row="skip")(table)
    want, skipped = rowwise_fg(spec, table)
    _assert_same(got, want)
    rows = table.to_pylist()
    i1 = rows[0]["I1"]
    expected = math.log((0.0 if i1 is None else i1) + 3.0)
    assert got.dense[0, 0] == pytest.approx(expected, rel=1e-6) or skipped


def test_clean_histories_take_the_one_pass_path_and_equal_the_reference(taobao_rows, din_spec):
    table = pa.Table.from_pylist(taobao_rows)
    fg = FeatureGenerator(din_spec)
    batch = table.combine_chunks().to_batches()[0]
    seq = din_spec.sequences[0]
    feats = [din_spec.feature(k) for k in seq.sub_features]
    assert _sequence_fast(batch.column(seq.column), seq, feats, batch.num_rows) is not None
    want, skipped = rowwise_fg(din_spec, table)
    assert skipped == 0
    _assert_same(fg(table), want)
    # A sliced batch (non-zero array offset) takes the same path with the same result.
    part = table.slice(1000, 700)
    _assert_same(fg(part), rowwise_fg(din_spec, part)[0])


def test_histories_without_any_item_take_the_one_pass_path_and_equal_the_reference(taobao_rows, din_spec):
    seq = din_spec.sequences[0]
    rows = [{**r, seq.column: [None, ""][i % 2]} for i, r in enumerate(taobao_rows[:6])]
    table = pa.Table.from_pylist(rows)
    feats = [din_spec.feature(k) for k in seq.sub_features]
    fast = _sequence_fast(pa.array([None, "", None], pa.string()), seq, feats, 3)
    assert fast is not None and fast[1].tolist() == [0, 0, 0] and all(v.dtype == np.int64 for v in fast[0])
    got = FeatureGenerator(din_spec)(table)
    _assert_same(got, rowwise_fg(din_spec, table)[0])
    keys = din_spec.sparse_keys()
    for k in seq.sub_features:
        assert got.lengths[keys.index(k)].tolist() == [0] * 6 and got.values[keys.index(k)].size == 0


def test_generated_criteo_has_no_bad_rows_for_the_shipped_config(tmp_path):
    generate("criteo", rows=3000, out=tmp_path, seed=0, chunk_rows=3000)
    spec = build_feature_spec(load_config("configs/dlrm_criteo_small.yaml"))
    fg = FeatureGenerator(spec)  # on_bad_row="error": every generated row must pass log(x+3)
    out = fg(pq.read_table(tmp_path))
    assert out.num_rows == 3000 and fg.stats.rows_skipped == 0
