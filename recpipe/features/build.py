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
    # A feature that made several dense columns (a raw vector's <name>__<i>): a group listing it gets them all.
    columns_of: dict[str, list[str]] = {}
    for f in cfg.features:
        before, start = len(parts.dense), len(parts.sparse)
        feature_kind(f.kind).build(f, parts)
        made = [d.name for d in parts.dense[before:]]
        if made and made != [f.name]:
            columns_of[f.name] = made
        _table_settings(f, parts, start)
    for (
        e
    ) in parts.sparse:  # a history's vector of floats per item (<key>__<i>): a group listing it gets them all
        if "vector_of" in e.params:
            columns_of.setdefault(e.params["vector_of"], []).append(e.name)
    domains = cfg.model.domains()
    spec = FeatureSpec(
        sparse=parts.sparse,
        dense=parts.dense,
        sequences=parts.sequences,
        groups=[],
        label=cfg.data.labels[0],
        extra_labels=cfg.data.labels[1:],
        domain_label=domains[0] if domains else None,
        domain_num=domains[1] if domains else 0,
        weight=cfg.data.weight,
        group_column=cfg.eval.gauc_group or cfg.data.group_column,
    )
    listed = {g.name: [c for n in g.features for c in columns_of.get(n, [n])] for g in cfg.feature_groups}
    spec.groups = [
        _wide_group(spec, g.name, listed[g.name], g.embedding_dim or WIDE_EMBEDDING_DIM)
        if g.type == "wide"
        else _group(spec, g.name, g.type, listed[g.name])
        for g in cfg.feature_groups
    ]
    spec.tables()  # validates shared-table dims
    return spec


def _table_settings(f: object, parts: SpecParts, start: int) -> None:
    """The ``data_type`` / ``trainable`` / ``init`` of the section (a history's: each sub-feature's) on the KJT
    keys its kind just appended: table settings, the same for every kind."""
    subs = {sub_feature_key(f.name, s.name): s for s in getattr(f, "sub_features", [])}  # type: ignore[attr-defined]
    for i in range(start, len(parts.sparse)):
        entry = parts.sparse[i]
        section = subs.get(entry.name, f)
        settings = {k: getattr(section, k) for k in ("data_type", "trainable") if hasattr(section, k)}
        init = getattr(section, "init", None)
        if init is not None:
            settings["init"] = init
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
    # A dense feature in a sequence group is part of the query: its value(s), where the group lists it.
    order = [n for n in features if n in dense_names or (n in sparse_keys and seq_of[n] is None)]
    if not history:
        raise FeatureSpecError(
            f"sequence group {name!r} needs history sub-features; got query {order} and history {history}"
        )
    if not order:  # a history alone: pooled by its model (DSSM's sequence_pooling), no target attention
        return FeatureGroup(name, "sequence", sparse, dense, query=[], history=history)
    if not query:
        raise FeatureSpecError(
            f"sequence group {name!r}: the query {order} has only dense features; it needs a pooled feature too"
        )
    # TorchEasyRec's rule (tzrec/modules/embedding.py, SequenceEmbeddingGroupImpl): the query is the group's
    # non-sequence features concatenated in order (a dense feature: its value(s)), each item the sequence
    # features concatenated in order, and DIN zero-pads the query to the item width (tzrec/modules/sequence.py,
    # DINEncoder). Query features paired by name with sub-features listed in another order are a mistake: they
    # would be paired by position.
    short = [h.removeprefix(sub_feature_key(str(seq_of[h]), "")) for h in history]
    if any(q in short and short.index(q) != i for i, q in enumerate(order)):
        raise FeatureSpecError(
            f"sequence group {name!r}: list the history sub-features {history} in the order of their query "
            f"features {order}: query and history are paired by position"
        )
    qdim = sum(1 if q in dense_names else spec.feature(q).embedding_dim for q in order)
    hdim = sum(spec.feature(h).embedding_dim for h in history)
    if qdim > hdim:
        raise FeatureSpecError(
            f"sequence group {name!r}: the query ({order}, width {qdim}) is wider than a history item "
            f"({history}, width {hdim}); DIN pads a narrower query with zeros, never a wider one"
        )
    return FeatureGroup(
        name, "sequence", sparse, dense, query=query, history=history, query_order=order if dense else []
    )
