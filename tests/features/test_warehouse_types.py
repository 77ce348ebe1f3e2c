"""Column types a warehouse export brings, read by FG as the types recpipe generates: DECIMAL prices (ODPS, Hive),
INT32 ids, LARGE_STRING and dictionary-encoded text, BOOLEAN and numeric-text labels. FG's output must not
depend on which of them a column has, and the schema check accepts them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.data.types import DataError
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.schema_check import schema_problems

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "din_taobao_small.yaml"


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    out = tmp_path_factory.mktemp("taobao")
    generate("taobao", rows=400, out=out)
    import pyarrow.parquet as pq

    t = pq.read_table(out)
    # Prices with cents, a few null, as a DECIMAL(12, 2) column holds them exactly.
    price = pc.divide(pc.round(pc.multiply(t.column("price"), 100.0)), 100.0)
    price = pa.array(np.where(np.arange(t.num_rows) % 37 == 0, None, price.to_numpy(zero_copy_only=False)))
    return t.set_column(t.schema.get_field_index("price"), "price", price)


def _cast(column: str, to: pa.DataType) -> Callable[[pa.Table], pa.Table]:
    return lambda t: t.set_column(t.schema.get_field_index(column), column, pc.cast(t.column(column), to))


def _dictionary(column: str) -> Callable[[pa.Table], pa.Table]:
    return lambda t: t.set_column(
        t.schema.get_field_index(column), column, pc.dictionary_encode(t.column(column))
    )


FORMS = {
    "DECIMAL(12, 2) price": _cast("price", pa.decimal128(12, 2)),
    "DECIMAL(38, 18) price": _cast("price", pa.decimal128(38, 18)),
    "INT32 ids": lambda t: _cast("adgroup_id", pa.int32())(_cast("user_id", pa.int32())(t)),
    "DECIMAL(20, 0) ids": _cast("cate_id", pa.decimal128(20, 0)),
    "LARGE_STRING history and pid": lambda t: _cast("click_50_seq", pa.large_string())(
        _cast("pid", pa.large_string())(t)
    ),
    "dictionary-encoded pid": _dictionary("pid"),
    "BOOLEAN label": _cast("clk", pa.bool_()),
    "numeric-text label": _cast("clk", pa.string()),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_fg_reads_each_warehouse_type_as_the_generated_one(rows: pa.Table, form: str) -> None:
    spec = build_feature_spec(load_config(CONFIG))
    table = FORMS[form](rows)
    assert schema_problems(spec, table.schema) == []
    want, got = FeatureGenerator(spec)(rows), FeatureGenerator(spec)(table)
    np.testing.assert_array_equal(got.dense, want.dense)
    np.testing.assert_array_equal(got.labels, want.labels)
    for g, w, gl, wl in zip(got.values, want.values, got.lengths, want.lengths, strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(gl, wl)


def test_the_registered_input_example_holds_decimals_as_json_numbers(rows: pa.Table, tmp_path: Path) -> None:
    """register stores two request rows with the model, which MLflow writes as JSON: a DECIMAL column of the eval
    split comes out as the numbers a client sends (a Decimal failed the register step)."""
    import json

    import pyarrow.parquet as pq

    from recpipe.stages.register import _example

    spec = build_feature_spec(load_config(CONFIG))
    table = FORMS["DECIMAL(20, 0) ids"](FORMS["DECIMAL(12, 2) price"](rows))
    pq.write_table(table, tmp_path / "eval.parquet")
    example = _example(str(tmp_path / "eval.parquet"), spec)
    assert str(example["price"].dtype) == "float64" and str(example["cate_id"].dtype) == "int64"
    assert rows.column("price")[0].as_py() is None and np.isnan(example["price"][0])  # a null price: missing
    assert example["price"][1] == rows.column("price")[1].as_py()
    assert example["cate_id"].tolist() == rows.column("cate_id").to_pylist()[:2]
    json.dumps(example.to_dict(orient="split"))


def _as_items(history: pa.ChunkedArray) -> pa.Array:
    """The history text as a list column of items (an empty history an empty list, a null one null)."""
    h = history.combine_chunks()
    empty = pc.fill_null(pc.equal(h, ""), False)
    return pc.if_else(empty, pa.scalar([], pa.list_(pa.string())), pc.split_pattern(h, "|"))


def _nest(items: pa.Array, value_type: pa.DataType) -> pa.Array:
    """Each item split into its sub-values, cast to ``value_type``."""
    subs = pc.split_pattern(pc.list_flatten(items), "\x03")
    if value_type != pa.string():  # an empty sub-value is a null number
        values = pc.list_flatten(subs)
        values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values).cast(value_type)
        subs = pa.ListArray.from_arrays(subs.offsets, values)
    lengths = pc.fill_null(pc.list_value_length(items), 0).to_numpy(zero_copy_only=False)
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))), pa.int32())
    return pa.ListArray.from_arrays(offsets, subs, mask=pc.is_null(items))


def _structs(items: pa.Array) -> pa.Array:
    """Each item as a struct of its sub-values by name, as Spark's ``collect_list(struct(...))`` writes them:
    fields in another order than the config's, ids as integers, and a field the model does not read."""
    nested = _nest(items, pa.int64())
    flat = pc.list_flatten(nested)
    field = lambda i: pc.list_element(flat, i)  # noqa: E731
    structs = pa.StructArray.from_arrays(
        [field(2), field(0), pa.array(["x"] * len(flat)), field(1)],
        names=["brand", "adgroup_id", "shop", "cate_id"],
    )
    return pa.ListArray.from_arrays(nested.offsets, structs, mask=pc.is_null(nested))


HISTORY_FORMS = {
    "items as text": lambda h: _as_items(h),
    "items as large_list": lambda h: _as_items(h).cast(pa.large_list(pa.string())),
    "items of sub-value text": lambda h: _nest(_as_items(h), pa.string()),
    "items of integer sub-values (ODPS ARRAY<ARRAY<BIGINT>>)": lambda h: _nest(_as_items(h), pa.int64()),
    "items as structs of named sub-values (ARRAY<STRUCT<...>>)": lambda h: _structs(_as_items(h)),
}


@pytest.mark.parametrize("form", list(HISTORY_FORMS))
def test_a_history_as_a_list_column_reads_as_its_text(rows: pa.Table, form: str) -> None:
    """Histories stored as ARRAY columns (Parquet lists, ODPS ARRAY, JSON arrays in a request) read as the
    ``|`` / ``\\x03`` text they stand for."""
    spec = build_feature_spec(load_config(CONFIG))
    history = rows.column("click_50_seq")
    assert pc.sum(pc.equal(history, "")).as_py() > 0  # empty histories among them
    rows = rows.set_column(rows.schema.get_field_index("click_50_seq"), "click_50_seq",
                           pa.array(np.where(np.arange(rows.num_rows) == 3, None, history.to_numpy(zero_copy_only=False))))  # fmt: skip
    listed = rows.set_column(
        rows.schema.get_field_index("click_50_seq"),
        "click_50_seq",
        HISTORY_FORMS[form](rows.column("click_50_seq")),
    )
    assert schema_problems(spec, listed.schema) == []
    for start in (0, 7):  # a slice: offsets that do not start at 0
        want, got = FeatureGenerator(spec)(rows.slice(start)), FeatureGenerator(spec)(listed.slice(start))
        for g, w, gl, wl in zip(got.values, want.values, got.lengths, want.lengths, strict=True):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(gl, wl)


def test_history_text_of_items_sub_values_and_nulls() -> None:
    from recpipe.features.raw import history_text

    arr = pa.array([[[11, 3], None, [12, None]], [], None, [[7]]], pa.list_(pa.list_(pa.int64())))
    assert history_text(arr, "|", "\x03", "h").to_pylist() == ["11\x033||12\x03", "", None, "7"]
    assert history_text(pa.array([["a", None, "b"]]), ";", "#", "h").to_pylist() == ["a;;b"]
    assert history_text(pa.array([[1.5, 2.0]]), "|", "\x03", "h").to_pylist() == ["1.5|2"]
    structs = pa.array([[{"id": 1, "cate": 2}, None, {"id": 3, "cate": None}], None])
    assert history_text(structs, "|", "\x03", "h", ("id", "cate")).to_pylist() == ["1\x032||3\x03", None]
    with pytest.raises(
        DataError, match=r"column 'h': a history's struct items .* \['id', 'cate'\], not \['brand'\]"
    ):
        history_text(structs, "|", "\x03", "h", ("id", "brand"))
    with pytest.raises(DataError, match=r"column 'h': a history as a list column .* got list<item: map"):
        history_text(pa.array([[[("a", 1)]]], pa.list_(pa.map_(pa.string(), pa.int64()))), "|", "\x03", "h")


def test_a_day_written_by_pandas_reads_as_the_generated_rows(rows: pa.Table, tmp_path: Path) -> None:
    """What ``df[mask].to_parquet(f"dt={day}/part.parquet")`` leaves: integer id columns with nulls as float64
    (NaN), the frame's index as ``__index_level_0__`` and ``dt`` in the file as well as in the folder's name. The
    schema check refused the float ids ("expected an integer or string column for ids, got double"); FG reads
    integral floats as the ids they were, NaN as missing."""
    import pyarrow.parquet as pq

    from recpipe.data.sources import open_source
    from recpipe.features.schema_check import check_source

    spec = build_feature_spec(load_config(CONFIG))
    nulled = np.arange(rows.num_rows) % 11 == 3
    for column in ("brand", "cate_id", "user_id"):
        ids = rows.column(column).to_numpy()
        rows = rows.set_column(rows.schema.get_field_index(column), column, pa.array(ids, mask=nulled))
    frame = rows.to_pandas()
    assert str(frame["brand"].dtype) == "float64"  # pandas' integers with nulls
    frame = frame[frame.index % 5 != 0]  # a filtered frame keeps its index: written as a column
    frame["dt"] = "20260101"
    (tmp_path / "dt=20260101").mkdir()
    frame.to_parquet(tmp_path / "dt=20260101" / "part.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "dt=20260101" / "part.parquet").names

    check_source(spec, str(tmp_path), partitions="latest")
    read = pa.Table.from_batches(
        [b.batch for b in open_source(str(tmp_path), partitions="latest").iter_batches()]
    )
    want = FeatureGenerator(spec)(rows.filter(pa.array(np.arange(rows.num_rows) % 5 != 0)))
    got = FeatureGenerator(spec)(read)
    np.testing.assert_array_equal(got.dense, want.dense)
    np.testing.assert_array_equal(got.labels, want.labels)
    for g, w, gl, wl in zip(got.values, want.values, got.lengths, want.lengths, strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(gl, wl)


def test_a_float_id_past_2_53_is_a_bad_id_not_a_nearby_one(rows: pa.Table) -> None:
    """float64 holds every integer up to 2**53 only: a float id past it may have lost digits (pandas' float64 of
    the int64 id 2**55 + 1 is 2**55), so it is not taken as an integer (it was read as the id 2**55, another id
    than the one the warehouse holds); a bucketed id names the row."""
    spec = build_feature_spec(load_config(CONFIG))
    brand = rows.column("brand").to_numpy().astype(np.float64)
    brand[7] = float(2**55 + 1)
    table = rows.set_column(rows.schema.get_field_index("brand"), "brand", pa.array(brand))
    assert schema_problems(spec, table.schema) == []
    with pytest.raises(DataError, match=r"row 7, column 'brand'.*got '3\.60287970189639\d*e\+16'"):
        FeatureGenerator(spec)(table)
