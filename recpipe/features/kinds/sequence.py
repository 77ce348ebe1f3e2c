"""Kind ``sequence``: a behaviour history, one string column → the ids of every sub-feature, items kept
jagged (a history of 3 items is 3 values). A sub-feature is an id (mapped as an id feature's) or numeric
(``boundaries``: one bucket id per item, TorchEasyRec's raw_feature inside a sequence_feature; ``dense``: one
float per item, carried in the KJT as its float64 bits, :attr:`SparseFeature.item_float`). Pre-encoded
input (``data.fg_encoded``) holds each sub-feature's ids in a column of its own, ``<sequence>__<sub>``. A fast
path parses the common case (decimal ids, nothing to truncate or reject): the separators dropped, one
text → int64 cast; the general path finds and names bad rows.

Example::

    # sub_features [adgroup_id (num_buckets 100), age (boundaries [1, 7])]; one row "3\x030.5|8\x0330"
    # -> click_seq__adgroup_id [3, 8], click_seq__age [0, 2], lengths [2] for both
    # a dense sub-feature ts (default 0) of "3\x0312.5|8\x03": click_seq__ts [12.5, 0.0] (as float64 bits)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import (
    DenseSubFeatureConfig,
    RawSubFeatureConfig,
    SequenceFeatureConfig,
    SubFeatureConfig,
    vector_key,
)
from recpipe.data.types import DataError
from recpipe.features.columns import (
    UINT_EXPECTED,
    BadRows,
    as_numpy,
    bucket_ids,
    is_string,
    map_ids,
    parse_uint,
    to_float,
)
from recpipe.features.kinds.base import HISTORY, ColumnKind, FeatureKind, FitNeeds, HistoryOut, SpecParts
from recpipe.features.kinds.id import id_entry
from recpipe.features.spec import (
    FeatureSpecError,
    IdMapping,
    SequenceFeature,
    SparseFeature,
    sub_value_positions,
)
from recpipe.features.text import text_buffers

# The separator of several values in one item (TorchEasyRec's multi-value separator) of a standalone history:
# one item holds one value here, so an item containing it is a bad row rather than silently one value.
ITEM_SEPARATOR = "\x1d"


def history_entry(
    f: Any,
    kind: str,
    sub_features: list[str] | None = None,
    sub_delimiter: str = ITEM_SEPARATOR,
    key: str = "",
) -> SequenceFeature:
    """The history entry of sequence config ``f`` (its name, column, ``sequence_length``, ``delimiter``): its
    sub-feature keys (default: its own name, a standalone history of one value per item), split inside each
    item by ``sub_delimiter``; ``key``: the history of that one pre-encoded sub-feature column instead."""
    name = key or f.name
    return SequenceFeature(
        name=name,
        column=key or f.source_column,
        max_length=f.sequence_length,
        delimiter=f.delimiter,
        sub_delimiter=sub_delimiter,
        sub_features=sub_features or [name],
        kind=kind,
    )


def sequence_ids(
    arr: pa.Array,
    s: SequenceFeature,
    feats: list[SparseFeature],
    n: int,
    values: dict[str, np.ndarray],
    lengths: dict[str, np.ndarray],
    bads: list[BadRows],
) -> int:
    """Ids of every sub-feature of the sequence ``s`` over ``n`` rows of the string column ``arr``.

    Writes ``values[key]`` (all kept items, row-major) and ``lengths[key]`` ``(n,)`` for each
    sub-feature key, appends row problems to ``bads``, and returns how many histories were truncated
    to ``max_length``.

    Args:
        arr (pa.Array): the history column, items joined by ``s.delimiter``, sub-values by ``s.sub_delimiter``.
        s (SequenceFeature): the sequence.
        feats (list[SparseFeature]): the specs of ``s.sub_features``, in order.
        n (int): rows.
        values (dict), lengths (dict): outputs, keyed by sub-feature key.
        bads (list[BadRows]): collects bad rows.

    Example::

        # one row "3<0x03>17|8<0x03>9" of click_50_seq (adgroup_id, cate_id): two items
        sequence_ids(col, seq, feats, 1, values, lengths, bads)
        values["click_50_seq__adgroup_id"], lengths["click_50_seq__adgroup_id"]   # [3, 8] (mod ids), [2]
    """
    if not is_string(arr.type):
        raise DataError(
            f"column {s.column!r}: expected a string column for sequence {s.name!r}, got {arr.type}"
        )
    fast = _sequence_fast(arr, s, feats, n)
    if fast is not None:  # every sub-feature's ids, one length per row for all, nothing truncated
        kept = fast[1]
        for key, v in zip(s.sub_features, fast[0]):
            values[key] = v
            lengths[key] = kept
        return 0
    text = pc.fill_null(arr, "") if arr.null_count else arr
    items = pc.split_pattern(text, pattern=s.delimiter)
    counts = as_numpy(pc.list_value_length(items)).astype(np.int64)
    counts[as_numpy(pc.binary_length(text)) == 0] = 0
    kept = np.minimum(counts, s.max_length)
    truncated = int((counts > s.max_length).sum())
    total = int(kept.sum())
    row_of_item = np.repeat(np.arange(n), kept)
    flat_items = items.values
    if len(flat_items) == total:
        kept_items = flat_items
    else:  # drop the items past max_length and the single "" item of each empty row
        starts = np.asarray(items.offsets)[:-1].astype(np.int64)
        first_kept = np.cumsum(kept) - kept
        item_idx = np.repeat(starts, kept) + (np.arange(total) - np.repeat(first_kept, kept))
        kept_items = flat_items.take(pa.array(item_idx))
    positions = sub_value_positions(feats)
    nsub = positions[-1] + 1
    multi = feats[0].item_lengths_key is not None
    if nsub == 1 and multi:  # a standalone multi-value history: the item is its ids, split by their separator
        subs = pa.ListArray.from_arrays(pa.array(np.arange(total + 1, dtype=np.int32)), kept_items)
    else:
        subs = pc.split_pattern(kept_items, pattern=s.sub_delimiter)
    sub_counts = as_numpy(pc.list_value_length(subs))
    malformed = sub_counts != nsub
    numeric = feats[0].boundaries is not None or feats[0].item_float
    if nsub == 1 and not numeric and not multi and feats[0].mapping.default_value is None:
        # One value per item and no default for an empty one: "3||5" is malformed (with a default it is 3, d, 5).
        malformed |= as_numpy(pc.equal(kept_items, ""))
    if malformed.any():
        bad_items = np.flatnonzero(malformed)
        bads.append(
            BadRows(
                row_of_item[bad_items],
                s.column,
                f"items of {nsub} sub-values separated by {s.sub_delimiter!r}",
                kept_items,
                bad_items,
            )
        )
    sub_starts = np.asarray(subs.offsets)[:-1].astype(np.int64)
    flat = subs.values
    last = max(len(flat) - 1, 0)
    flat_len = as_numpy(pc.binary_length(flat)) if len(flat) else np.zeros(0, np.int32)
    empty_all = flat_len == 0
    # Integer sub-values (mod mappings) are validated and parsed once for all sub-features.
    uint_all, uint_ok = (
        parse_uint(flat, flat_len) if any(f.mapping.kind == "mod" for f in feats) else (None, None)
    )
    # When every item is well-formed, sub-value j of item i sits at i * nsub + j: strided views.
    regular = len(flat) == total * nsub and not malformed.any()
    vector: list[np.ndarray] = []  # the floats of every value of the vector sub-value being read
    for j, key, f in zip(positions, s.sub_features, feats):
        if f.item_lengths_key is not None:  # several ids per item (value_dim 0): ids and their count per item
            take = slice(j, None, nsub) if regular else np.minimum(sub_starts + j, last)
            idx = np.arange(j, len(flat), nsub) if regular else take
            vals = flat.take(pa.array(idx)) if len(flat) else pa.array([], pa.string())
            ids, per_item, bad = _item_ids(
                vals, empty_all[take] if len(flat) else np.zeros(0, bool), f, s.column
            )
            if bad is not None:
                wrong = bad.rows[~malformed[bad.rows]]
                expected = f"{bad.expected} in sub-feature {key!r}"
                bads.append(BadRows(row_of_item[wrong], s.column, expected, kept_items, wrong))
            values[key] = ids
            lengths[key] = np.bincount(row_of_item, weights=per_item, minlength=n).astype(np.int32)
            values[f.item_lengths_key] = per_item
            lengths[f.item_lengths_key] = kept.astype(np.int32)
            continue
        if f.params.get("index", 0) > 0:  # value i of a vector sub-value, parsed with value 0
            values[key] = vector[f.params["index"]]
            lengths[key] = kept.astype(np.int32)
            continue
        if regular:
            take = slice(j, None, nsub)
        else:
            take = np.minimum(sub_starts + j, last) if len(flat) else np.zeros(0, np.int64)
        empty = empty_all[take]
        if f.boundaries is not None or f.item_float:  # a numeric sub-value: bucketized, or a float per item
            idx = np.arange(j, len(flat), nsub) if regular else take
            vals = flat.take(pa.array(idx)) if len(flat) else pa.array([], pa.string())
            if "vector_of" in f.params and "index" in f.params:
                vector, bad = _vector_floats(vals, empty, f, s.column)
                values[key] = vector[0]
            else:
                values[key], bad = (_item_floats if f.item_float else _bucketized)(vals, empty, f, s.column)
            if bad is not None:
                wrong = bad.rows[~malformed[bad.rows]]
                expected = f"{bad.expected} in sub-feature {key!r}"
                bads.append(BadRows(row_of_item[wrong], s.column, expected, kept_items, wrong))
            lengths[key] = kept.astype(np.int32)
            continue
        # An empty sub-value is a missing one: the default keeps items aligned across sub-features.
        fill = f.mapping.default_value
        if empty.any() and fill is None:
            bad_items = np.flatnonzero(empty & ~malformed)
            if bad_items.size:
                expected = f"a non-empty sub-value for {key!r} (or a default_value for it)"
                bads.append(BadRows(row_of_item[bad_items], s.column, expected, kept_items, bad_items))
        if f.mapping.kind == "mod":
            ok = uint_ok[take] | empty
            raw = uint_all[take]
            if fill is not None and empty.any():
                raw = np.where(empty, int(fill), raw)
            wrong = ~ok & ~malformed
            if wrong.any():
                bad_items = np.flatnonzero(wrong)
                expected = f"{UINT_EXPECTED} in sub-feature {key!r}"
                bads.append(BadRows(row_of_item[bad_items], s.column, expected, kept_items, bad_items))
            ids = bucket_ids(raw, f.mapping, f.zch)
        else:
            idx = np.arange(j, len(flat), nsub) if regular else take
            vals = flat.take(pa.array(idx)) if len(flat) else pa.array([], pa.string())
            if fill is not None and empty.any():
                vals = pc.if_else(pa.array(empty), fill, vals)
            ids, _, bad = map_ids(vals, f.mapping, s.column, f.zch)
            if bad is not None:
                expected = f"{bad.expected} in sub-feature {key!r}"
                bads.append(BadRows(row_of_item[bad.rows], s.column, expected, kept_items, bad.rows))
        values[key] = ids
        lengths[key] = kept.astype(np.int32)
    return truncated


def _item_ids(
    vals: pa.Array, empty: np.ndarray, f: SparseFeature, column: str
) -> tuple[np.ndarray, np.ndarray, BadRows | None]:
    """The ids of a multi-value item's sub-value (``params["separator"]`` between ids) and each item's id count
    ``(items,)`` int64: an empty sub-value holds no ids (or the ``default_value`` id when there is one); an
    empty id between separators, or one the mapping refuses, is a bad item."""
    fill = f.mapping.default_value
    if fill is not None and empty.any():
        vals, empty = pc.if_else(pa.array(empty), fill, vals), np.zeros_like(empty)
    pieces = pc.split_pattern(vals, pattern=str(f.params["separator"]))
    per_item = as_numpy(pc.list_value_length(pieces)).astype(np.int64)
    per_item[empty] = 0
    starts = np.asarray(pieces.offsets)[:-1].astype(np.int64)
    first = np.cumsum(per_item) - per_item
    item_of_id = np.repeat(np.arange(len(vals)), per_item)
    flat = pieces.values
    if len(flat) != int(per_item.sum()):  # drop the one "" piece of each empty item
        flat = flat.take(
            pa.array(np.repeat(starts, per_item) + (np.arange(len(item_of_id)) - first[item_of_id]))
        )
    ids, _, bad = map_ids(flat, f.mapping, column, f.zch)
    wrong = [item_of_id[bad.rows]] if bad is not None else []
    blank = as_numpy(pc.binary_length(flat)) == 0 if len(flat) else np.zeros(0, bool)
    wrong.append(item_of_id[blank])
    rows = np.unique(np.concatenate(wrong))
    if not rows.size:
        return ids, per_item, None
    how = bad.expected if bad is not None else "non-empty ids"
    expected = f"ids separated by {f.params['separator']!r} (value_dim 0), each {how}"
    return ids, per_item, BadRows(rows, column, expected, vals, rows)


def _bucketized(
    vals: pa.Array, empty: np.ndarray, f: SparseFeature, column: str
) -> tuple[np.ndarray, BadRows | None]:
    """Bucket ids of one numeric sub-value per item (an empty one is ``raw_default``), as a raw feature's:
    ``searchsorted(boundaries, x, side="right")``; text that is not a finite number is a bad item."""
    if empty.any():
        vals = pc.if_else(pa.array(empty), pa.scalar(None, vals.type), vals)
    x, bad = to_float(vals, f.raw_default, column)
    ids = np.searchsorted(np.asarray(f.boundaries, np.float64), x, side="right").astype(np.int64)
    return ids, bad


def _item_floats(
    vals: pa.Array, empty: np.ndarray, f: SparseFeature, column: str
) -> tuple[np.ndarray, BadRows | None]:
    """One float per item (an empty one is ``raw_default``) as float64 bits in int64, the KJT's value type;
    text that is not a finite number is a bad item."""
    if empty.any():
        vals = pc.if_else(pa.array(empty), pa.scalar(None, vals.type), vals)
    x, bad = to_float(vals, f.raw_default, column)
    return np.ascontiguousarray(x, np.float64).view(np.int64), bad


def _vector_floats(
    vals: pa.Array, empty: np.ndarray, f: SparseFeature, column: str
) -> tuple[list[np.ndarray], BadRows | None]:
    """``value_dim`` floats per item (``params``: ``value_dim``, ``separator``) as float64 bits, one array a
    value; an empty sub-value is ``raw_default`` for each, a sub-value of another count or a value that is not
    a finite number a bad item (TorchEasyRec documents no other count)."""
    dim, sep = int(f.params["value_dim"]), str(f.params["separator"])
    pieces = pc.split_pattern(pc.if_else(pa.array(empty), "", vals) if empty.any() else vals, pattern=sep)
    counts = as_numpy(pc.list_value_length(pieces)).astype(np.int64)
    wrong = (counts != dim) & ~empty
    flat_idx = np.asarray(pieces.offsets)[:-1].astype(np.int64)
    last = max(len(pieces.values) - 1, 0)
    out: list[np.ndarray] = []
    bad_rows = [np.flatnonzero(wrong)]
    for i in range(dim):
        ok = ~wrong & ~empty
        take = np.where(ok, np.minimum(flat_idx + i, last), 0)
        vi = pieces.values.take(pa.array(take)) if len(pieces.values) else pa.array([""] * len(vals))
        vi = pc.if_else(pa.array(ok), vi, pa.scalar(None, pa.string()))
        x, bad = to_float(vi, f.raw_default, column)
        if bad is not None:
            bad_rows.append(bad.rows)
        out.append(np.ascontiguousarray(x, np.float64).view(np.int64))
    rows = np.unique(np.concatenate(bad_rows))
    if not rows.size:
        return out, None
    expected = f"{dim} numbers separated by {sep!r} (value_dim {dim}), each finite"
    return out, BadRows(rows, column, expected, vals, rows)


def _sequence_fast(
    arr: pa.Array, s: SequenceFeature, feats: list[SparseFeature], n: int
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """The common case in a few numpy passes and one Arrow cast: histories of decimal ids, nothing to truncate
    or reject: each sub-feature's ids and the ``(n,)`` history lengths.

    The separators are dropped from the bytes (what is left are the ids' digits, one after another) and the
    ids' ends found among them, item ends and sub-value ends told apart, so one text → int64 cast reads every
    id. Returns None — and the general path above runs, which finds and names bad rows — whenever anything is
    unusual: other bytes than digits and the two delimiters, an item of another number of sub-values, an empty
    item or (without a default) an empty sub-value, a history longer than ``max_length``, ids of 19+ digits.
    """
    delim, sub = s.delimiter.encode(), s.sub_delimiter.encode()
    if (
        len(delim) != 1
        or len(sub) != 1
        or delim == sub
        or delim in b"0123456789"
        or sub in b"0123456789"
        or any(f.mapping.kind != "mod" or f.item_lengths_key is not None for f in feats)
        or any(f.mapping.default_value is not None and not f.mapping.default_value.isdigit() for f in feats)
    ):
        return None
    offsets, data = text_buffers(arr)
    if arr.null_count and np.diff(offsets)[~as_numpy(arr.is_valid())].any():
        return None  # a null row's slot spans bytes: the general path reads it as ""
    lo, hi = int(offsets[0]), int(offsets[-1])
    raw, rel = data[lo:hi], offsets - lo
    nsub = len(feats)
    digit = (raw - 48) < 10  # uint8 arithmetic wraps: the bytes "0".."9" only
    seps = np.flatnonzero(~digit)
    between = raw[seps]
    item_end = between == delim[0]
    if not (item_end | (between == sub[0])).all():
        return None
    # Every id ends at a separator or at its row's end; with the separators dropped the j-th separator sits at
    # seps[j] - j. The ends in order: a row's separators, then its end (rows without text have no end).
    per_row = np.diff(np.searchsorted(seps, rel))
    filled = rel[1:] > rel[:-1]
    before = np.cumsum(per_row)  # separators up to each row's end
    filled_before = np.cumsum(filled) - filled
    total_ids = seps.size + int(filled.sum())
    ends = np.empty(total_ids, np.int64)
    is_item_end = np.empty(total_ids, bool)
    at = np.arange(seps.size) + np.repeat(filled_before, per_row)
    ends[at], is_item_end[at] = seps - np.arange(seps.size), item_end
    at = (before + filled_before)[filled]
    ends[at], is_item_end[at] = (rel[1:] - before)[filled], True
    if total_ids % nsub or not is_item_end[nsub - 1 :: nsub].all() or is_item_end.sum() * nsub != total_ids:
        return None  # an item of another number of sub-values
    counts = (per_row + filled) // nsub
    if (counts > s.max_length).any():
        return None
    if total_ids == 0:  # no item in any row (the candidates of a context request): nothing to parse
        none = np.zeros(0, np.int64)
        return [bucket_ids(none, f.mapping, f.zch) for f in feats], counts.astype(np.int32)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1]
    length = ends - starts
    if length.max() > 18:
        return None
    empty = (length == 0).reshape(-1, nsub)
    has_empty = empty.any(axis=0) if not length.all() else np.zeros(nsub, bool)
    if any(e and (nsub == 1 or f.mapping.default_value is None) for e, f in zip(has_empty, feats)):
        return None  # an empty item, or an empty sub-value without a default
    digits = np.compress(digit, raw)
    width, t = (np.int32, pa.string()) if digits.size < 2**31 else (np.int64, pa.large_string())
    valid = None if not has_empty.any() else pa.py_buffer(np.packbits(length > 0, bitorder="little"))
    text = pa.Array.from_buffers(
        t, total_ids, [valid, pa.py_buffer(np.append(starts, ends[-1]).astype(width)), pa.py_buffer(digits)]
    )
    parsed = as_numpy(pc.fill_null(pc.cast(text, pa.int64()), 0)).astype(np.int64, copy=False)
    parsed = parsed.reshape(-1, nsub)
    out: list[np.ndarray] = []
    for j, f in enumerate(feats):
        v = parsed[:, j]
        if has_empty[j]:
            default = int(str(f.mapping.default_value))
            if default >= 10**18:
                return None
            v = np.where(empty[:, j], default, v)
        out.append(bucket_ids(np.ascontiguousarray(v), f.mapping, f.zch))
    return out, counts.astype(np.int32)


def item_float_entries(
    key: str, column: str, default: float, value_dim: int, separator: str, sequence: str, kind: str
) -> list[SparseFeature]:
    """The KJT keys of a float per item (``key``, ``params["item_float"]``), or of ``value_dim`` > 1 floats per
    item: one key ``<key>__<i>`` each (``params`` ``vector_of``/``index``/``value_dim``/``separator``: value
    ``i`` of the item's sub-value split by ``separator``), so every backend carries each as one float per item.

    Example::

        item_float_entries("clicks__emb", "clicks", 0.0, 2, "\x1d", "clicks", "sequence")
        # -> keys clicks__emb__0, clicks__emb__1: "3\x030.1\x1d1.1" gives 0.1 and 1.1
    """
    if value_dim == 1:
        params: list[dict] = [{"item_float": True}]
    else:
        vector = {"item_float": True, "vector_of": key, "value_dim": value_dim, "separator": separator}
        params = [{**vector, "index": i} for i in range(value_dim)]
    return [
        _tableless(
            key if value_dim == 1 else vector_key(key, i), column, sequence, kind, p, raw_default=default
        )
        for i, p in enumerate(params)
    ]


def _tableless(name: str, column: str, sequence: str, kind: str, params: dict, **more: Any) -> SparseFeature:
    """A history key that carries one number per item and has no table (an item's float, an id count)."""
    return SparseFeature(
        name=name, column=column, mapping=IdMapping("identity", 1), table="", embedding_dim=1,
        sequence=sequence, kind=kind, params=params, **more,
    )  # fmt: skip


# The KJT key of a multi-value history key's id count per item: <key>__item_lengths.
ITEM_LENGTHS_SUFFIX = "__item_lengths"


def multi_value_entries(
    key: str, column: str, cfg: SubFeatureConfig | Any, kind: str, sequence: str, encoded: bool
) -> list[SparseFeature]:
    """The KJT keys of a history id (a sub-feature, or a standalone ``sequence_id``): one, or for ``value_dim: 0``
    (several ids per item) the ids key (its ``pooling`` pools an item's ids) and its id counts key
    ``<key>__item_lengths`` (no table).

    Example::

        # sub-feature tags (value_dim 0, separator "\x1d") of clicks; one row "1\x1d2|" -> clicks__tags [1, 2],
        # lengths [2]; clicks__tags__item_lengths [2, 0], lengths [2]
    """
    entry = id_entry(key, column, cfg, kind, encoded=encoded, sequence=sequence)
    if getattr(cfg, "value_dim", 1) == 1:
        return [entry]
    if encoded:
        raise FeatureSpecError(
            f"history key {key!r}: pre-encoded input (data.fg_encoded) of several ids per item (value_dim 0) is "
            "not supported yet"
        )
    lengths_key = key + ITEM_LENGTHS_SUFFIX
    params = {**entry.params, "item_lengths": lengths_key, "separator": cfg.separator}
    counts = _tableless(lengths_key, column, sequence, kind, {"item_lengths_of": key})
    return [replace(entry, pooling=cfg.pooling, params=params), counts]


def sub_entries(
    key: str, column: str, sub: SubFeatureConfig | RawSubFeatureConfig | DenseSubFeatureConfig, sequence: str
) -> list[SparseFeature]:
    """:func:`sub_entry`, or a dense sub-feature's :func:`item_float_entries` (of kind ``sequence``)."""
    if isinstance(sub, DenseSubFeatureConfig):
        return item_float_entries(
            key, column, sub.default, sub.value_dim, sub.separator, sequence, "sequence"
        )
    if isinstance(sub, SubFeatureConfig):
        return multi_value_entries(key, column, sub, "sequence", sequence, encoded=False)
    return [sub_entry(key, column, sub, "sequence", sequence, encoded=False)]


def sub_entry(
    key: str,
    column: str,
    sub: SubFeatureConfig | RawSubFeatureConfig | DenseSubFeatureConfig,
    kind: str,
    sequence: str,
    encoded: bool,
) -> SparseFeature:
    """The KJT key of one history sub-feature: an id mapping, (numeric) its bucket ids by ``boundaries``, or
    (dense) a float per item; pre-encoded input holds the ids (a numeric one's bucket ids, a dense one's
    floats) as they are."""
    if not isinstance(sub, RawSubFeatureConfig):
        return id_entry(key, column, sub, kind, encoded=encoded, sequence=sequence)
    return SparseFeature(
        name=key,
        column=column,
        mapping=IdMapping("identity", len(sub.boundaries) + 1),
        table=sub.embedding_name or sub.name,
        embedding_dim=sub.embedding_dim,
        boundaries=None if encoded else list(sub.boundaries),
        raw_default=sub.default,
        sequence=sequence,
        kind=kind,
    )


def build(f: SequenceFeatureConfig, parts: SpecParts) -> None:
    keys = f.sub_keys()
    if parts.encoded:
        # TorchEasyRec's FG_NONE (tzrec/features/feature.py, _parse_fg_encoded_sequence_sparse_feature_impl):
        # each sub-feature's ids are their own column, named after the sub-feature (<sequence>__<sub>), items
        # by the sequence's delimiter. Each is a history of its own; a sequence group reads them item by item.
        for key, sub in zip(keys, f.sub_features, strict=True):
            if isinstance(sub, DenseSubFeatureConfig) and sub.value_dim > 1:
                raise FeatureSpecError(
                    f"sub-feature {key!r}: pre-encoded input (data.fg_encoded) of value_dim > 1 floats per "
                    "item is not supported yet"
                )
            entry = sub_entries(key, key, sub, key) if isinstance(sub, DenseSubFeatureConfig) else None
            if isinstance(sub, SubFeatureConfig) and sub.value_dim == 0:
                multi_value_entries(key, key, sub, "sequence", key, encoded=True)  # refused
            parts.sparse.extend(entry or [sub_entry(key, key, sub, "sequence", key, encoded=True)])
            parts.sequences.append(history_entry(f, "sequence", sub_delimiter=f.sub_delimiter, key=key))
        return
    entries = [
        e
        for key, sub in zip(keys, f.sub_features, strict=True)
        for e in sub_entries(key, f.source_column, sub, f.name)
    ]
    parts.sparse.extend(entries)
    subs = [e.name for e in entries if e.item_lengths_of is None]  # an id counts key is no sub-value
    parts.sequences.append(history_entry(f, "sequence", subs, f.sub_delimiter))


def needs(f: SequenceFeatureConfig) -> FitNeeds:
    keys = f.sub_keys()
    return FitNeeds(
        vocab={
            k: s.min_freq for k, s in zip(keys, f.sub_features, strict=True) if getattr(s, "min_freq", None)
        }
    )


def histories(s: SequenceFeature, feats: list[SparseFeature], batch: pa.RecordBatch, out: HistoryOut) -> int:
    """:func:`sequence_ids` over the batch's history column."""
    return sequence_ids(batch.column(s.column), s, feats, batch.num_rows, out.values, out.lengths, out.bads)


def column(entry: SequenceFeature) -> tuple[ColumnKind, str]:
    return "sequence", HISTORY


KIND = FeatureKind(name="sequence", build=build, column=column, needs=needs, sequence=histories)
