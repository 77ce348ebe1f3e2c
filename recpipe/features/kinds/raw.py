"""Kind ``raw``: a numeric column → one column of ``Batch.dense`` (``log(x+C)``, ``zscore``), or, with
``boundaries`` (listed or fitted from quantiles), a bucket id looked up in an embedding table."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from recpipe.config.features import RawFeatureConfig
from recpipe.features.columns import BadRows, to_float
from recpipe.features.kinds.base import (
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


def build(f: RawFeatureConfig, parts: SpecParts) -> None:
    column = f.source_column
    if parts.encoded and f.num_quantile_buckets is not None:
        raise FeatureSpecError(
            f"feature {f.name!r}: pre-encoded input holds bucket ids; give its boundaries, "
            "not num_quantile_buckets (nothing to fit)"
        )
    if parts.encoded and f.boundaries is not None:
        # FG_NONE: the column holds the bucket id FG computed from the boundaries: an id of kind "id".
        parts.sparse.append(
            SparseFeature(
                name=f.name,
                column=column,
                mapping=IdMapping("identity", len(f.boundaries) + 1),
                table=f.embedding_name or f.name,
                embedding_dim=f.embedding_dim,
                kind="id",
            )
        )
    elif f.boundaries is not None or f.num_quantile_buckets is not None:
        bounds = list(f.boundaries) if f.boundaries is not None else []
        parts.sparse.append(
            SparseFeature(
                name=f.name,
                column=column,
                mapping=IdMapping("identity", len(bounds) + 1),
                table=f.embedding_name or f.name,
                embedding_dim=f.embedding_dim,
                boundaries=bounds,
                raw_default=f.default,
                kind="raw",
            )
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


def needs(f: RawFeatureConfig) -> FitNeeds:
    out = FitNeeds()
    if f.num_quantile_buckets is not None and f.boundaries is None:
        out.quantiles[f.name] = f.num_quantile_buckets
    offset, z = parse_normalizer(f.normalizer)
    if z and f.boundaries is None and f.num_quantile_buckets is None:
        out.zscore[f.name] = offset
    return out


def bucket(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    """Bucket ids ``searchsorted(boundaries, x, side="right")``: one per row (a null is ``raw_default``)."""
    x, bad = to_float(batch.column(f.column), f.raw_default, f.column)
    ids = np.searchsorted(np.asarray(f.boundaries, np.float64), x, side="right").astype(np.int64)
    return ids, np.ones(batch.num_rows, np.int32), bad


def dense(d: DenseFeature, batch: pa.RecordBatch) -> DenseOut:
    """``(log(x + C) - mean) / std`` of one column (a null is ``default``); ``x + C <= 0`` is a bad row."""
    arr = batch.column(d.column)
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
    return "float", NUMERIC


KIND = FeatureKind(name="raw", build=build, column=column, needs=needs, sparse=bucket, dense=dense)
