"""Sampled negatives for a retrieval model: TorchEasyRec's ``negative_sampler`` (tzrec/datasets/sampler.py,
``NegativeSampler``) without graph-learn.

The item table is one row per item: its id (``item_id_field``), a ``weight`` and the item's attributes
(``attr_fields``, the item tower's input columns). Each batch draws ``num_sample`` items, with replacement,
with probability proportional to their weight, never an item whose id is among the batch's positives
(graph-learn's ``negative_sampler(strategy="node_weight")`` excludes the source ids; TorchEasyRec's docs:
"会排除Mini-Batch内的Item Id"), and returns their attributes: rows every user of the batch scores against.
TorchEasyRec reads the table as ``id | weight | attrs`` with the attributes joined in one string by
``attr_delimiter`` (graph-learn's format); :func:`load_item_table` reads either that or a table with the attributes
as their own columns, from any :func:`~recpipe.data.sources.open_source` URI (``data.negative_sampler``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.placeholders import resolve
from recpipe.config.sampler import GL_ATTRS_COLUMN, GL_ID_COLUMN, NegativeSamplerConfig
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
        table (pa.Table): one row per item: ``item_id_field``, ``weight_field`` (non-negative, not all 0) and
            every column of ``attr_fields``.
        item_id_field (str): the id column (also a column of the training rows: the batch's positives).
        attr_fields (list[str]): the item attributes to return (TorchEasyRec's ``attr_fields``, in order).
        where (str): the table's name, for errors.
        weight_field (str): the weight column.

    Example::

        table = pa.table({"item_id": [10, 11, 12], "weight": [1.0, 1.0, 2.0], "cate_id": [1, 1, 2]})
        items = ItemTable(table, "item_id", ["item_id", "cate_id"])
        items.num_items                         # 3
    """

    def __init__(
        self,
        table: pa.Table,
        item_id_field: str,
        attr_fields: list[str],
        where: str = "item table",
        weight_field: str = WEIGHT_COLUMN,
    ) -> None:
        missing = [c for c in [item_id_field, weight_field, *attr_fields] if c not in table.column_names]
        if missing:
            raise DataError(f"{where}: no column(s) {missing}; it has {table.column_names}")
        if not attr_fields:
            raise ValueError(f"{where}: attr_fields is empty: the negatives would have no item features")
        ids = table.column(item_id_field).combine_chunks()
        if ids.null_count:
            raise DataError(f"{where}: column {item_id_field!r} has {ids.null_count} null id(s)")
        if pc.count_distinct(ids).as_py() != len(ids):
            raise DataError(f"{where}: column {item_id_field!r} has duplicate ids (one row per item)")
        weights = table.column(weight_field).to_numpy(zero_copy_only=False).astype(np.float64)
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
        self.table = table  # every column of the catalogue (a retrieval export keeps them for a ranker)
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


def load_item_table(
    cfg: NegativeSamplerConfig,
    params: Mapping[str, str | None] | None = None,
    environ: Mapping[str, str] | None = None,
    generate_into: str | Path | None = None,
) -> ItemTable:
    """The :class:`ItemTable` of ``data.negative_sampler``: its ``input_path`` (placeholders resolved by
    ``params``, ``data.params``, else ``environ``) read whole; in graph-learn's format (``attr_delimiter`` set)
    each ``attrs`` string split into the ``attr_fields`` columns (strings; the training schema's types are cast
    to where they join the batch) and ``id`` taken as ``item_id_field``.

    Args:
        cfg (NegativeSamplerConfig): the section.
        params (Mapping | None): ``data.params``.
        environ (Mapping | None): the process environment (for placeholders ``params`` leaves unset).
        generate_into (str | Path | None): where a ``synthetic:`` item table is generated.

    Raises:
        DataError: a missing column, a row whose ``attrs`` has another number of parts than ``attr_fields``,
            or what :class:`ItemTable` refuses.

    Example::

        # rows  id=41 weight=3.0 attrs="41\x027"   (attr_fields [adgroup_id, cate_id], attr_delimiter "\x02")
        items = load_item_table(cfg.data.negative_sampler)
        items.attrs.column("cate_id")            # ["7", ...]
    """
    from recpipe.data.sources import open_source

    uri = resolve(cfg.input_path, params or {}, environ or {})
    source = open_source(uri, generate_into=generate_into)
    table = pa.Table.from_batches([sb.batch for sb in source.iter_batches()], schema=source.schema())
    where = f"item table {uri}"
    if cfg.attr_delimiter is None:
        return ItemTable(table, cfg.item_id_field, cfg.attr_fields, where, cfg.weight_field)
    table = split_attrs(table, cfg, where)
    return ItemTable(table, cfg.item_id_field, cfg.attr_fields, where, cfg.weight_field)


def split_attrs(table: pa.Table, cfg: NegativeSamplerConfig, where: str) -> pa.Table:
    """graph-learn's ``id | weight | attrs`` as columns ``item_id_field``, the weight and each of ``attr_fields``
    (graph-learn reads ``attrs`` as the attributes in ``attr_fields``' order, tzrec/datasets/sampler.py)."""
    missing = [c for c in (GL_ID_COLUMN, cfg.weight_field, GL_ATTRS_COLUMN) if c not in table.column_names]
    if missing:
        raise DataError(
            f"{where}: no column(s) {missing}; with attr_delimiter the table is graph-learn's "
            f"{GL_ID_COLUMN} | {cfg.weight_field} | {GL_ATTRS_COLUMN}, it has {table.column_names}"
        )
    attrs = table.column(GL_ATTRS_COLUMN).combine_chunks().cast(pa.string())
    if attrs.null_count:
        raise DataError(f"{where}: column {GL_ATTRS_COLUMN!r} has {attrs.null_count} null(s)")
    parts = pc.split_pattern(attrs, cfg.attr_delimiter)
    counts = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(counts != len(cfg.attr_fields))
    if bad.size:
        row = int(bad[0])
        raise DataError(
            f"{where} row {row}: attrs {attrs[row].as_py()!r} has {counts[row]} part(s) split by "
            f"{cfg.attr_delimiter!r}, attr_fields has {len(cfg.attr_fields)}: {cfg.attr_fields}"
        )
    flat = pc.list_flatten(parts).to_numpy(zero_copy_only=False).reshape(len(parts), len(cfg.attr_fields))
    columns = {
        cfg.item_id_field: table.column(GL_ID_COLUMN),
        cfg.weight_field: table.column(cfg.weight_field),
    }
    for i, name in enumerate(cfg.attr_fields):
        if name != cfg.item_id_field:  # the id column is the item's id (its attribute repeats it)
            columns[name] = pa.array(flat[:, i], pa.string())
    return pa.table(columns)
