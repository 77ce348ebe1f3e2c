"""Kind ``match`` (TorchEasyRec's ``match_feature``): the value of the candidate's (``pkey``, ``skey``) in a
two-level map column, e.g. the user's clicks of the candidate's category and brand.

``nested_map`` is ``"pk1^sk1:0.2,sk2:0.3|pk2^sk4:0.1"`` text (the separators ``|``, ``^``, ``,`` and ``:`` are
fixed, as in TorchEasyRec) or an Arrow map of primary key → ``"sk1:0.2,sk2:0.3"`` text. ``pkey`` and ``skey``
name columns of one key per row, or are ``ALL``: every primary key holding the given secondary key, or every
secondary key under the given primary key (both ``ALL``: every entry). The values matched are combined
(``combiner``: sum, mean, min, max) into one dense column or a bucket id (``boundaries``), or each mapped as
an id (hash_bucket_size / num_buckets / vocab_list / vocab_file), prefixed with the matched keys by
``show_pkey`` / ``show_skey`` (``"<pkey>_<skey>_<value>"``). A row where nothing matches takes
``default_value`` (None: no id; a dense 0); a pair found twice in one map takes its first value.

Vectorized: the map is parsed once per batch and each entry compared with its own row's keys (exact text); no loop
per row.

Example::

    # nested_map "ca^ba:1,bb:2|cb^ba:3,bb:4", pkey "ca", skey "ba" → 1.0; pkey ALL, skey "ba" → 1 + 3 = 4.0
    KIND.dense(spec.dense[0], batch)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import MATCH_ALL, MatchFeatureConfig
from recpipe.data.types import DataError
from recpipe.features.columns import BadRows, as_numpy, is_string
from recpipe.features.kinds import values as vals
from recpipe.features.kinds.base import ANY, ColumnKind, DenseOut, FeatureKind, FitNeeds, SparseOut, SpecParts
from recpipe.features.spec import DenseFeature, SparseFeature
from recpipe.features.text import byte_positions, cut_ranges, gather, split_ranges, text_ranges


def build(f: MatchFeatureConfig, parts: SpecParts) -> None:
    params = {
        "pkey": f.pkey,
        "skey": f.skey,
        "combiner": f.combiner,
        "show_pkey": f.show_pkey,
        "show_skey": f.show_skey,
    }
    keys = [k for k in (f.pkey, f.skey) if k != MATCH_ALL]
    vals.build_value(f, parts, "match", f.nested_map, keys, params)


def needs(f: MatchFeatureConfig) -> FitNeeds:
    return vals.value_needs(f)


def entries(arr: pa.Array, column: str) -> tuple[np.ndarray, pa.Array, pa.Array, pa.Array, BadRows | None]:
    """(row, primary key, secondary key, value) of every entry of a nested map column."""
    rows, pkeys, inner, bad1 = vals.kv_pairs(arr, "|", "^", column)
    inner = vals.as_text(inner)
    outer, skeys, values, bad2 = vals.kv_pairs(inner, ",", ":", column)
    if bad2 is not None:  # its rows are outer entries: back to batch rows
        bad2 = BadRows(
            rows[bad2.rows], column, "secondary key:value pairs separated by ','", bad2.arr, bad2.arr_rows
        )
    return rows[outer], pkeys.take(pa.array(outer)), skeys, values, vals.merge_bad_rows([bad1, bad2])


def _key(batch: pa.RecordBatch, column: str) -> pa.Array:
    return vals.as_text(_key_column(batch, column))


def _key_column(batch: pa.RecordBatch, column: str) -> pa.Array:
    arr = batch.column(column)
    if vals.is_list(arr.type):
        raise DataError(f"column {column!r}: expected one key per row for a match feature, got {arr.type}")
    return arr


def matched(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, pa.Array, pa.Array, pa.Array, BadRows | None]:
    """(row, primary key, secondary key, value) of every entry matching its row's keys, rows in order."""
    found = _matched_text(e, batch)
    return _first_of_each(e, *(found if found is not None else _matched_arrow(e, batch)))


def _matched_arrow(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, pa.Array, pa.Array, pa.Array, BadRows | None]:
    """The entries equal to their row's keys, of any column :func:`entries` reads."""
    rows, pkeys, skeys, values, bad = entries(batch.column(e.column), e.column)
    # An entry matches where its key equals its own row's key (exact text; a null key matches nothing):
    # one element-wise comparison per side, entries staying in row order and map order within a row.
    hit = np.ones(rows.size, bool)
    take_rows = pa.array(rows)
    for name, keys in (("pkey", pkeys), ("skey", skeys)):
        column = e.params[name]
        if column != MATCH_ALL:
            q = _key(batch, column).take(take_rows).cast(pa.string())
            hit &= as_numpy(pc.fill_null(pc.equal(keys.cast(pa.string()), q), False)).astype(bool)
    take = pa.array(np.flatnonzero(hit), pa.int64())
    return rows[hit], pkeys.take(take), skeys.take(take), values.take(take), bad


def _first_of_each(
    e: SparseFeature | DenseFeature,
    rows: np.ndarray,
    pkeys: pa.Array,
    skeys: pa.Array,
    values: pa.Array,
    bad: BadRows | None,
) -> tuple[np.ndarray, pa.Array, pa.Array, pa.Array, BadRows | None]:
    """The first of each (row, primary, secondary) of the matching entries: a side given by a column holds
    one key per row, so only the ALL sides can tell a row's matches apart."""
    if not rows.size:
        return rows, pkeys, skeys, values, bad
    free = [k for k, name in ((pkeys, "pkey"), (skeys, "skey")) if e.params[name] == MATCH_ALL]
    if free:
        full = vals.combine_codes(rows, *(vals.joint_codes([k])[0] for k in free))
        _, first = np.unique(full, return_index=True)
        keep = np.sort(first)
    else:
        keep = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    if keep.size == rows.size:
        return rows, pkeys, skeys, values, bad
    take = pa.array(keep, pa.int64())
    return rows[keep], pkeys.take(take), skeys.take(take), values.take(take), bad


def _matched_text(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, pa.Array, pa.Array, pa.Array, BadRows | None] | None:
    """:func:`_matched_arrow` of a text column on byte ranges: the text cut level by level without copying
    it, each key compared with its row's key byte by byte, only the matching entries made strings; the same
    entries and bad rows. None for a map or list column (:func:`entries` reads those)."""
    arr = batch.column(e.column)
    if not is_string(arr.type):
        return None
    row_keys = {}
    for name in ("pkey", "skey"):
        if e.params[name] != MATCH_ALL:
            row_keys[name] = _row_key(batch, e.params[name])
    data, starts, ends = text_ranges(arr)
    orow, os, oe = split_ranges(byte_positions(data, starts, ends, "|"), starts, ends)
    caret, has = cut_ranges(byte_positions(data, os, oe, "^"), os, oe)
    bad1 = None
    if not has.all():
        pieces = gather(arr.type, data, os, oe)
        bad1 = BadRows(orow[~has], e.column, "key^value pairs separated by '|'", pieces, np.flatnonzero(~has))
    outer, is_, ie = split_ranges(byte_positions(data, caret + has, oe, ","), caret + has, oe)
    colon, ihas = cut_ranges(byte_positions(data, is_, ie, ":"), is_, ie)
    bad2 = None
    if not ihas.all():
        pieces = gather(arr.type, data, is_, ie)
        at = np.flatnonzero(~ihas)
        bad2 = BadRows(orow[outer[at]], e.column, "secondary key:value pairs separated by ','", pieces, at)
    bad = vals.merge_bad_rows([bad1, bad2])
    # The primary keys first, on the outer entries (fewer), then the secondary keys of their inner ones.
    if "pkey" in row_keys:
        hit = vals.equal_row_keys(row_keys["pkey"], data, os, caret, orow)
        sub = np.flatnonzero(hit[outer])
        outer, is_, ie, colon, ihas = outer[sub], is_[sub], ie[sub], colon[sub], ihas[sub]
    rows = orow[outer]
    if "skey" in row_keys:
        sub = np.flatnonzero(vals.equal_row_keys(row_keys["skey"], data, is_, colon, rows))
        outer, is_, ie, colon, ihas, rows = outer[sub], is_[sub], ie[sub], colon[sub], ihas[sub], rows[sub]
    t = arr.type
    pkeys = gather(t, data, os[outer], caret[outer])
    return rows, pkeys, gather(t, data, is_, colon), gather(t, data, colon + ihas, ie), bad


def _row_key(batch: pa.RecordBatch, column: str) -> vals.RowKeys:
    """The keys of a key column (:func:`_key`), its null keys none."""
    arr = _key_column(batch, column)
    return vals.row_keys(
        arr, as_numpy(arr.is_valid()).astype(bool) if arr.null_count else np.ones(len(arr), bool)
    )


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    n = batch.num_rows
    rows, pkeys, skeys, values, bad = matched(f, batch)
    if f.boundaries is None:
        parts = [
            k.cast(pa.string())
            for k, show in ((pkeys, f.params["show_pkey"]), (skeys, f.params["show_skey"]))
            if show
        ]
        text = vals.as_text(values)
        if parts:
            text = pc.binary_join_element_wise(*parts, text, "_")
        ids, lengths, id_bad = vals.id_out(f, rows, text, n, f.column)
        return ids, lengths, vals.merge_bad_rows([bad, id_bad])
    return vals.number_buckets(f, rows, values, n, bad, f"a value of feature {f.name!r}")


def dense(d: DenseFeature, batch: pa.RecordBatch) -> DenseOut:
    rows, _, _, values, bad = matched(d, batch)
    return vals.combined_dense(d, rows, values, batch.num_rows, bad, f"a value of feature {d.name!r}")


def column(e: SparseFeature | DenseFeature) -> tuple[ColumnKind, str]:
    return "text", ANY


def inputs(e: SparseFeature | DenseFeature) -> dict[str, tuple[ColumnKind, str]]:
    return {e.column: ("text", ANY), **{c: ("id", ANY) for c in e.inputs}}


KIND = FeatureKind(
    name="match", build=build, column=column, inputs=inputs, needs=needs, sparse=sparse, dense=dense
)
