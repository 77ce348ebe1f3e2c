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
