"""Turn the typed config into a FeatureSpec (fitted parts left at their defaults; see ``fit``): each feature
through its kind (:mod:`recpipe.features.kinds`), then the groups."""

from __future__ import annotations

import dataclasses

from recpipe.config import RecpipeConfig
from recpipe.config.features import sub_feature_key
from recpipe.features.kinds.base import SpecParts
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.spec import FeatureGroup, FeatureSpec, FeatureSpecError

# TorchEasyRec's wide_embedding_dim default (tzrec/protos/models/rank_model.proto: DeepFM, WideAndDeep).
WIDE_EMBEDDING_DIM = 4
WIDE_SUFFIX = "__wide"


def build_feature_spec(cfg: RecpipeConfig) -> FeatureSpec:
    """Build the (unfitted) FeatureSpec the config describes.

    Vocabularies from ``min_freq``, quantile boundaries and zscore statistics start empty/neutral and
    are filled by :func:`recpipe.features.fit.fit_feature_spec` from the training split. With
    ``data.fg_encoded`` every id column holds row ids and a bucketized raw feature's column holds its bucket id.
    """
    parts = SpecParts(encoded=cfg.data.fg_encoded)
    for f in cfg.features:
        start = len(parts.sparse)
        feature_kind(f.kind).build(f, parts)
        _table_settings(f, parts, start)
    spec = FeatureSpec(
        sparse=parts.sparse,
        dense=parts.dense,
        sequences=parts.sequences,
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


def _table_settings(f: object, parts: SpecParts, start: int) -> None:
    """The ``data_type`` / ``trainable`` of the section (a history's: each sub-feature's) on the KJT keys its
    kind just appended: table settings, the same for every kind."""
    subs = {sub_feature_key(f.name, s.name): s for s in getattr(f, "sub_features", [])}  # type: ignore[attr-defined]
    for i in range(start, len(parts.sparse)):
        entry = parts.sparse[i]
        section = subs.get(entry.name, f)
        settings = {k: getattr(section, k) for k in ("data_type", "trainable") if hasattr(section, k)}
        if settings:
            parts.sparse[i] = dataclasses.replace(entry, **settings)


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
