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
