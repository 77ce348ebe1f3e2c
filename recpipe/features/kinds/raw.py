"""Kind ``raw``: a numeric column → one column of ``Batch.dense`` (``log(x+C)``, ``zscore``), or, with
``boundaries`` (listed or fitted from quantiles), a bucket id looked up in an embedding table.

With ``value_dim`` > 1 the column holds a vector (TorchEasyRec's embedding feature, docs/source/feature/
feature.md: ``"0.1|0.2|0.3|0.4"`` with ``separator: "|"``, or an ``ARRAY<float>`` / list column): it becomes
``value_dim`` dense columns ``<name>__0`` … (a group listing the feature gets all of them), or, with
``boundaries``, ``value_dim`` bucket ids of one pooled key, each value bucketized on its own (as TorchEasyRec's
raw_feature_test: ``"0.2\x1d0.5"`` → ``[2, 3]``). A missing row (null, "", an empty list) takes ``default``;
a row of another count of values, or a value that is not a number, is a bad row.

Example::

    # pic_emb, value_dim 3, separator "|"
    FeatureGenerator(spec)(pa.table({"pic_emb": ["0.1|0.2|0.3", None]})).dense   # [[.1, .2, .3], [0, 0, 0]]
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import MULTI_VALUE_SEPARATOR, RawFeatureConfig, vector_key
from recpipe.features.columns import BadRows, as_numpy, is_string, present_mask, to_float
from recpipe.features.kinds.base import (
    LIST_OF,
    NUMERIC,
    ColumnKind,
    DenseOut,
    FeatureKind,
    FitNeeds,
    SparseOut,
    SpecParts,
)
from recpipe.features.spec import DenseFeature, FeatureSpecError, IdMapping, SparseFeature

_LOG = re.compile(r"log\(\s*x\s*\+\s*([0-9.]+)\s*\)")


def parse_normalizer(expr: str | None) -> tuple[float | None, bool]:
    """``"log(x+3),zscore"`` → ``(3.0, True)``."""
    if not expr:
        return None, False
    m = _LOG.search(expr)
    return (float(m.group(1)) if m else None), "zscore" in expr


def _vector_params(f: RawFeatureConfig) -> dict:
    params: dict = {"value_dim": f.value_dim}
    if f.separator != MULTI_VALUE_SEPARATOR:
        params["separator"] = f.separator
    return params


def build(f: RawFeatureConfig, parts: SpecParts) -> None:
    column = f.source_column
    if f.value_dim > 1:
        _build_vector(f, parts)
        return
    if parts.encoded and f.num_quantile_buckets is not None:
        raise FeatureSpecError(
            f"feature {f.name!r}: pre-encoded input holds bucket ids; give its boundaries, "
            "not num_quantile_buckets (nothing to fit)"
        )
    if parts.encoded and f.boundaries is not None:
        # FG_NONE: the column holds the bucket id FG computed from the boundaries: an id of kind "id".
        parts.add_table(f, column, IdMapping("identity", len(f.boundaries) + 1), "id")
    elif f.boundaries is not None or f.num_quantile_buckets is not None:
        bounds = list(f.boundaries) if f.boundaries is not None else []
        parts.add_table(
            f, column, IdMapping("identity", len(bounds) + 1), "raw", boundaries=bounds, raw_default=f.default
        )
    else:
        log_offset, _ = parse_normalizer(f.normalizer)
        parts.dense.append(
            DenseFeature(
                name=f.name,
                column=column,
                default=f.default,
                log_offset=log_offset,
                kind="raw",
                embedding=f.dense_embedding(),
            )
        )


def _build_vector(f: RawFeatureConfig, parts: SpecParts) -> None:
    if parts.encoded and f.boundaries is not None:
        raise FeatureSpecError(
            f"feature {f.name!r}: pre-encoded input (data.fg_encoded) of a bucketized raw feature with "
            "value_dim > 1 (value_dim bucket ids a row) is not supported yet"
        )
    # Pre-encoded (TorchEasyRec's FG_NONE, _parse_fg_encoded_dense_feature_impl): the column holds FG's
    # value_dim numbers, as text by a separator or a list, read as an unencoded vector is.
    defaults = f.defaults()
    if f.boundaries is not None:
        params = _vector_params(f)
        if isinstance(f.default, list):
            params["default"] = defaults
        parts.add_table(
            f,
            f.source_column,
            IdMapping("identity", len(f.boundaries) + 1),
            "raw",
            boundaries=list(f.boundaries),
            raw_default=defaults[0],
            params=params,
        )
        return
    log_offset, _ = parse_normalizer(f.normalizer)
    for i, default in enumerate(defaults):
        parts.dense.append(
            DenseFeature(
                name=vector_key(f.name, i),
                column=f.source_column,
                default=default,
                log_offset=log_offset,
                kind="raw",
                params={**_vector_params(f), "index": i},
            )
        )


# The last vector column parsed in this thread, with the array it came from: the value_dim dense columns of a
# vector each ask for it, and it is parsed once. Holding the array keeps its buffers alive, so their addresses
# name it.
_LAST = threading.local()


def _identity(arr: pa.Array) -> tuple:
    return (arr.type, arr.offset, len(arr), *(b.address if b is not None else 0 for b in arr.buffers()))


def vectors(
    arr: pa.Array, value_dim: int, separator: str, column: str
) -> tuple[np.ndarray, np.ndarray, BadRows | None]:
    """A vector column as ``(values (B, value_dim) float64, missing (B,) bool, bad rows or None)``.

    A text value is split by ``separator``, a list column read as it is; a missing row (null, "", an empty list)
    is ``missing`` (its values 0 here: each column's default fills them); a row of another count of values or a
    value that is not a finite number is a bad row (its values 0).
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    key = (_identity(arr), value_dim, separator)
    last = getattr(_LAST, "entry", None)
    if last is not None and last[0] == key:
        return last[2]
    n = len(arr)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        flat = pc.list_flatten(arr)
        counts = as_numpy(pc.fill_null(pc.list_value_length(arr), 0)).astype(np.int64)
        if pa.types.is_null(flat.type):
            flat = pa.nulls(len(flat), pa.float64())
    elif is_string(arr.type):
        items = pc.split_pattern(pc.fill_null(arr, "") if arr.null_count else arr, pattern=separator)
        flat = pc.list_flatten(items)
        counts = as_numpy(pc.list_value_length(items)).astype(np.int64)
        counts[~present_mask(arr) | (as_numpy(pc.fill_null(pc.binary_length(arr), 0)) == 0)] = 0
        flat = flat.filter(pa.array(np.repeat(counts > 0, as_numpy(pc.list_value_length(items)))))
    else:  # one number per row: a vector only where value_dim values fit, so a bad row unless missing
        present = present_mask(arr)
        flat, counts = arr.filter(pa.array(present)), present.astype(np.int64)
    missing = counts == 0
    rows = np.repeat(np.arange(n), counts)
    x, not_numbers = to_float(flat, np.nan, column)
    wrong = ~missing & (counts != value_dim)
    bad_values = np.flatnonzero(np.isnan(x))  # a null element (a missing value inside a vector)
    if not_numbers is not None:  # a piece that is not a finite number ("", "abc", "inf")
        bad_values = np.union1d(bad_values, not_numbers.rows)
    wrong[rows[bad_values]] = True
    out = np.zeros((n, value_dim), np.float64)
    fill = ~missing & ~wrong
    out[fill] = x[fill[rows]].reshape(-1, value_dim)
    bad = None
    if wrong.any():
        bad = BadRows(
            np.flatnonzero(wrong), column, f"{value_dim} numbers separated by {separator!r} (or a list)", arr
        )
    result = (out, missing, bad)
    _LAST.entry = (key, arr, result)
    return result


def needs(f: RawFeatureConfig) -> FitNeeds:
    out = FitNeeds()
    if f.num_quantile_buckets is not None and f.boundaries is None:
        out.quantiles[f.name] = f.num_quantile_buckets
    offset, z = parse_normalizer(f.normalizer)
    if z and f.boundaries is None and f.num_quantile_buckets is None:
        out.zscore[f.name] = offset
    return out


def bucket(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    """Bucket ids ``searchsorted(boundaries, x, side="right")``: one per row (a null is ``raw_default``), or
    value_dim per row of a vector feature."""
    bounds = np.asarray(f.boundaries, np.float64)
    value_dim = int(f.params.get("value_dim", 1))
    if value_dim > 1:
        sep = f.params.get("separator", MULTI_VALUE_SEPARATOR)
        x, missing, bad = vectors(batch.column(f.column), value_dim, sep, f.column)
        default = np.asarray(f.params.get("default", [f.raw_default] * value_dim), np.float64)
        x = np.where(missing[:, None], default[None, :], x)
        ids = np.searchsorted(bounds, x.ravel(), side="right").astype(np.int64)
        return ids, np.full(batch.num_rows, value_dim, np.int32), bad
    x, bad = to_float(batch.column(f.column), f.raw_default, f.column)
    ids = np.searchsorted(bounds, x, side="right").astype(np.int64)
    return ids, np.ones(batch.num_rows, np.int32), bad


def dense(d: DenseFeature, batch: pa.RecordBatch) -> DenseOut:
    """``(log(x + C) - mean) / std`` of one column (a null is ``default``), or of value ``index`` of a vector
    column; ``x + C <= 0`` is a bad row."""
    arr = batch.column(d.column)
    if "index" in d.params:
        sep = d.params.get("separator", MULTI_VALUE_SEPARATOR)
        matrix, missing, bad = vectors(arr, int(d.params["value_dim"]), sep, d.column)
        x = np.where(missing, d.default, matrix[:, int(d.params["index"])])
    else:
        x, bad = to_float(arr, d.default, d.column)
    bads = [bad] if bad is not None else []
    if d.log_offset is not None:
        shifted = x + d.log_offset
        nonpos = shifted <= 0
        if nonpos.any():
            expected = f"a value > {-d.log_offset} for log(x+{d.log_offset:g})"
            bads.append(BadRows(np.flatnonzero(nonpos), d.column, expected, arr))
            shifted = np.where(nonpos, 1.0, shifted)
        x = np.log(shifted)
    return (x - d.mean) / d.std, bads


def column(entry: SparseFeature | DenseFeature) -> tuple[ColumnKind, str]:
    return "float", NUMERIC + LIST_OF if entry.params.get("value_dim", 1) > 1 else NUMERIC


KIND = FeatureKind(name="raw", build=build, column=column, needs=needs, sparse=bucket, dense=dense)
