"""Kind ``sequence_raw`` (TorchEasyRec's ``sequence_raw_feature``): one history column of numbers,
``"0.1;0.2"``, → one jagged KJT key named after the feature, each item bucketized by ``boundaries``
(``searchsorted(boundaries, x, side="right")``, a raw feature's bucket; an empty item is ``default``).
Pre-encoded input holds the bucket ids. Dense per-item values (no boundaries) are refused by the config.

Example::

    # kind: sequence_raw, name: price_seq, boundaries: [0.05, 0.15, 0.25], sequence_length: 50
    # rows "0.1;0.2", "", "0.3"  ->  values [1, 2, 3], lengths [2, 0, 1]
"""

from __future__ import annotations

from recpipe.config.features import SequenceRawFeatureConfig
from recpipe.features.kinds.base import FeatureKind, SpecParts
from recpipe.features.kinds.sequence import column, histories
from recpipe.features.kinds.sequence_id import standalone
from recpipe.features.spec import IdMapping


def build(f: SequenceRawFeatureConfig, parts: SpecParts) -> None:
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
    parts.sequences.append(
        standalone(f.name, f.source_column, f.sequence_length, f.delimiter, "sequence_raw")
    )


KIND = FeatureKind(name="sequence_raw", build=build, column=column, sequence=histories)
