"""Turn the typed config into a FeatureSpec (fitted parts left at their defaults; see ``fit``)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from recpipe.config import (
    IdFeatureConfig,
    RawFeatureConfig,
    RecpipeConfig,
    SequenceFeatureConfig,
    SubFeatureConfig,
)
from recpipe.config.features import sub_feature_key
from recpipe.features.spec import (
    DenseFeature,
    FeatureGroup,
    FeatureSpec,
    FeatureSpecError,
    IdMapping,
    SequenceFeature,
    SparseFeature,
)

_LOG = re.compile(r"log\(\s*x\s*\+\s*([0-9.]+)\s*\)")
# TorchEasyRec's wide_embedding_dim default (tzrec/protos/models/rank_model.proto: DeepFM, WideAndDeep).
WIDE_EMBEDDING_DIM = 4
WIDE_SUFFIX = "__wide"


def _mapping(
    cfg: IdFeatureConfig | SubFeatureConfig, vocab: list[str] | None = None, encoded: bool = False
) -> IdMapping:
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
    elif vocab is None:  # min_freq: filled in by fit
        vocab = []
    unk = cfg.default_bucket if cfg.default_bucket is not None else 0
    return IdMapping("vocab", len(vocab) + 1, vocab=vocab, default_value=cfg.default_value, unk_id=unk)


def parse_normalizer(expr: str | None) -> tuple[float | None, bool]:
    """``"log(x+3),zscore"`` → ``(3.0, True)``."""
    if not expr:
        return None, False
    m = _LOG.search(expr)
    return (float(m.group(1)) if m else None), "zscore" in expr


def build_feature_spec(cfg: RecpipeConfig) -> FeatureSpec:
    """Build the (unfitted) FeatureSpec the config describes.

    Vocabularies from ``min_freq``, quantile boundaries and zscore statistics start empty/neutral and
    are filled by :func:`recpipe.features.fit.fit_feature_spec` from the training split. With
    ``data.fg_encoded`` every id column holds row ids (:func:`_mapping`) and a bucketized raw feature's
    column holds its bucket id.
    """
    encoded = cfg.data.fg_encoded
    sparse: list[SparseFeature] = []
    dense: list[DenseFeature] = []
    sequences: list[SequenceFeature] = []
    for f in cfg.features:
        column = f.column or f.name
        if isinstance(f, IdFeatureConfig):
            sparse.append(
                SparseFeature(
                    name=f.name,
                    column=column,
                    mapping=_mapping(f, encoded=encoded),
                    table=f.embedding_name or f.name,
                    embedding_dim=f.embedding_dim,
                    pooling=f.pooling,
                    zch=f.zch,
                    zch_size=f.zch_size,
                )
            )
        elif isinstance(f, RawFeatureConfig):
            if encoded and f.num_quantile_buckets is not None:
                raise FeatureSpecError(
                    f"feature {f.name!r}: pre-encoded input holds bucket ids; give its boundaries, "
                    "not num_quantile_buckets (nothing to fit)"
                )
            if encoded and f.boundaries is not None:
                # FG_NONE: the column holds the bucket id FG computed from the boundaries.
                sparse.append(
                    SparseFeature(
                        name=f.name,
                        column=column,
                        mapping=IdMapping("identity", len(f.boundaries) + 1),
                        table=f.embedding_name or f.name,
                        embedding_dim=f.embedding_dim,
                    )
                )
            elif f.boundaries is not None or f.num_quantile_buckets is not None:
                bounds = list(f.boundaries) if f.boundaries is not None else []
                sparse.append(
                    SparseFeature(
                        name=f.name,
                        column=column,
                        mapping=IdMapping("identity", len(bounds) + 1),
                        table=f.embedding_name or f.name,
                        embedding_dim=f.embedding_dim,
                        boundaries=bounds,
                        raw_default=f.default,
                    )
                )
            else:
                log_offset, _ = parse_normalizer(f.normalizer)
                dense.append(
                    DenseFeature(name=f.name, column=column, default=f.default, log_offset=log_offset)
                )
        elif isinstance(f, SequenceFeatureConfig):
            if encoded:
                raise FeatureSpecError(
                    f"sequence feature {f.name!r}: pre-encoded sequences (data.fg_encoded) are not supported"
                )
            keys = f.sub_keys()
            for key, sub in zip(keys, f.sub_features, strict=True):
                sparse.append(
                    SparseFeature(
                        name=key,
                        column=column,
                        mapping=_mapping(sub),
                        table=sub.embedding_name or sub.name,
                        embedding_dim=sub.embedding_dim,
                        sequence=f.name,
                        zch=sub.zch,
                        zch_size=sub.zch_size,
                    )
                )
            sequences.append(
                SequenceFeature(
                    name=f.name,
                    column=column,
                    max_length=f.sequence_length,
                    delimiter=f.delimiter,
                    sub_delimiter=f.sub_delimiter,
                    sub_features=keys,
                )
            )
    spec = FeatureSpec(
        sparse=sparse,
        dense=dense,
        sequences=sequences,
        groups=[],
        label=cfg.data.labels[0],
        extra_labels=cfg.data.labels[1:],
        weight=cfg.data.weight,
        group_column=cfg.eval.gauc_group or cfg.data.group_column,
    )
    spec.groups = [
        _wide_group(spec, g.name, g.features, g.embedding_dim or WIDE_EMBEDDING_DIM)
        if g.type == "wide"
        else _group(spec, g.name, g.type, g.features)
        for g in cfg.feature_groups
    ]
    spec.tables()  # validates shared-table dims
    return spec


def _wide_group(spec: FeatureSpec, name: str, features: list[str], dim: int) -> FeatureGroup:
    """A WIDE group as TorchEasyRec builds it (tzrec/modules/embedding.py, ``EmbeddingGroupImpl``): each
    sparse feature also looks up its own table ``<table>_wide`` of ``dim`` columns (its ``emb_name + "_wide"``),
    through a KJT key ``<feature>__wide`` that FG fills with the feature's own ids; dense features are refused
    ("dense feature [..] should not be configured in wide group")."""
    dense = [n for n in features if n in set(spec.dense_names())]
    if dense:
        raise FeatureSpecError(f"wide group {name!r} lists dense features {dense}; a wide group takes ids")
    keys = []
    for n in features:
        f = spec.feature(n)
        if f.sequence is not None or f.zch:
            raise FeatureSpecError(
                f"wide group {name!r}: feature {n!r} is a {'sequence sub-feature' if f.sequence else 'zch feature'}; "
                "a wide group takes pooled ids of plain tables"
            )
        key, table = f"{n}{WIDE_SUFFIX}", f"{f.table}_wide"
        if key not in spec.sparse_keys():
            clash = [g.name for g in spec.sparse if g.table == table]
            if clash:
                raise FeatureSpecError(f"wide group {name!r}: table {table!r} is already used by {clash}")
            spec.sparse.append(dataclasses.replace(f, name=key, table=table, embedding_dim=dim))
        elif spec.feature(key).column != f.column or spec.feature(key).table != table:
            raise FeatureSpecError(f"wide group {name!r}: feature {key!r} is already defined")
        keys.append(key)
    return FeatureGroup(name, "wide", keys, [])


def _group(spec: FeatureSpec, name: str, gtype: str, features: list[str]) -> FeatureGroup:
    sparse_keys = set(spec.sparse_keys())
    dense_names = set(spec.dense_names())
    seq_of = {f.name: f.sequence for f in spec.sparse}
    sparse = [n for n in features if n in sparse_keys]
    dense = [n for n in features if n in dense_names]
    if gtype == "deep":
        seq = [n for n in sparse if seq_of[n] is not None]
        if seq:
            raise FeatureSpecError(
                f"deep group {name!r} lists sequence sub-features {seq}; use a sequence group"
            )
        return FeatureGroup(name, "deep", sparse, dense)
    history = [n for n in sparse if seq_of[n] is not None]
    query = [n for n in sparse if seq_of[n] is None]
    if dense:
        raise FeatureSpecError(f"sequence group {name!r} cannot hold dense features {dense}")
    if not history or len(query) != len(history):
        raise FeatureSpecError(
            f"sequence group {name!r} needs one query feature per history sub-feature; "
            f"got query {query} and history {history}"
        )
    # Pair query and history by the sub-feature's name (click_50_seq__cate_id ↔ cate_id).
    by_suffix = {h.removeprefix(sub_feature_key(str(seq_of[h]), "")): h for h in history}
    missing = [q for q in query if q not in by_suffix]
    if missing:
        raise FeatureSpecError(
            f"sequence group {name!r}: query features {missing} have no history sub-feature"
        )
    qdim = [spec.feature(q).embedding_dim for q in query]
    hdim = [spec.feature(by_suffix[q]).embedding_dim for q in query]
    if qdim != hdim:
        raise FeatureSpecError(f"sequence group {name!r}: query dims {qdim} differ from history dims {hdim}")
    return FeatureGroup(name, "sequence", sparse, [], query=query, history=[by_suffix[q] for q in query])
