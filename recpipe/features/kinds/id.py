"""Kind ``id``: a categorical column → one pooled KJT key, its ids mapped by hash, mod, a vocabulary (listed,
from a file, or fitted with ``min_freq``) or zero-collision keys; pre-encoded ids used as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from recpipe.config.features import IdFeatureConfig, SubFeatureConfig
from recpipe.features.columns import map_ids
from recpipe.features.kinds.base import ANY, IDS, ColumnKind, FeatureKind, FitNeeds, SparseOut, SpecParts
from recpipe.features.spec import FeatureSpecError, IdMapping, SparseFeature


def id_mapping(cfg: IdFeatureConfig | SubFeatureConfig, encoded: bool = False) -> IdMapping:
    """The :class:`IdMapping` an id (or history sub-feature) config asks for; a ``min_freq`` vocabulary starts
    empty (fitting fills it)."""
    if encoded:
        # TorchEasyRec's FG_NONE (tzrec/features/feature.py, _parse_fg_encoded_sparse_feature_impl): the
        # column holds the ids FG wrote, cast to int64 and used as they are; num_buckets/hash_bucket_size
        # only size the table. recpipe checks each id against that size (TorchEasyRec does not).
        size = cfg.num_buckets or cfg.hash_bucket_size
        if size is None or cfg.zch:
            raise FeatureSpecError(
                f"feature {cfg.name!r}: pre-encoded input (data.fg_encoded) needs num_buckets or "
                "hash_bucket_size (the table size) and no zch; a vocabulary or zch maps raw values"
            )
        return IdMapping("identity", size, default_value=cfg.default_value)
    if cfg.hash_bucket_size is not None:
        return IdMapping("hash", cfg.hash_bucket_size, default_value=cfg.default_value)
    if cfg.num_buckets is not None:
        return IdMapping("mod", cfg.num_buckets, default_value=cfg.default_value)
    if cfg.vocab_list is not None:
        vocab = list(cfg.vocab_list)
    elif cfg.vocab_file is not None:
        path = Path(cfg.vocab_file)
        if not path.is_file():
            raise FeatureSpecError(f"feature {cfg.name!r}: vocab_file {path} does not exist")
        vocab = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    else:  # min_freq: filled in by fit
        vocab = []
    unk = cfg.default_bucket if cfg.default_bucket is not None else 0
    return IdMapping("vocab", len(vocab) + 1, vocab=vocab, default_value=cfg.default_value, unk_id=unk)


def id_entry(
    key: str,
    column: str,
    cfg: IdFeatureConfig | SubFeatureConfig,
    kind: str,
    encoded: bool = False,
    sequence: str | None = None,
) -> SparseFeature:
    """The KJT key of an id config (a feature of its own, or a history's sub-feature ``sequence``): its mapping,
    its table (shared by ``embedding_name``) and zch."""
    return SparseFeature(
        name=key,
        column=column,
        mapping=id_mapping(cfg, encoded=encoded),
        table=cfg.embedding_name or cfg.name,
        embedding_dim=cfg.embedding_dim,
        pooling=cfg.pooling if isinstance(cfg, IdFeatureConfig) else "sum",  # a history is never pooled here
        sequence=sequence,
        zch=cfg.zch,
        zch_size=cfg.zch_size,
        zch_eviction_interval=cfg.zch_eviction_interval,
        kind=kind,
    )


def build(f: IdFeatureConfig, parts: SpecParts) -> None:
    parts.sparse.append(id_entry(f.name, f.source_column, f, "id", encoded=parts.encoded))


def needs(f: IdFeatureConfig) -> FitNeeds:
    return FitNeeds(vocab={f.name: f.min_freq}) if f.min_freq is not None else FitNeeds()


def ids(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    """One id per row where the column has one (``default_value`` fills nulls, else the row has none)."""
    values, present, bad = map_ids(batch.column(f.column), f.mapping, f.column, f.zch)
    return (values if present.all() else values[present]), present.astype(np.int32), bad


def column(f: SparseFeature) -> tuple[ColumnKind, str]:
    return "id", IDS if f.mapping.kind in ("mod", "identity") else ANY


KIND = FeatureKind(name="id", build=build, column=column, needs=needs, sparse=ids)
