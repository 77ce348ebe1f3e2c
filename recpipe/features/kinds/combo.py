"""Kind ``combo``: the cross of two or more columns → one pooled KJT key (TorchEasyRec's ``combo_feature``).

Each row's ids are the cartesian product of its columns' values, in order (the first column's values outermost,
as TorchEasyRec's ``["ua\\x1dub", "ia\\x1dib"]`` gives ``ua_ia, ua_ib, ub_ia, ub_ib``). A column's values are
read as a multi-value id's (:func:`recpipe.features.kinds.id.split_values`: ``separator``, list columns, an
empty piece is no value, ``123`` / ``"123"`` / ``123.0`` the same value). A crossed value is the text of its
parts joined by ``"_"`` (TorchEasyRec's join: its vocabulary tests list ``"ua_ia"``), mapped by
``hash_bucket_size`` (FNV-1a 64 of that text, as every recpipe hash), a vocabulary (listed, from a file or
fitted with ``min_freq``) or zch keys. A row where any column has no value has no crossed value; it takes
``default_value`` as its one value when that is set (TorchEasyRec's rule: the default replaces the whole
cross, not a missing part). ``value_dim`` keeps a row's first crossed values.

The product is vectorized over all rows at once: one ``repeat`` per column over the rows' value counts, no
loop per row.

Example::

    # columns [uid, iid], vocab_list [ua_ia, ua_ib, ub_ia], default_bucketize_value 0
    crossed(f, pa.record_batch({"uid": ["ua\\x1dub", "ua"], "iid": ["ia\\x1dib", ""]}))
    # values [0, 1, 2, 0] (ub_ib is out of the vocabulary), lengths [4, 0]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import MULTI_VALUE_SEPARATOR, ComboFeatureConfig
from recpipe.features.hashing import to_string_array
from recpipe.features.kinds.base import ANY, ColumnKind, FeatureKind, FitNeeds, SparseOut, SpecParts
from recpipe.features.kinds.id import (
    first_values,
    id_mapping,
    map_values,
    multi_params,
    split_values,
    with_default,
    zch_settings,
)
from recpipe.features.spec import FeatureSpecError, IdMapping, SparseFeature

# TorchEasyRec's join of a crossed value's parts (tzrec/features/combo_feature_test.py: "ua_ia").
COMBO_JOIN = "_"


def build(f: ComboFeatureConfig, parts: SpecParts) -> None:
    if parts.encoded:
        # FG_NONE: the column named after the feature holds the crossed ids FG wrote (a multi-value id; with
        # zch the raw ids its managed-collision module remaps, as an id feature's).
        if f.hash_bucket_size is None:
            raise FeatureSpecError(
                f"combo feature {f.name!r}: pre-encoded input (data.fg_encoded) needs hash_bucket_size (the "
                "table size)"
            )
        mapping, column, inputs, kind = IdMapping("identity", f.hash_bucket_size), f.name, [], "id"
    else:
        mapping, column, inputs, kind = id_mapping(f), f.columns[0], list(f.columns[1:]), "combo"
    parts.add_table(
        f, column, mapping, kind, pooling=f.pooling, **zch_settings(f), inputs=inputs, params=multi_params(f)
    )


def needs(f: ComboFeatureConfig) -> FitNeeds:
    return FitNeeds(vocab={f.name: f.min_freq}) if f.min_freq is not None else FitNeeds()


def _text(values: pa.Array) -> pa.Array:
    return to_string_array(values).cast(pa.large_string())


def cross(
    batch: pa.RecordBatch, columns: list[str], separator: str
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Every crossed value of every row: ``(text values, row of each value, count per row)``.

    Example::

        cross(pa.record_batch({"a": ["1\\x1d2", "3"], "b": ["x", None]}), ["a", "b"], "\\x1d")
        # (["1_x", "2_x"], [0, 0], [2, 0])
    """
    flat, rows, counts = split_values(batch.column(columns[0]), separator)
    flat = _text(flat)
    n = batch.num_rows
    for column in columns[1:]:
        other, _, other_counts = split_values(batch.column(column), separator)
        out_counts = counts * other_counts
        out_rows = np.repeat(np.arange(n), out_counts)
        within = np.arange(len(out_rows)) - np.repeat(np.cumsum(out_counts) - out_counts, out_counts)
        inner = other_counts[out_rows]
        left = (np.cumsum(counts) - counts)[out_rows] + within // np.maximum(inner, 1)
        right = (np.cumsum(other_counts) - other_counts)[out_rows] + within % np.maximum(inner, 1)
        flat = pc.binary_join_element_wise(
            flat.take(pa.array(left, pa.int64())),
            _text(other).take(pa.array(right, pa.int64())),
            pa.scalar(COMBO_JOIN, pa.large_string()),
        )
        rows, counts = out_rows, out_counts
    return flat, rows, counts


def _columns(f: SparseFeature) -> list[str]:
    return [f.column, *f.inputs]


def crossed(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    """The crossed ids of each row (``default_value`` for a row without any, ``value_dim`` first ones kept)."""
    flat, rows, counts = cross(batch, _columns(f), f.params.get("separator", MULTI_VALUE_SEPARATOR))
    flat, rows, counts = with_default(flat, rows, counts, f.mapping.default_value)
    value_dim = int(f.params.get("value_dim", 0))
    keep = first_values(rows, counts, value_dim)
    if keep is not None:
        flat, rows, counts = flat.take(pa.array(keep)), rows[keep], np.minimum(counts, value_dim)
    values, bad = map_values(flat, rows, f, f.column)
    return values, counts.astype(np.int32), bad


def fit_values(f: SparseFeature, batch: pa.RecordBatch) -> pa.Array:
    """The crossed values a fitted vocabulary (``min_freq``) counts."""
    return cross(batch, _columns(f), f.params.get("separator", MULTI_VALUE_SEPARATOR))[0]


def column(f: SparseFeature) -> tuple[ColumnKind, str]:
    return "id", ANY


def inputs(f: SparseFeature) -> dict[str, tuple[ColumnKind, str]]:
    return {c: column(f) for c in _columns(f)}


KIND = FeatureKind(
    name="combo",
    build=build,
    column=column,
    inputs=inputs,
    needs=needs,
    sparse=crossed,
    fit_values=fit_values,
)
