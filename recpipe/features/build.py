"""Turn the typed config into a FeatureSpec (fitted parts left at their defaults; see ``fit``)."""

from __future__ import annotations

import re
from pathlib import Path

from recpipe.config import (
    IdFeatureConfig,
    RawFeatureConfig,
    RecpipeConfig,
    SequenceFeatureConfig,
    SubFeatureConfig,
)
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


def _mapping(cfg: IdFeatureConfig | SubFeatureConfig, vocab: list[str] | None = None) -> IdMapping:
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
    are filled by :func:`recpipe.features.fit.fit_feature_spec` from the training split.
    """
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
                    mapping=_mapping(f),
                    table=f.embedding_name or f.name,
                    embedding_dim=f.embedding_dim,
                    pooling=f.pooling,
                    zch=f.zch,
                    zch_size=f.zch_size,
                )
            )
        elif isinstance(f, RawFeatureConfig):
            if f.boundaries is not None or f.num_quantile_buckets is not None:
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
            keys = []
            for sub in f.sub_features:
                key = f"{f.name}__{sub.name}"
                keys.append(key)
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
        label=cfg.data.label,
        weight=cfg.data.weight,
        group_column=cfg.eval.gauc_group or cfg.data.group_column,
    )
    spec.groups = [_group(spec, g.name, g.type, g.features) for g in cfg.feature_groups]
    spec.tables()  # validates shared-table dims
    return spec


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
    # Pair query and history by the sub-feature suffix (click_50_seq__cate_id ↔ cate_id).
    by_suffix = {h.split("__", 1)[1]: h for h in history}
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
