"""Kind ``sequence_raw`` (TorchEasyRec's ``sequence_raw_feature``): one history column of numbers,
``"0.1;0.2"``, → one jagged KJT key named after the feature, each item bucketized by ``boundaries``
(``searchsorted(boundaries, x, side="right")``, a raw feature's bucket; an empty item is ``default``).
Pre-encoded input holds the bucket ids. With ``dense: true`` (TorchEasyRec's sequence_raw_feature without
boundaries) each item is ``value_dim`` floats, carried as a grouped dense sub-feature's (``item_float`` keys:
the key named after the feature, or ``<name>__<i>`` for value_dim > 1); a group pairs it with a dense query
feature by position as any history key.

Example::

    # kind: sequence_raw, name: price_seq, boundaries: [0.05, 0.15, 0.25], sequence_length: 50
    # rows "0.1;0.2", "", "0.3"  ->  values [1, 2, 3], lengths [2, 0, 1]
    # dense: true, value_dim 2: "0.1\x1d1.1;0.2\x1d1.2" -> price_seq__0 [0.1, 0.2], price_seq__1 [1.1, 1.2]
"""

from __future__ import annotations

from recpipe.config.features import SequenceRawFeatureConfig
from recpipe.features.kinds import sequence as seq
from recpipe.features.kinds.base import FeatureKind, SpecParts
from recpipe.features.spec import FeatureSpecError, IdMapping

# The sub-value delimiter of a history of float vectors whose values are joined by ITEM_SEPARATOR: an item holds
# one sub-value (TorchEasyRec's grouped sequences' "\x03"), so a vector is never split as several sub-values.
FLOAT_ITEM_SUB_DELIMITER = "\x03"


def build(f: SequenceRawFeatureConfig, parts: SpecParts) -> None:
    if f.dense:
        if parts.encoded and f.value_dim > 1:
            raise FeatureSpecError(
                f"feature {f.name!r}: pre-encoded input (data.fg_encoded) of value_dim > 1 floats per item is "
                "not supported yet"
            )
        entries = seq.item_float_entries(
            f.name, f.source_column, f.default, f.value_dim, f.separator, f.name, "sequence_raw"
        )
        parts.sparse.extend(entries)
        # A vector's values are split inside the item by its separator; the item is one sub-value.
        sub = FLOAT_ITEM_SUB_DELIMITER if f.separator == seq.ITEM_SEPARATOR else seq.ITEM_SEPARATOR
        subs = [e.name for e in entries]
        parts.sequences.append(
            seq.history_entry(f, "sequence_raw", subs, sub if f.value_dim > 1 else seq.ITEM_SEPARATOR)
        )
        return
    bounds = list(f.boundaries or [])
    parts.add_table(
        f,
        f.source_column,
        IdMapping("identity", len(bounds) + 1),
        "sequence_raw",
        boundaries=None if parts.encoded else bounds,
        raw_default=f.default,
        sequence=f.name,
    )
    parts.sequences.append(seq.history_entry(f, "sequence_raw"))


KIND = FeatureKind(name="sequence_raw", build=build, column=seq.column, sequence=seq.histories)
