"""Kind ``kv_dot_product`` (TorchEasyRec's ``kv_dot_product``): the dot product of the key:value vectors of a
``query`` and a ``document`` column of the same row, one number per row (a dense column, or with
``boundaries`` a bucket id).

Each side is ``"a:0.5|b:0.5"`` text (``separator``, default ``\\x1d``; ``kv_delimiter``, default ``:``), a
list of such strings, an Arrow map (``{"a": 0.5}``), a list of (key, value) structs, or a set of keys (text
without values, a list of ids, one id): a key without a value weighs 1, so two key sets give the size of their
intersection (feature.md, KvDotProduct: ``["a", "b", "c"]`` · ``["a", "b", "d"]`` = 2.0, and
``["a", "b", "c"]`` · ``{"a": 0.5, "b": 0.5}`` = 1.0). Keys are compared as text (an id ``7`` is ``"7"``).

Where TorchEasyRec's docs leave it open, recpipe chooses: a key written twice on one side takes its first
value (as kind ``lookup``); a row where either side has no entry (null, ``""``, an empty list, an absent
column) takes ``default_value`` (TorchEasyRec's default ``"0"``); two sides without a common key give 0. A
value that is not a finite number is a bad row of its column.

Vectorized: both columns are parsed once per batch, keys coded jointly and matched by sorted
``(row, key code)``; no loop per row.

Example::

    # query "a:0.5|b:0.5", document "d:0.5|b:0.5" (separator "|") → 0.25
    KIND.dense(spec.dense[0], batch)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from recpipe.config.features import KvDotProductFeatureConfig
from recpipe.features.columns import BadRows, is_string
from recpipe.features.kinds import values as vals
from recpipe.features.kinds.base import ANY, ColumnKind, DenseOut, FeatureKind, FitNeeds, SparseOut, SpecParts
from recpipe.features.spec import DenseFeature, SparseFeature


def build(f: KvDotProductFeatureConfig, parts: SpecParts) -> None:
    params = {"separator": f.separator, "kv_delimiter": f.kv_delimiter}
    vals.build_value(f, parts, "kv_dot_product", f.query, [f.document], params)


def needs(f: KvDotProductFeatureConfig) -> FitNeeds:
    return vals.value_needs(f)


def entries(
    arr: pa.Array, sep: str, kv: str, column: str, what: str
) -> tuple[np.ndarray, pa.Array, np.ndarray, list[BadRows]]:
    """(row, key as text, weight) of every entry of one side; a bare key weighs 1."""
    t = arr.type
    keyed = is_string(t) or pa.types.is_map(t)
    if vals.is_list(t) and not pa.types.is_map(t):
        keyed = is_string(t.value_type) or pa.types.is_struct(t.value_type)
    if not keyed:  # ids: a list of numbers, or one per row
        rows, items = vals.multi_values(arr, sep, column)
        return rows, vals.as_text(items), np.ones(rows.size, np.float64), []
    rows, keys, values, bad = vals.kv_pairs(arr, sep, kv, column, bare_value="1")
    x, keep, num_bad = vals.numbers(values, rows, column, what)
    bads = [b for b in (bad, num_bad) if b is not None]
    if not keep.all():  # a null value (a map's null item) is no entry
        mask = pa.array(keep)
        rows, keys, x = rows[keep], keys.filter(mask), x[keep]
    return rows, keys, x, bads


def _first_per_key(rows: np.ndarray, codes: np.ndarray, width: int) -> np.ndarray:
    """Positions of the first entry of each (row, key): a key written twice takes its first value."""
    _, first = np.unique(rows * width + codes, return_index=True)
    return np.sort(first)


def dot(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, np.ndarray, list[BadRows]]:
    """(dot product per row, whether both sides have an entry, bad rows)."""
    n = batch.num_rows
    sep, kv = e.params["separator"], e.params["kv_delimiter"]
    doc = e.inputs[0]
    what = f"the value of a key of feature {e.name!r}"
    qrows, qkeys, qx, qbad = entries(batch.column(e.column), sep, kv, e.column, what)
    drows, dkeys, dx, dbad = entries(batch.column(doc), sep, kv, doc, what)
    qcodes, dcodes = vals.joint_codes([qkeys, dkeys])
    width = int(max(qcodes.max(initial=0), dcodes.max(initial=0))) + 1
    q = _first_per_key(qrows, qcodes, width)
    d = _first_per_key(drows, dcodes, width)
    qrows, qcodes, qx = qrows[q], qcodes[q], qx[q]
    drows, dcodes, dx = drows[d], dcodes[d], dx[d]
    pos = vals.find_first(drows * width + dcodes, qrows * width + qcodes)
    hit = pos >= 0
    out = np.bincount(qrows[hit], weights=qx[hit] * dx[pos[hit]], minlength=n)[:n]
    has = (np.bincount(qrows, minlength=n)[:n] > 0) & (np.bincount(drows, minlength=n)[:n] > 0)
    return out, has, [*qbad, *dbad]


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    n = batch.num_rows
    x, has, bads = dot(f, batch)
    rows = np.flatnonzero(has)
    return vals.bucket_out(f, rows, x[rows], n, vals.merge_bad_rows(bads))


def dense(d: DenseFeature, batch: pa.RecordBatch) -> DenseOut:
    x, has, bads = dot(d, batch)
    return vals.dense_out(d, x, has, bads)


# Read as ids: a key set of ids in a float column (pandas with NaN) is ids, ``7.0`` the key ``"7"``.
def column(e: SparseFeature | DenseFeature) -> tuple[ColumnKind, str]:
    return "id", ANY


def inputs(e: SparseFeature | DenseFeature) -> dict[str, tuple[ColumnKind, str]]:
    return {e.column: ("id", ANY), e.inputs[0]: ("id", ANY)}


KIND = FeatureKind(
    name="kv_dot_product", build=build, column=column, inputs=inputs, needs=needs, sparse=sparse, dense=dense
)
