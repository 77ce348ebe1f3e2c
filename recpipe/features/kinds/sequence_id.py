"""Kind ``sequence_id`` (TorchEasyRec's ``sequence_id_feature``): one history column of ids, ``"3;8;1"``, →
one jagged KJT key named after the feature (``value_dim: 0``: several ids per item, ``"3\x1d7;8"``, and their
counts per item in ``<name>__item_lengths``), each item mapped as an id feature's (hash, mod, vocabulary, zch;
pre-encoded ids as they are). A history of one sub-feature: FG is :func:`recpipe.features.kinds.sequence.sequence_ids`.

Example::

    # kind: sequence_id, name: buy_seq, num_buckets: 100, sequence_length: 2, delimiter: ";"
    # rows "3;108;5", "", None  ->  values [3, 8], lengths [2, 0, 0] (the third item past sequence_length)
"""

from __future__ import annotations

from recpipe.config.features import SequenceIdFeatureConfig
from recpipe.features.kinds.base import FeatureKind, FitNeeds, SpecParts
from recpipe.features.kinds.sequence import column, histories, history_entry, multi_value_entries


def build(f: SequenceIdFeatureConfig, parts: SpecParts) -> None:
    parts.sparse.extend(
        multi_value_entries(f.name, f.source_column, f, "sequence_id", f.name, encoded=parts.encoded)
    )
    parts.sequences.append(history_entry(f, "sequence_id"))


def needs(f: SequenceIdFeatureConfig) -> FitNeeds:
    return FitNeeds(vocab={f.name: f.min_freq}) if f.min_freq is not None else FitNeeds()


KIND = FeatureKind(name="sequence_id", build=build, column=column, needs=needs, sequence=histories)
