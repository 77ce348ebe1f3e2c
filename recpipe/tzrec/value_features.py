"""TorchEasyRec's value features → recpipe kinds: ``lookup_feature`` → ``lookup``, ``match_feature`` →
``match``, ``expr_feature`` → ``expr``, ``overlap_feature`` → ``overlap`` (docs/source/feature/feature.md;
field names and defaults from tzrec/protos/feature.proto).

Each input (``map: "user:kv_cate"``, a variable ``"item:i_age"``) names a column by ``<side>:<input>``; an input
``"feature:X"`` (TorchEasyRec's FG DAG: feature X's output) is kept as it is, recpipe's FG derives it (X a
bucketized raw feature: its bucket id), and the side ``const`` has no recpipe counterpart and is reported. Fields
outside the schema subset (recpipe.tzrec.schema) are reported at their line, as for every feature.

Example::

    lookup_feature { feature_name: "user_cate_cnt" map: "user:kv_cate_cnt" key: "item:cate"
                     embedding_dim: 16 boundaries: [0, 1, 2, 3, 4] }
    # → {kind: lookup, name: user_cate_cnt, map: kv_cate_cnt, key: cate, boundaries: [0, 1, 2, 3, 4],
    #    embedding_dim: 16}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recpipe.tzrec.problems import Findings

VALUE_FEATURES = {
    "lookup_feature": "lookup",
    "match_feature": "match",
    "expr_feature": "expr",
    "overlap_feature": "overlap",
    "kv_dot_product": "kv_dot_product",
    "bool_mask_feature": "bool_mask",
}
_SIDES = ("user", "item", "context")


def side_reason(side: str, text: str = "") -> str:
    """Why an FG-DAG input side (of the input ``text``, ``"<side>:<input>"``) has no recpipe counterpart
    (docs/source/feature/data.md, fg_mode)."""
    if side == "const":
        return ": 'const:' inputs are constants, which recpipe's features do not take; write a column"
    return ""


_MAPPINGS = ("hash_bucket_size", "num_buckets", "vocab_list", "vocab_file")


def _input(text: str, where: str, found: Findings, allow_all: bool = False) -> str | None:
    """The column of ``"<side>:<input>"`` (``ALL`` as it is, for a match key; ``"feature:X"`` as it is, feature
    X's output, which :func:`recpipe.tzrec.features.check_feature_outputs` checks once every feature is read)."""
    if allow_all and text == "ALL":
        return text
    side, sep, column = text.partition(":")
    if not sep or not column:
        found.problem(where, f"input {text!r} is not '<side>:<input>'")
        return None
    if side == "feature":
        return text
    if side not in _SIDES:
        found.problem(
            where,
            f"input side {side!r} of {text!r} is not supported (recpipe reads table columns: {', '.join(_SIDES)})"
            f"{side_reason(side, text)}",
        )
        return None
    return column


def map_value_feature(
    kind: str,
    cfg: Any,
    path: str,
    found: Findings,
    encoded: bool,
    map_normalizer: Callable[[str], str | None],
) -> dict[str, Any]:
    """The recpipe feature of one TorchEasyRec value feature block (``kind`` is its oneof name;
    ``map_normalizer`` is :func:`recpipe.tzrec.features.map_normalizer`, which reads a raw feature's too)."""
    name = cfg.feature_name
    out: dict[str, Any] = {"kind": VALUE_FEATURES[kind], "name": name}
    if encoded:
        found.problem(
            path,
            f"pre-encoded (FG_NONE) {kind} is not supported: its column holds FG's output, which a raw or id "
            "feature of recpipe reads; declare it as one",
        )
        return out
    if kind == "bool_mask_feature":
        return _bool_mask(cfg, path, found, out)
    if kind == "lookup_feature":
        out["map"] = _input(cfg.map, f"{path}.map", found)
        out["key"] = _input(cfg.key, f"{path}.key", found)
        if cfg.separator != "\x1d":
            out["separator"] = cfg.separator
        out["combiner"] = cfg.combiner
        for flag in ("need_discrete", "need_key"):
            if getattr(cfg, flag):
                out[flag] = True
    elif kind == "match_feature":
        out["nested_map"] = _input(cfg.nested_map, f"{path}.nested_map", found)
        out["pkey"] = _input(cfg.pkey, f"{path}.pkey", found, allow_all=True)
        out["skey"] = _input(cfg.skey, f"{path}.skey", found, allow_all=True)
        for flag in ("need_discrete", "show_pkey", "show_skey"):
            if getattr(cfg, flag):
                out[flag] = True
    elif kind == "expr_feature":
        out["expression"] = cfg.expression
        out["variables"] = [_input(v, f"{path}.variables", found) for v in cfg.variables]
        if cfg.separator != "\x1d":
            out["separator"] = cfg.separator
        if cfg.HasField("fill_missing"):
            out["fill_missing"] = cfg.fill_missing
        if cfg.value_dim > 1:
            found.problem(
                f"{path}.value_dim", "an expression of value_dim > 1 (a vector value) is not supported"
            )
    elif kind == "kv_dot_product":
        out["query"] = _input(cfg.query, f"{path}.query", found)
        out["document"] = _input(cfg.document, f"{path}.document", found)
        if cfg.separator != "\x1d":
            out["separator"] = cfg.separator
        if cfg.HasField("kv_delimiter"):
            found.problem(
                f"{path}.kv_delimiter",
                "kv_delimiter is a float field in TorchEasyRec's feature.proto, so no delimiter can be written "
                "there; recpipe reads ':' (its kv_delimiter setting takes another one)",
            )
    else:
        out["query"] = _input(cfg.query, f"{path}.query", found)
        out["title"] = _input(cfg.title, f"{path}.title", found)
        out["method"] = cfg.method
    if kind in ("lookup_feature", "match_feature"):
        given = [k for k in _MAPPINGS if (len(cfg.vocab_list) > 0 if k == "vocab_list" else cfg.HasField(k))]
        for k in given:
            out[k] = list(cfg.vocab_list) if k == "vocab_list" else getattr(cfg, k)
        if cfg.HasField("value_dim") and cfg.value_dim > 1:
            found.problem(
                f"{path}.value_dim",
                f"value_dim {cfg.value_dim}: a looked-up vector is not supported (recpipe's dense output is one "
                "column per feature)",
            )
    bounds = list(cfg.boundaries)
    if bounds:
        out["boundaries"] = bounds
    has_ids = bool(bounds) or any(k in out for k in _MAPPINGS)
    table_or_dense(kind, cfg, out, path, found, "boundaries or a mapping", has_ids)
    if has_ids and cfg.pooling != "sum":
        out["pooling"] = cfg.pooling
    if kind != "overlap_feature":
        # TorchEasyRec's "" is "no default" (an id output has no id; recpipe's dense value is then 0).
        out["default_value"] = cfg.default_value or None
    if kind != "expr_feature" and cfg.HasField("normalizer"):
        normalizer = map_normalizer(cfg.normalizer)
        if normalizer is None:
            found.problem(
                f"{path}.normalizer",
                f"normalizer {cfg.normalizer!r} is not supported: recpipe applies log(x+C) "
                "('method=expression,expr=log(x+C)'); zscore statistics are fitted on the training split",
            )
        else:
            out["normalizer"] = normalizer
    return out


def table_or_dense(
    kind: str, cfg: Any, out: dict[str, Any], path: str, found: Findings, ids: str, has_ids: bool
) -> None:
    """Where a raw or value feature's output goes: ids (``has_ids``: it has ``ids``, e.g. boundaries) look up
    a table of ``embedding_dim`` (autodis / mlp refused); a dense value is embedded by autodis / mlp when one is
    given, and ``embedding_dim`` alone is ignored (noted). ``kind`` names the feature (``"raw feature"``)."""
    emb = cfg.WhichOneof("dense_emb")
    if has_ids:
        if not cfg.embedding_dim:
            found.problem(path, f"{kind} {cfg.feature_name!r} has ids ({ids}) but no embedding_dim")
        out["embedding_dim"] = cfg.embedding_dim
        if emb is not None:
            found.problem(
                f"{path}.{emb}", f"autodis / mlp embed a dense value; an id output ({ids}) looks up a table"
            )
    elif emb is not None:
        dense_emb(kind, cfg, out, path, found)
    elif cfg.HasField("embedding_dim"):
        found.note(
            f"{path}.embedding_dim",
            f"ignored: {kind} without {ids} is a dense value; embedding_dim has no effect",
        )


def dense_emb(kind: str, cfg: Any, out: dict[str, Any], path: str, found: Findings) -> None:
    """``autodis {num_channels temperature keep_prob}`` / ``mlp {}`` of a raw or dense value feature
    (feature.proto's ``dense_emb``; docs/source/feature/autodis.md, feature.md RawFeature): the value embedded
    to ``embedding_dim`` in the model. ``kind`` names the feature in a problem (``"raw feature"``)."""
    emb = cfg.WhichOneof("dense_emb")
    if not cfg.embedding_dim:
        found.problem(path, f"{kind} {cfg.feature_name!r} has {emb} but no embedding_dim")
    out["embedding_dim"] = cfg.embedding_dim
    if emb == "mlp":
        out["mlp"] = {}
        return
    a = cfg.autodis
    out["autodis"] = {"num_channels": a.num_channels}
    for key in ("temperature", "keep_prob"):
        if a.HasField(key):
            out["autodis"][key] = getattr(a, key)


def _bool_mask(cfg: Any, path: str, found: Findings, out: dict[str, Any]) -> dict[str, Any]:
    """``bool_mask_feature``: ``expression`` is [values, mask] (feature.md, BoolMaskFeature); the rest is an
    id feature's (one mapping, embedding_dim, pooling, default_value "" = none, separator)."""
    exprs = list(cfg.expression)
    if len(exprs) != 2:
        found.problem(f"{path}.expression", f"bool_mask_feature needs [values, mask] inputs; got {exprs}")
    else:
        values = _input(exprs[0], f"{path}.expression", found)
        if values is not None and values != cfg.feature_name:
            out["column"] = values
        out["mask"] = _input(exprs[1], f"{path}.expression", found)
    given = [k for k in _MAPPINGS if (len(cfg.vocab_list) > 0 if k == "vocab_list" else cfg.HasField(k))]
    if len(given) != 1:
        found.problem(
            path,
            f"bool_mask_feature {cfg.feature_name!r} needs exactly one of {', '.join(_MAPPINGS)}; got {given}",
        )
    for k in given[:1]:
        out[k] = list(cfg.vocab_list) if k == "vocab_list" else getattr(cfg, k)
    out["embedding_dim"] = cfg.embedding_dim
    if cfg.pooling != "sum":
        out["pooling"] = cfg.pooling
    if cfg.separator != "\x1d":
        out["separator"] = cfg.separator
    if cfg.default_value:
        out["default_value"] = cfg.default_value
    if cfg.HasField("value_dim") and cfg.value_dim != 0:
        found.problem(
            f"{path}.value_dim",
            f"value_dim {cfg.value_dim} (a fixed number of values per row) is not supported: recpipe keeps every "
            "value the mask keeps (value_dim 0)",
        )
    return out
