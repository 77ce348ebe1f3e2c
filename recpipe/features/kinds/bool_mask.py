"""Kind ``bool_mask`` (TorchEasyRec's ``bool_mask_feature``): the values of a multi-value column kept where a
``mask`` column of the same row is true, like ``tf.boolean_mask(values, mask)``, as ids of one pooled key
(mapped like an id feature's: hash_bucket_size / num_buckets / vocab_list / vocab_file).

Both columns are text split by ``separator`` (default ``\\x1d``) or list columns (feature.md,
BoolMaskFeature: ``"123,456,90,80"`` with ``"true,false,true,false"`` or ``[1, 0, 1, 0]`` keeps ``["123",
"90"]``; ``[1, 2, 3, 4]`` keeps ``[1, 3]``). A mask item is ``true`` / ``false`` (any case), ``1`` / ``0``
(text or numbers) or a bool.

Where TorchEasyRec's docs leave it open, recpipe chooses: a row whose values and mask have different
lengths, or whose mask holds anything else, is a bad row of the mask column; a row where either column is
missing (null, ``""``, an empty list, an absent column) keeps nothing; a row that keeps nothing takes
``default_value`` (mapped like a kept value), or has no id when it is None (TorchEasyRec's default ``""``).

Vectorized: both columns are flattened once per batch and compared item by item; no loop per row.

Example::

    # values "123,456,90,80", mask "true,false,true,false" (separator ",") → ids of "123" and "90"
    KIND.sparse(spec.sparse[0], batch)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import BoolMaskFeatureConfig
from recpipe.features.columns import BadRows, as_numpy, is_string
from recpipe.features.kinds.base import ANY, ColumnKind, FeatureKind, SparseOut, SpecParts
from recpipe.features.kinds.values import as_text, id_out, merge_bad_rows, multi_values, value_mapping
from recpipe.features.spec import FeatureSpecError, SparseFeature

MASK_EXPECTED = "mask items true/false or 1/0, as many as the values"


def build(f: BoolMaskFeatureConfig, parts: SpecParts) -> None:
    if parts.encoded:
        raise FeatureSpecError(
            f"feature {f.name!r}: kind bool_mask reads its input columns; pre-encoded input (data.fg_encoded) "
            "holds FG's output, which kind id reads"
        )
    parts.add_table(
        f,
        f.source_column,
        value_mapping(f),
        "bool_mask",
        pooling=f.pooling,
        inputs=[f.mask],
        params={"separator": f.separator, "default_value": f.default_value},
    )


def mask_items(items: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(true, readable) of each mask item."""
    if pa.types.is_boolean(items.type):
        return as_numpy(items).astype(bool), np.ones(len(items), bool)
    if is_string(items.type):
        text = pc.utf8_lower(pc.utf8_trim_whitespace(items))
        true = as_numpy(pc.is_in(text, pa.array(["true", "1"]))).astype(bool)
        false = as_numpy(pc.is_in(text, pa.array(["false", "0"]))).astype(bool)
        return true, true | false
    if pa.types.is_integer(items.type) or pa.types.is_floating(items.type):
        x = as_numpy(items).astype(np.float64)
        return x == 1, (x == 1) | (x == 0)
    return np.zeros(len(items), bool), np.zeros(len(items), bool)


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    n = batch.num_rows
    sep, mask_column = f.params["separator"], f.inputs[0]
    vrows, values = multi_values(batch.column(f.column), sep, f.column)
    mrows, masks = multi_values(batch.column(mask_column), sep, mask_column)
    vcount = np.bincount(vrows, minlength=n)[:n]
    mcount = np.bincount(mrows, minlength=n)[:n]
    true, readable = mask_items(masks)
    unreadable = np.bincount(mrows[~readable], minlength=n)[:n] > 0
    bad_row = ((vcount != mcount) & (vcount > 0) & (mcount > 0)) | unreadable
    # Rows where both columns hold items, as many of each: item k of the values is item k of the mask.
    paired = (vcount == mcount) & (vcount > 0) & ~bad_row
    vin, min_ = paired[vrows], paired[mrows]
    keep = np.zeros(vrows.size, bool)
    keep[np.flatnonzero(vin)] = true[min_]
    rows = vrows[keep]
    kept = as_text(values).filter(pa.array(keep))
    ids, lengths, bad = id_out(f, rows, kept, n, f.column)
    mask_bad = None
    if bad_row.any():
        where = np.flatnonzero(bad_row)
        mask_bad = BadRows(where, mask_column, f"{MASK_EXPECTED} (feature {f.name!r})")
    return ids, lengths, merge_bad_rows([mask_bad, bad])


def column(e: SparseFeature) -> tuple[ColumnKind, str]:
    return "id", ANY


def inputs(e: SparseFeature) -> dict[str, tuple[ColumnKind, str]]:
    return {e.column: ("id", ANY), e.inputs[0]: ("id", ANY)}


KIND = FeatureKind(name="bool_mask", build=build, column=column, inputs=inputs, sparse=sparse)
