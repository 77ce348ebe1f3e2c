"""Kind ``lookup`` (TorchEasyRec's ``lookup_feature``): the value(s) of the ``key`` column looked up in the
``map`` column of the same row, e.g. the user's click count of the candidate's category.

``map`` is ``"k1:v1\\x1dk2:v2"`` text (``:`` and ``\\x1d`` are fixed, as in TorchEasyRec), a list of such
strings, an Arrow map (``map<string, float>``…) or a list of (key, value) structs. ``key`` is one id or
several (``separator`` text, or a list column). The values found are combined (``combiner``: sum, mean,
min, max, count) into one dense column, or bucketized (``boundaries``; combiner ``""`` buckets each
value), or mapped as ids (hash_bucket_size / num_buckets / vocab_list / vocab_file; ``need_key`` prefixes
each with its key, ``"<key>_<value>"``). A row where nothing is found takes ``default_value`` (None: no id; a
dense 0). A key found twice in one map takes its first value.

Vectorized: both columns are parsed once per batch, keys coded jointly and matched by sorted
``(row, key code)``; no loop per row.

Example::

    # map "ca:1\\x1dcb:2", key "ca\\x1dcb", combiner sum → 3.0; key "cd" → default_value 0
    KIND.dense(spec.dense[0], batch)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import LookupFeatureConfig
from recpipe.features.columns import BadRows, as_numpy, is_string
from recpipe.features.kinds import values as vals
from recpipe.features.kinds.base import ANY, ColumnKind, DenseOut, FeatureKind, FitNeeds, SparseOut, SpecParts
from recpipe.features.spec import DenseFeature, SparseFeature
from recpipe.features.text import (
    byte_positions,
    cut_ranges,
    gather,
    split_ranges,
    text_has,
    text_ranges,
)

PAIR_SEPARATOR = "\x1d"
KV_SEPARATOR = ":"


def build(f: LookupFeatureConfig, parts: SpecParts) -> None:
    params = {"separator": f.separator, "combiner": f.combiner, "need_key": f.need_key}
    vals.build_value(f, parts, "lookup", f.map, [f.key], params)


def needs(f: LookupFeatureConfig) -> FitNeeds:
    return vals.value_needs(f)


def found(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, pa.Array, pa.Array, BadRows | None]:
    """(row, key, value) of every key found in its row's map, rows in order."""
    fast = _found_text(e, batch)
    return fast if fast is not None else _found_arrow(e, batch)


def _found_arrow(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, pa.Array, pa.Array, BadRows | None]:
    """:func:`found` of any map and key column: keys coded jointly, matched by sorted ``(row, key code)``."""
    key_column = e.inputs[0]
    mrows, mkeys, mvalues, bad = vals.kv_pairs(batch.column(e.column), PAIR_SEPARATOR, KV_SEPARATOR, e.column)
    qrows, qkeys = vals.multi_values(batch.column(key_column), e.params["separator"], key_column)
    qkeys = vals.as_text(qkeys)
    mcode, qcode = vals.joint_codes([mkeys, qkeys])
    width = int(max(mcode.max(initial=0), qcode.max(initial=0))) + 1
    pos = vals.find_first(mrows * width + mcode, qrows * width + qcode)
    hit = pos >= 0
    take = pa.array(pos[hit])
    return qrows[hit], qkeys.filter(pa.array(hit)), mvalues.take(take), bad


def _found_text(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, pa.Array, pa.Array, BadRows | None] | None:
    """:func:`_found_arrow` of a text map and one key per row (a column of single values, or text without
    ``separator``), on byte ranges: each map entry's key compared with its row's key (:func:`~recpipe.features.kinds.values.equal_row_keys`), the
    first equal one's value made a string. None otherwise."""
    arr, keys = batch.column(e.column), batch.column(e.inputs[0])
    if not is_string(arr.type) or vals.is_list(keys.type) or pa.types.is_struct(keys.type):
        return None
    if is_string(keys.type):
        if text_has(keys, e.params["separator"]):
            return None
        valid = as_numpy(pc.fill_null(pc.not_equal(keys, ""), False)).astype(bool)  # "" is no key
    else:
        valid = as_numpy(keys.is_valid()).astype(bool) if keys.null_count else np.ones(len(keys), bool)
    data, starts, ends = text_ranges(arr)
    rows, ps, pe = split_ranges(byte_positions(data, starts, ends, PAIR_SEPARATOR), starts, ends)
    cut, has = cut_ranges(byte_positions(data, ps, pe, KV_SEPARATOR), ps, pe)
    bad = None
    if not has.all():
        expected = f"key{KV_SEPARATOR}value pairs separated by {PAIR_SEPARATOR!r}"
        pieces = gather(arr.type, data, ps, pe)
        bad = BadRows(rows[~has], e.column, expected, pieces, np.flatnonzero(~has))
    hit = vals.equal_row_keys(vals.row_keys(keys, valid), data, ps, cut, rows)
    at = np.flatnonzero(hit)
    # A key found twice in its row's map takes its first value: the first hit of each row.
    at = at[np.r_[True, rows[at][1:] != rows[at][:-1]]] if at.size else at
    found_rows = rows[at]
    values = gather(arr.type, data, cut[at] + has[at], pe[at])
    return found_rows, vals.as_text(keys.take(pa.array(found_rows))), values, bad


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    n = batch.num_rows
    rows, keys, values, bad = found(f, batch)
    if f.boundaries is None:
        text = vals.as_text(values)
        if f.params["need_key"]:
            text = pc.binary_join_element_wise(keys.cast(pa.string()), text, "_")
        ids, lengths, id_bad = vals.id_out(f, rows, text, n, f.column)
        return ids, lengths, vals.merge_bad_rows([bad, id_bad])
    return vals.number_buckets(f, rows, values, n, bad, f"the value of a key of feature {f.name!r}")


def dense(d: DenseFeature, batch: pa.RecordBatch) -> DenseOut:
    rows, _, values, bad = found(d, batch)
    return vals.combined_dense(
        d, rows, values, batch.num_rows, bad, f"the value of a key of feature {d.name!r}"
    )


def column(e: SparseFeature | DenseFeature) -> tuple[ColumnKind, str]:
    return "text", ANY


def inputs(e: SparseFeature | DenseFeature) -> dict[str, tuple[ColumnKind, str]]:
    return {e.column: ("text", ANY), e.inputs[0]: ("id", ANY)}


KIND = FeatureKind(
    name="lookup", build=build, column=column, inputs=inputs, needs=needs, sparse=sparse, dense=dense
)
