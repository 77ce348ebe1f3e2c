"""The negative sampler: weighted draws that never hit the batch's positives, their log-Q, the table's checks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from recpipe.data.negative_sampler import ItemTable, NegativeSampler
from recpipe.data.types import DataError

TABLE = pa.table({"item_id": [10, 11, 12, 13], "weight": [1.0, 1.0, 2.0, 0.0], "cate_id": [1, 1, 2, 2]})


def test_draws_exclude_the_batch_and_follow_the_weights() -> None:
    items = ItemTable(TABLE, "item_id", ["item_id", "cate_id"])
    neg = NegativeSampler(items, num_sample=20_000, seed=0).sample(pa.array([10]))
    drawn = np.array(neg.attrs.column("item_id").to_pylist())
    assert neg.attrs.column_names == ["item_id", "cate_id"] and len(drawn) == 20_000
    assert not np.isin(drawn, [10, 13]).any()  # the positive and the zero-weight item
    # 11 : 12 = 1 : 2 among the items left
    assert (drawn == 12).mean() == pytest.approx(2 / 3, abs=0.01)
    np.testing.assert_allclose(np.exp(neg.log_q[drawn == 11]), 1 / 3)
    np.testing.assert_allclose(np.exp(neg.log_q[drawn == 12]), 2 / 3)
    assert neg.attrs.column("cate_id").to_pylist()[:5] == [{11: 1, 12: 2}[i] for i in drawn[:5]]


def test_same_seed_same_draws() -> None:
    items = ItemTable(TABLE, "item_id", ["cate_id"])
    a = NegativeSampler(items, 8, seed=3).sample(np.array([11]))
    b = NegativeSampler(items, 8, seed=3).sample(np.array([11]))
    assert a.rows.tolist() == b.rows.tolist()


def test_refusals() -> None:
    items = ItemTable(TABLE, "item_id", ["cate_id"])
    with pytest.raises(DataError, match="no negative can be drawn"):
        NegativeSampler(items, 2).sample(pa.array([10, 11, 12]))
    with pytest.raises(DataError, match=r"item 99 of the batch is not in the item table"):
        items.rows_of(pa.array([10, 99]))
    with pytest.raises(DataError, match=r"no column\(s\) \['brand'\]"):
        ItemTable(TABLE, "item_id", ["brand"])
    with pytest.raises(DataError, match="duplicate ids"):
        ItemTable(pa.table({"item_id": [1, 1], "weight": [1.0, 1.0]}), "item_id", ["item_id"])
    with pytest.raises(DataError, match="row 1: weight must be finite and >= 0"):
        ItemTable(pa.table({"item_id": [1, 2], "weight": [1.0, -1.0]}), "item_id", ["item_id"])
    with pytest.raises(ValueError, match="num_sample must be >= 1"):
        NegativeSampler(items, 0)


def _section(**kw):
    from recpipe.config.sampler import NegativeSamplerConfig

    base = {
        "input_path": "items",
        "item_id_field": "item_id",
        "num_sample": 4,
        "attr_fields": ["item_id", "cate_id"],
    }
    return NegativeSamplerConfig(**{**base, **kw})


def test_config_section_errors() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="num_sample"):
        _section(num_sample=0)
    with pytest.raises(ValidationError, match=r"attr_fields lists \['cate_id'\] more than once"):
        _section(attr_fields=["cate_id", "cate_id"])
    with pytest.raises(ValidationError, match="weight_field 'cate_id' is also in attr_fields"):
        _section(weight_field="cate_id")
    with pytest.raises(ValidationError, match="with attr_delimiter the table's columns are 'id'"):
        _section(weight_field="attrs", attr_delimiter=":")


def test_load_item_table_columns_and_graph_learn_format(tmp_path) -> None:
    import pyarrow.parquet as pq

    from recpipe.data.negative_sampler import load_item_table

    pq.write_table(TABLE.rename_columns(["item_id", "w", "cate_id"]), tmp_path / "cols.parquet")
    items = load_item_table(_section(input_path=str(tmp_path / "cols.parquet"), weight_field="w"))
    assert items.num_items == 4 and items.weights.tolist() == [1.0, 1.0, 2.0, 0.0]
    assert items.attrs.column("cate_id").to_pylist() == [1, 1, 2, 2]
    # graph-learn's id | weight | attrs (TorchEasyRec's item table), {NAME} resolved from data.params
    gl = pa.table({"id": [10, 11, 12], "weight": [1.0, 3.0, 2.0], "attrs": ["10\x021", "11\x02", "12\x022"]})
    pq.write_table(gl, tmp_path / "gl.parquet")
    cfg = _section(input_path=str(tmp_path / "{NAME}.parquet"), attr_delimiter="\x02")
    items = load_item_table(cfg, {"NAME": "gl"})
    assert items.ids.to_pylist() == [10, 11, 12] and items.weights.tolist() == [1.0, 3.0, 2.0]
    assert items.attrs.column("item_id").to_pylist() == [10, 11, 12]  # the id column, not its text attribute
    assert items.attrs.column("cate_id").to_pylist() == [
        "1",
        "",
        "2",
    ]  # text; "" → null where it joins a batch
    pq.write_table(
        gl.set_column(2, "attrs", pa.array(["10\x021", "11", "12\x022"])), tmp_path / "bad.parquet"
    )
    with pytest.raises(DataError, match=r"bad.parquet row 1: attrs '11' has 1 part\(s\) split by '\\x02'"):
        load_item_table(_section(input_path=str(tmp_path / "bad.parquet"), attr_delimiter="\x02"))
    with pytest.raises(DataError, match=r"no column\(s\) \['id', 'weight', 'attrs'\]; with attr_delimiter"):
        load_item_table(_section(input_path=str(tmp_path / "cols.parquet"), attr_delimiter="\x02"))
