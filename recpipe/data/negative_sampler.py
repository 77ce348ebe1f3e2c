"""Sampled negatives for a retrieval model: TorchEasyRec's ``negative_sampler`` (tzrec/datasets/sampler.py,
``NegativeSampler``) without graph-learn.

The item table is one row per item: its id (``item_id_field``), a ``weight`` and the item's attributes
(``attr_fields``, the item tower's input columns). Each batch draws ``num_sample`` items, with replacement,
with probability proportional to their weight, never an item whose id is among the batch's positives
(graph-learn's ``negative_sampler(strategy="node_weight")`` excludes the source ids; TorchEasyRec's docs:
"会排除Mini-Batch内的Item Id"), and returns their attributes: rows every user of the batch scores against.
TorchEasyRec reads the table as ``id | weight | attrs`` with the attributes joined in one string; here it is a
Parquet (or any :func:`~recpipe.data.sources.open_source`) table with the attributes as their own columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.data.types import DataError

WEIGHT_COLUMN = "weight"


@dataclass(frozen=True)
class SampledItems:
    """One batch's negatives.

    Args:
        attrs (pa.Table): ``num_sample`` rows, the columns ``attr_fields`` of the drawn items.
        rows (np.ndarray): ``(num_sample,)`` int64 rows of the item table they are.
        log_q (np.ndarray): ``(num_sample,)`` float64 log probability of drawing each one (its weight over the
            weight of the items the batch did not exclude): the log-Q correction of a sampled softmax.
    """

    attrs: pa.Table
    rows: np.ndarray
    log_q: np.ndarray


class ItemTable:
    """The items negatives are drawn from.

    Args:
        table (pa.Table): one row per item: ``item_id_field``, ``weight`` (non-negative, not all 0) and every
            column of ``attr_fields``.
        item_id_field (str): the id column (also a column of the training rows: the batch's positives).
        attr_fields (list[str]): the item attributes to return (TorchEasyRec's ``attr_fields``, in order).
        where (str): the table's name, for errors.

    Example::

        table = pa.table({"item_id": [10, 11, 12], "weight": [1.0, 1.0, 2.0], "cate_id": [1, 1, 2]})
        items = ItemTable(table, "item_id", ["item_id", "cate_id"])
        items.num_items                         # 3
    """

    def __init__(
        self, table: pa.Table, item_id_field: str, attr_fields: list[str], where: str = "item table"
    ) -> None:
        missing = [c for c in [item_id_field, WEIGHT_COLUMN, *attr_fields] if c not in table.column_names]
        if missing:
            raise DataError(f"{where}: no column(s) {missing}; it has {table.column_names}")
        if not attr_fields:
            raise ValueError(f"{where}: attr_fields is empty: the negatives would have no item features")
        ids = table.column(item_id_field).combine_chunks()
        if ids.null_count:
            raise DataError(f"{where}: column {item_id_field!r} has {ids.null_count} null id(s)")
        if pc.count_distinct(ids).as_py() != len(ids):
            raise DataError(f"{where}: column {item_id_field!r} has duplicate ids (one row per item)")
        weights = table.column(WEIGHT_COLUMN).to_numpy(zero_copy_only=False).astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
        if bad.size:
            raise DataError(
                f"{where} row {int(bad[0])}: weight must be finite and >= 0, got {weights[bad[0]]}"
            )
        if not weights.sum() > 0:
            raise DataError(f"{where}: every weight is 0: nothing can be drawn")
        self.ids = ids
        self.weights = weights
        self.attrs = table.select(attr_fields)
        self.item_id_field = item_id_field
        self.attr_fields = list(attr_fields)
        self.where = where

    @property
    def num_items(self) -> int:
        return len(self.weights)

    def rows_of(self, ids: pa.Array | np.ndarray) -> np.ndarray:
        """``(n,)`` int64 table row of each id (an id not in the table raises: its item has no attributes)."""
        found = pc.index_in(pa.array(ids) if not isinstance(ids, pa.Array) else ids, value_set=self.ids)
        if found.null_count:
            lost = pa.array(ids).filter(pc.is_null(found))[0].as_py()
            raise DataError(f"{self.where}: item {lost!r} of the batch is not in the item table")
        return found.to_numpy(zero_copy_only=False).astype(np.int64)

    def log_probability(self, rows: np.ndarray) -> np.ndarray:
        """``log(weight / Σ weight)`` of the given rows: an item's probability of one weighted draw."""
        with np.errstate(divide="ignore"):
            return np.log(self.weights[rows] / self.weights.sum())


class NegativeSampler:
    """Draws each batch's shared negatives from an :class:`ItemTable` (TorchEasyRec's ``NegativeSampler``).

    Args:
        items (ItemTable): the items and their weights.
        num_sample (int): negatives per batch (TorchEasyRec's ``num_sample``; ``num_eval_sample`` at evaluation).
        seed (int): the draws' seed.

    Example::

        sampler = NegativeSampler(items, num_sample=4, seed=0)
        neg = sampler.sample(pa.array([10]))    # never item 10
        neg.attrs.num_rows                      # 4; columns item_id, cate_id
    """

    def __init__(self, items: ItemTable, num_sample: int, seed: int = 0) -> None:
        if num_sample < 1:
            raise ValueError(f"num_sample must be >= 1, got {num_sample}")
        self.items = items
        self.num_sample = num_sample
        self._rng = np.random.default_rng(seed)

    def sample(self, positive_ids: pa.Array | np.ndarray) -> SampledItems:
        """``num_sample`` items drawn ∝ weight, with replacement, none of them among ``positive_ids``.

        Raises:
            DataError: every item with a weight is among the positives (nothing left to draw).
        """
        ids = positive_ids if isinstance(positive_ids, pa.Array) else pa.array(positive_ids)
        excluded = pc.is_in(self.items.ids, value_set=ids).to_numpy(zero_copy_only=False)
        weights = np.where(excluded, 0.0, self.items.weights)
        total = weights.sum()
        if not total > 0:
            raise DataError(
                f"{self.items.where}: every item with a weight is a positive of this batch; no negative can be drawn"
            )
        cdf = np.cumsum(weights)
        # side="right" never lands on a zero-weight row: its cdf equals the row before it.
        rows = np.searchsorted(cdf, self._rng.random(self.num_sample) * total, side="right")
        rows = np.minimum(rows, len(cdf) - 1).astype(np.int64)
        log_q = np.log(weights[rows] / total)
        return SampledItems(self.items.attrs.take(pa.array(rows)), rows, log_q)
