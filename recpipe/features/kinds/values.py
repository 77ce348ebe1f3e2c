"""What the kinds computing a value per row from several columns share (``lookup``, ``match``, ``expr``,
``overlap``, ``kv_dot_product``): reading multi-value and key:value columns into flat Arrow arrays with the
row of each item, joining keys of two columns exactly (joint dictionary codes, sorted and searched, never a
loop per row), combining a row's values, and turning a value into the entry's output: one dense column,
a bucket id (``boundaries``) or a mapped id (hash / mod / vocabulary).

Every reader accepts what Parquet users bring (lists, maps, lists of key/value structs) as well as
TorchEasyRec's text forms (``"k1:v1\\x1dk2:v2"``). numpy and pyarrow only.

Example::

    rows, keys, vals, bad = kv_pairs(pa.array(["ca:1\\x1dcb:2", None]), "\\x1d", ":", "kv_cate")
    rows, keys.to_pylist(), vals.to_pylist()   # [0, 0], ['ca', 'cb'], ['1', '2']
    codes = joint_codes([keys, pa.array(["cb"])])     # one code per distinct key, both sides alike
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import _ValueOutputMixin
from recpipe.data.types import DataError
from recpipe.features.columns import BadRows, as_numpy, is_string, map_ids, to_float
from recpipe.features.kinds.base import DenseOut, FitNeeds, SparseOut, SpecParts
from recpipe.features.kinds.raw import parse_normalizer
from recpipe.features.spec import DenseFeature, FeatureSpecError, IdMapping, SparseFeature
from recpipe.features.text import decimal_ranges, equal_ranges, split_once, split_pieces, text_ranges

_EMPTY = pa.array([], pa.string())


def _ints(arr: pa.Array) -> np.ndarray:
    return as_numpy(arr).astype(np.int64, copy=False)


def _list_items(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(row of each item, items) of a list column; null rows and null items have none."""
    if pa.types.is_map(arr.type):
        t = arr.type
        arr = arr.cast(pa.list_(pa.struct([("key", t.key_type), ("value", t.item_type)])))
    # Lengths with null rows as 0, the items of the other rows: list_flatten leaves a null row's storage out,
    # which list_parent_indices would still count.
    lengths = as_numpy(pc.fill_null(pc.list_value_length(arr), 0)).astype(np.int64)
    rows = np.repeat(np.arange(len(arr), dtype=np.int64), lengths)
    items = pc.list_flatten(arr)
    if len(items) != len(rows):
        raise AssertionError(f"list column: {len(items)} items for {len(rows)} row positions")
    if items.null_count:
        keep = as_numpy(items.is_valid())
        rows, items = rows[keep], items.filter(pa.array(keep))
    return rows, items


def is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)


def multi_values(arr: pa.Array, sep: str, column: str) -> tuple[np.ndarray, pa.Array]:
    """(row of each value, values) of a multi-value column: text split by ``sep`` (empty parts are no
    value), a list column's items, or one value per non-null row of any other column."""
    if is_string(arr.type):
        split = split_pieces(arr, sep)
        if split is not None:
            return split
        text = pc.fill_null(arr, "") if arr.null_count else arr
        parts = pc.split_pattern(text, sep)
        rows, items = _ints(pc.list_parent_indices(parts)), pc.list_flatten(parts)
        keep = as_numpy(pc.not_equal(items, ""))
        if not keep.all():
            rows, items = rows[keep], items.filter(pa.array(keep))
        return rows, items
    if is_list(arr.type):
        return _list_items(arr)
    if pa.types.is_struct(arr.type):
        raise DataError(f"column {column!r}: expected a multi-value column (text or a list), got {arr.type}")
    valid = np.flatnonzero(as_numpy(arr.is_valid())) if arr.null_count else np.arange(len(arr))
    return valid.astype(np.int64), arr.take(pa.array(valid)) if arr.null_count else arr


def kv_pairs(
    arr: pa.Array, pair_sep: str, kv_sep: str, column: str, bare_value: str | None = None
) -> tuple[np.ndarray, pa.Array, pa.Array, BadRows | None]:
    """(row, key, value) of every entry of a key:value column.

    Text ``"k1:v1<pair_sep>k2:v2"`` (split at the first ``kv_sep``), a list of such strings, an Arrow map or a
    list of (key, value) structs. Keys come back as text (an integer key ``7`` is ``"7"``); values as the
    column holds them (text for text). An entry without ``kv_sep`` takes ``bare_value``, or, when that is
    None, is a bad row.
    """
    item_type = arr.type.value_type if is_list(arr.type) and not pa.types.is_map(arr.type) else None
    if is_string(arr.type) or (item_type is not None and is_string(item_type)):
        rows, items = multi_values(arr, pair_sep, column)
        cut = split_once(items, kv_sep)
        if cut is not None:
            keys, values, has = cut
            if bare_value and not has.all():
                values = pc.if_else(pa.array(has), values, pa.scalar(bare_value, values.type))
        else:  # a separator of several bytes, or null items: Arrow's split
            keys, values, has = _split_kv(items, kv_sep, bare_value)
        bad = None
        if bare_value is None and not has.all():
            expected = f"key{kv_sep}value pairs separated by {pair_sep!r}"
            bad = BadRows(rows[~has], column, expected, items, np.flatnonzero(~has))
        return rows, keys, values, bad
    if pa.types.is_map(arr.type) or (item_type is not None and pa.types.is_struct(item_type)):
        rows, items = _list_items(arr)
        if items.type.num_fields != 2:
            raise DataError(f"column {column!r}: expected (key, value) entries, got {arr.type}")
        keys = items.field(0)
        keys = keys if is_string(keys.type) else pc.cast(keys, pa.string())
        return rows, keys, items.field(1), None
    raise DataError(
        f"column {column!r}: expected key{kv_sep}value text, a map or a list of (key, value), got {arr.type}"
    )


def _split_kv(items: pa.Array, kv_sep: str, bare_value: str | None) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(key, value, has separator) of each item cut at its first ``kv_sep`` by Arrow's split; an item without
    it is all key, its value ``bare_value`` (or ``""``)."""
    has = as_numpy(pc.match_substring(items, kv_sep)).astype(bool) if len(items) else np.zeros(0, bool)
    if not has.all():
        # The separator of the items' own type: large_string items (a large CSV column) take no str.
        joined = pc.binary_join_element_wise(
            items, pa.scalar(bare_value or "", items.type), pa.scalar(kv_sep, items.type)
        )
        items = pc.if_else(pa.array(has), items, joined)
    parts = pc.split_pattern(items, kv_sep, max_splits=1)
    return pc.list_element(parts, 0), pc.list_element(parts, 1), has


def joint_codes(arrays: list[pa.Array]) -> list[np.ndarray]:
    """One int64 code per distinct text value over all ``arrays`` (the same value, the same code on every
    side): exact, where hashes could collide."""
    lengths = [len(a) for a in arrays]
    if not sum(lengths):
        return [np.zeros(0, np.int64) for _ in arrays]
    if len({a.type for a in arrays}) > 1:
        arrays = [a.cast(pa.large_string()) for a in arrays]
    # One hash table over the chunks (Arrow's dictionary_encode of a chunked array): no concatenated copy.
    enc = pc.dictionary_encode(pa.chunked_array(arrays, arrays[0].type))
    codes = np.concatenate(
        [_ints(pc.fill_null(c.indices, -1)) for c in enc.chunks] or [np.zeros(0, np.int64)]
    )
    return np.split(codes, np.cumsum(lengths)[:-1])


def combine_codes(*columns: np.ndarray) -> np.ndarray:
    """One exact int64 code per distinct tuple of the given code columns (each column non-negative)."""
    out = columns[0].astype(np.int64)
    for col in columns[1:]:
        width = int(col.max()) + 1 if col.size else 1
        out = np.unique(out * width + col, return_inverse=True)[1].astype(np.int64).reshape(-1)
    return out


def find_first(table: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query code the position in ``table`` of its first equal code, or -1."""
    if not table.size:
        return np.full(queries.shape, -1, np.int64)
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    pos = np.searchsorted(ordered, queries)
    hit = pos < ordered.size
    hit[hit] = ordered[pos[hit]] == queries[hit]
    return np.where(hit, order[np.minimum(pos, ordered.size - 1)], -1)


def found_in(table: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Whether each query code equals some code of ``table`` (:func:`find_first` ``>= 0``, by a plain sort)."""
    if not table.size:
        return np.zeros(queries.shape, bool)
    ordered = np.sort(table)
    pos = np.minimum(np.searchsorted(ordered, queries), ordered.size - 1)
    return ordered[pos] == queries


def find_all(table: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (query position, table position) pair of equal codes, queries in order, each query's table
    entries in table order."""
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    lo = np.searchsorted(ordered, queries, side="left")
    hi = np.searchsorted(ordered, queries, side="right")
    count = hi - lo
    q = np.repeat(np.arange(queries.size), count)
    first = np.repeat(lo - (np.cumsum(count) - count), count)
    return q, order[first + np.arange(q.size)] if q.size else np.zeros(0, np.int64)


@dataclasses.dataclass(frozen=True)
class RowKeys:
    """One key per row (``valid`` False: none), to find map keys (byte ranges of text) equal to their row's
    key as text: an integer column by value (:func:`~recpipe.features.text.decimal_ranges`: the same as
    comparing with the integer cast to text, without the cast), any other column by its text's bytes."""

    valid: np.ndarray
    ints: np.ndarray | None = None
    text: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


# Integers that decimal_ranges reads (18 digits): a column with a larger one is compared as text.
_DECIMAL_LIMIT = 10**18
_POWERS_OF_TEN = np.array([10**k for k in range(1, 19)], np.int64)


def row_keys(arr: pa.Array, valid: np.ndarray) -> RowKeys:
    """The :class:`RowKeys` of a column of one key per row, the rows ``valid`` holding one."""
    t = arr.type
    if pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t) and t.bit_width <= 32):
        ints = as_numpy(pc.fill_null(arr, 0) if arr.null_count else arr).astype(np.int64)
        if ((ints > -_DECIMAL_LIMIT) & (ints < _DECIMAL_LIMIT)).all():
            return RowKeys(valid, ints=ints)
    return RowKeys(valid, text=text_ranges(as_text(arr)))


def equal_row_keys(
    keys: RowKeys, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Whether each text ``data[starts:ends]`` equals the key of its row ``rows`` (a row without a key: none)."""
    if keys.ints is not None:
        # Only a text as long as the row's integer's decimal text can be it: those are read.
        ints = keys.ints[rows]
        length = np.searchsorted(_POWERS_OF_TEN, np.abs(ints), side="right") + 1 + (ints < 0)
        cand = np.flatnonzero(keys.valid[rows] & (ends - starts == length))
        value, ok = decimal_ranges(data, starts[cand], ends[cand])
        same = np.zeros(rows.size, bool)
        same[cand] = ok & (value == ints[cand])
        return same
    kdata, kstarts, kends = keys.text
    return keys.valid[rows] & equal_ranges(data, starts, ends, kdata, kstarts[rows], kends[rows])


COMBINERS = ("sum", "mean", "min", "max", "count")


def reduce_rows(rows: np.ndarray, x: np.ndarray, n: int, combiner: str) -> tuple[np.ndarray, np.ndarray]:
    """(combined value per row, whether the row has any value) of values ``x`` at sorted ``rows``."""
    count = np.bincount(rows, minlength=n)[:n]
    has = count > 0
    if combiner == "count":
        return count.astype(np.float64), has
    if combiner in ("sum", "mean"):
        total = np.bincount(rows, weights=x, minlength=n)[:n]
        return (total / np.maximum(count, 1) if combiner == "mean" else total), has
    out = np.zeros(n, np.float64)
    if rows.size:
        order = np.argsort(rows, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(rows[order]) != 0])
        ufunc = np.minimum if combiner == "min" else np.maximum
        out[rows[order][starts]] = ufunc.reduceat(x[order], starts)
    return out, has


# --------------------------------------------------------------------------------------- spec entries
def value_mapping(f: Any) -> IdMapping:
    """The IdMapping of a lookup/match config's id output (its default is applied by the kind, not here)."""
    field = f.mapping_field()
    if field == "hash_bucket_size":
        return IdMapping("hash", f.hash_bucket_size)
    if field == "num_buckets":
        return IdMapping("mod", f.num_buckets)
    if field == "vocab_list":
        vocab = list(f.vocab_list)
    else:
        path = Path(f.vocab_file)
        if not path.is_file():
            raise FeatureSpecError(f"feature {f.name!r}: vocab_file {path} does not exist")
        vocab = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    unk = f.default_bucket if f.default_bucket is not None else 0
    return IdMapping("vocab", len(vocab) + 1, vocab=vocab, unk_id=unk)


def build_value(
    f: _ValueOutputMixin, parts: SpecParts, kind: str, column: str, inputs: list[str], params: dict[str, Any]
) -> None:
    """Append the entry of a value kind: a mapped id, a bucket id or a dense column."""
    if parts.encoded:
        raise FeatureSpecError(
            f"feature {f.name!r}: kind {kind} reads its input columns; pre-encoded input (data.fg_encoded) "
            "holds FG's output, which kind raw or id reads"
        )
    params = {**params, "default_value": f.default_value}
    if f.sparse_output:
        if f.boundaries is not None:
            mapping = IdMapping("identity", len(f.boundaries) + 1)
            bounds: list[float] | None = list(f.boundaries)
        else:
            mapping, bounds = value_mapping(f), None
        parts.add_table(
            f, column, mapping, kind, pooling=f.pooling, boundaries=bounds, inputs=inputs, params=params
        )
        return
    log_offset, _ = parse_normalizer(f.normalizer)
    default = float(f.default_value) if f.default_value is not None else 0.0
    parts.dense.append(
        DenseFeature(
            name=f.name,
            column=column,
            default=default,
            log_offset=log_offset,
            kind=kind,
            inputs=inputs,
            params=params,
            embedding=f.dense_embedding(),
        )
    )


def value_needs(f: _ValueOutputMixin) -> FitNeeds:
    offset, z = parse_normalizer(f.normalizer)
    return FitNeeds(zscore={f.name: offset}) if z and not f.sparse_output else FitNeeds()


def dense_out(d: DenseFeature, x: np.ndarray, has: np.ndarray, bads: list[BadRows]) -> DenseOut:
    """One dense column: a row without a value takes the default, then ``(log(x + C) - mean) / std``; a
    value outside the log's domain is a bad row of the entry's first column."""
    x = np.where(has, x, d.default)
    if d.log_offset is not None:
        shifted = x + d.log_offset
        nonpos = shifted <= 0
        if nonpos.any():
            expected = f"a value > {-d.log_offset:g} of feature {d.name!r} for log(x+{d.log_offset:g})"
            bads.append(BadRows(np.flatnonzero(nonpos), d.column, expected))
            shifted = np.where(nonpos, 1.0, shifted)
        x = np.log(shifted)
    return (x - d.mean) / d.std, bads


def _default_number(f: SparseFeature) -> float | None:
    v = f.params.get("default_value")
    return None if v is None else float(v)


def _fill_empty_rows(rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Sorted ``rows`` of values with one more row for each of the ``n`` rows that has none: (the new sorted
    rows, the order that sorts the values with the added ones appended, how many were added), or None when
    every row has a value."""
    empty = np.ones(n, bool)
    empty[rows] = False
    if not empty.any():
        return None
    extra = np.flatnonzero(empty)
    rows = np.concatenate([rows, extra])
    order = np.argsort(rows, kind="stable")
    return rows[order], order, extra.size


def bucket_out(
    f: SparseFeature, rows: np.ndarray, x: np.ndarray, n: int, bad: BadRows | None = None
) -> SparseOut:
    """Bucket ids of values ``x`` at sorted ``rows`` (any number per row); a row without one takes the
    bucket of the default value, or has no id when there is none."""
    default = _default_number(f)
    if default is not None and (filled := _fill_empty_rows(rows, n)) is not None:
        rows, order, added = filled
        x = np.concatenate([x, np.full(added, default)])[order]
    ids = np.searchsorted(np.asarray(f.boundaries, np.float64), x, side="right").astype(np.int64)
    return ids, np.bincount(rows, minlength=n)[:n].astype(np.int32), bad


def id_out(f: SparseFeature, rows: np.ndarray, values: pa.Array, n: int, column: str) -> SparseOut:
    """Mapped ids of text ``values`` at sorted ``rows``; a row without one takes the id of the default value,
    or has no id when there is none."""
    default = f.params.get("default_value")
    if default is not None and (filled := _fill_empty_rows(rows, n)) is not None:
        rows, order, added = filled
        values = pa.concat_arrays([values.cast(pa.string()), pa.array([default] * added, pa.string())])
        values = values.take(pa.array(order))
    ids, present, bad = map_ids(values, dataclasses.replace(f.mapping, default_value=None), column)
    if bad is not None:
        bad = BadRows(
            rows[bad.rows], column, f"{bad.expected} (the value of feature {f.name!r})", values, bad.rows
        )
    if not present.all():  # a null value (a map's null item) is no id
        rows, ids = rows[present], ids[present]
    return ids, np.bincount(rows, minlength=n)[:n].astype(np.int32), bad


def numbers(
    values: pa.Array, rows: np.ndarray, column: str, what: str
) -> tuple[np.ndarray, np.ndarray, BadRows | None]:
    """Values read as numbers: (values, keep mask, bad rows); a null or empty value (a map's null item) is
    none, text that is not a finite number a bad row of ``column``."""
    keep = as_numpy(values.is_valid()).astype(bool) if values.null_count else np.ones(len(values), bool)
    if is_string(values.type) and len(values):
        keep &= as_numpy(pc.fill_null(pc.not_equal(values, ""), False)).astype(bool)
    idx = np.flatnonzero(keep)
    sub = values if idx.size == len(values) else values.take(pa.array(idx))
    x = np.zeros(len(values), np.float64)
    if not len(sub):
        return x, keep, None
    if not (
        is_string(sub.type)
        or pa.types.is_integer(sub.type)
        or pa.types.is_floating(sub.type)
        or pa.types.is_boolean(sub.type)
    ):
        raise DataError(f"column {column!r}: expected numbers as {what}, got {sub.type}")
    x[idx], bad0 = to_float(sub, 0.0, column)
    bad = None
    if bad0 is not None:
        at = idx[bad0.rows]
        keep[at] = False
        bad = BadRows(rows[at], column, f"a finite number as {what}", values, at)
    return x, keep, bad


def number_buckets(
    f: SparseFeature, rows: np.ndarray, values: pa.Array, n: int, bad: BadRows | None, what: str
) -> SparseOut:
    """Bucket ids of ``values`` read as numbers at sorted ``rows`` (text that is not a number a bad row of
    ``f.column``, ``what`` naming it): one a value, or with ``f.params["combiner"]`` one a row, their
    combination. ``bad`` are the rows the input already found bad (kinds ``lookup``, ``match``)."""
    x, keep, num_bad = numbers(values, rows, f.column, what)
    rows, x = rows[keep], x[keep]
    if f.params["combiner"]:
        combined, has = reduce_rows(rows, x, n, f.params["combiner"])
        rows, x = np.flatnonzero(has), combined[has]
    return bucket_out(f, rows, x, n, merge_bad_rows([bad, num_bad]))


def combined_dense(
    d: DenseFeature, rows: np.ndarray, values: pa.Array, n: int, bad: BadRows | None, what: str
) -> DenseOut:
    """The dense column of ``values`` read as numbers at sorted ``rows``, combined per row by
    ``d.params["combiner"]`` (a row without one takes the default); as :func:`number_buckets` otherwise."""
    x, keep, num_bad = numbers(values, rows, d.column, what)
    combined, has = reduce_rows(rows[keep], x[keep], n, d.params["combiner"])
    return dense_out(d, combined, has, [b for b in (bad, num_bad) if b is not None])


def merge_bad_rows(bads: list[BadRows | None]) -> BadRows | None:
    """One BadRows of several checks, for a pooled key's single one: every row of them all (so skipping
    drops each), named by the check with the first bad row (so an error names the first)."""
    found = [b for b in bads if b is not None and b.rows.size]
    if len(found) <= 1:
        return found[0] if found else None
    first = min(found, key=lambda b: int(b.rows.min()))
    others = [b for b in found if b is not first]
    rows = np.concatenate([first.rows, *(b.rows for b in others)])
    arr_rows = None
    if first.arr is not None:
        own = first.rows if first.arr_rows is None else first.arr_rows
        arr_rows = np.concatenate([own, np.zeros(rows.size - own.size, np.int64)])
    return BadRows(rows, first.column, first.expected, first.arr, arr_rows)


def as_text(values: pa.Array) -> pa.Array:
    """Values as text (an integer 7 is ``"7"``), for hashing and vocabularies."""
    return values if is_string(values.type) else pc.cast(values, pa.string())
