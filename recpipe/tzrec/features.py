"""``feature_configs`` → recpipe ``features``: id, raw and grouped sequence features (id and bucketized numeric
sub-features), standalone ``sequence_id_feature`` / ``sequence_raw_feature`` (kinds ``sequence_id`` /
``sequence_raw``), and which features share an embedding table.

Tables follow TorchEasyRec's rule: a feature's table is its ``embedding_name``, else
``"<feature name>_emb"``, where a sequence sub-feature's name is ``"<sequence_name>__<feature_name>"``.
So a sub-feature shares the target feature's table only when its ``embedding_name`` says so (e.g.
``embedding_name: "adgroup_id_emb"``); without it TorchEasyRec trains a separate table. In recpipe a
feature's table is its ``embedding_name``, else its name, and a sub-feature's default is its short name
(the target's table). Each TorchEasyRec table therefore becomes a recpipe table named after its first
top-level feature (else its first sub-feature, ``"<sequence>__<feature>"``); a top-level feature names
another table only when it shares one, and every sub-feature names its table explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from recpipe.config.features import feature_output, feature_output_refusal, sub_feature_key
from recpipe.tzrec.dynamicemb import map_dynamicemb
from recpipe.tzrec.problems import Findings
from recpipe.tzrec.table_init import map_init_fn
from recpipe.tzrec.tokenize_feature import map_tokenize
from recpipe.tzrec.value_features import (
    VALUE_FEATURES,
    map_value_feature,
    side_reason,
    table_or_dense,
)

# recpipe reads the column an expression names, or (side "feature", FG_DAG) a bucketized raw feature's output,
# which its FG derives; constants are an FG-DAG construct recpipe has no counterpart for.
_SIDES = ("user", "item", "context")
_MAPPINGS = ("hash_bucket_size", "num_buckets", "vocab_list", "vocab_file")
ENCODED_SEPARATOR = "\x03"  # data_config's fg_encoded_multival_sep default (data.proto): FG_NONE's
_EXPR_NORMALIZER = re.compile(r"^\s*method\s*=\s*expression\s*,\s*expr\s*=\s*(?P<expr>.+?)\s*$")
_LOG = re.compile(r"^log\(x\+(?P<c>[0-9]+(\.[0-9]*)?)\)$")


@dataclass
class _Member:
    """One user of a TorchEasyRec embedding table, and the recpipe dict to give its table name."""

    target: dict[str, Any]
    name: str  # recpipe feature key: "user_id", or "click_50_seq__adgroup_id" for a sub-feature
    is_sub: bool
    path: str


def _column(expression: str, name: str, path: str, found: Findings, outputs: bool = True) -> str | None:
    """The column of an expression ``"<side>:<input>"`` (None: the feature's name, or a problem reported);
    ``"feature:X"`` as it is where ``outputs`` (a history's items read no feature output)."""
    if not expression:  # missing: reported as a required field
        return None
    side, sep, column = expression.partition(":")
    if not sep or not column:
        found.problem(f"{path}.expression", f"expression {expression!r} is not '<side>:<input>'")
        return None
    if side == "feature" and outputs:
        return expression
    if side == "feature":
        found.problem(
            f"{path}.expression",
            f"input {expression!r}: a history's items read their values from the history column, not from "
            "another feature's output",
        )
        return None
    if side not in _SIDES:
        found.problem(
            f"{path}.expression",
            f"input side {side!r} of {expression!r} is not supported (recpipe reads table columns: "
            f"{', '.join(_SIDES)}){side_reason(side, expression)}",
        )
        return None
    return None if column == name else column


def _id_fields(cfg: Any, path: str, found: Findings, encoded: bool = False) -> dict[str, Any]:
    """The id mapping, embedding dim, pooling and default value shared by id features and sub-features."""
    out: dict[str, Any] = {}
    mappings = [k for k in _MAPPINGS if k in cfg.DESCRIPTOR.fields_by_name]  # a combo has no num_buckets
    given = [k for k in mappings if (len(getattr(cfg, k)) > 0 if k == "vocab_list" else cfg.HasField(k))]
    dynamic = cfg.DESCRIPTOR.fields_by_name.get("dynamicemb") is not None and cfg.HasField("dynamicemb")
    if cfg.DESCRIPTOR.fields_by_name.get("zch") is not None and cfg.HasField("zch"):
        given = _zch(cfg, path, found, out, given)
        if dynamic:
            found.problem(f"{path}.dynamicemb", "zch and dynamicemb both set: give one")
    elif dynamic:
        map_dynamicemb(cfg, path, found, out)  # zch's counterpart (recpipe/tzrec/dynamicemb.py)
        given = _value_keyed("dynamicemb", cfg.dynamicemb.max_capacity, path, found, out, given)
    if encoded and given and given[0] in ("vocab_list", "vocab_file"):
        found.problem(
            f"{path}.{given[0]}",
            f"pre-encoded input (FG_NONE) with {given[0]}: TorchEasyRec's vocabulary ids reserve rows for the "
            "default and out-of-vocabulary values, which recpipe does not reproduce; use num_buckets",
        )
    if len(given) != 1:
        found.problem(
            path,
            f"id feature {cfg.feature_name!r} needs exactly one of {', '.join(mappings)}; "
            f"got {', '.join(given) or 'none'}",
        )
    for key in given[:1]:
        if key in out:  # set from zch_size
            continue
        value = getattr(cfg, key)
        out[key] = list(value) if key == "vocab_list" else value
    # An ungrouped id_feature may leave its required dim unset (recpipe.tzrec.importer, _ungrouped_without_dim):
    # recpipe's default dim is written, and no table is built for it.
    if cfg.HasField("embedding_dim") or not cfg.DESCRIPTOR.fields_by_name["embedding_dim"].is_required:
        out["embedding_dim"] = cfg.embedding_dim
    if cfg.pooling not in ("sum", "mean"):
        found.problem(f"{path}.pooling", f"pooling {cfg.pooling!r} is not 'sum' or 'mean'")
    elif cfg.pooling != "sum":
        out["pooling"] = cfg.pooling
    _default(cfg, out, "default_value", path, found, encoded)
    return out


def _zch(cfg: Any, path: str, found: Findings, out: dict[str, Any], given: list[str]) -> list[str]:
    """TorchEasyRec's ``zch { zch_size eviction_interval <policy> }`` (docs/source/feature/zch.md): a table of
    ``zch_size`` rows, each id its own row until full, then evicted by the policy. The policy maps as
    tzrec/features/feature.py builds it: ``lfu {}`` → ``zch_eviction_policy: lfu``, ``lru { decay_exponent }``
    / ``distance_lfu { decay_exponent }`` → ``lru`` / recpipe's default ``distance_lfu`` with
    ``zch_decay_exponent`` when not 1.0; an admission function is refused by name. A zch feature needs no bucket
    setting in TorchEasyRec (its table is ``zch_size`` rows); recpipe keys its ids by hash then
    (``hash_bucket_size: zch_size``). Returns the mapping fields left to map."""
    z, zp = cfg.zch, f"{path}.zch"
    out.update(zch=True, zch_size=z.zch_size, zch_eviction_interval=z.eviction_interval)
    policy = z.WhichOneof("eviction_policy")
    if policy is None:
        found.problem(
            zp,
            "zch needs an eviction policy (TorchEasyRec's lfu, lru or distance_lfu); recpipe's is distance_lfu {}",
        )
    elif policy != "distance_lfu":
        out["zch_eviction_policy"] = policy
    if policy in ("lru", "distance_lfu") and getattr(z, policy).decay_exponent != 1.0:
        out["zch_decay_exponent"] = getattr(z, policy).decay_exponent
    if z.HasField("threshold_filtering_func"):
        found.problem(
            f"{zp}.threshold_filtering_func",
            "an admission function (a Python lambda TorchEasyRec evaluates) is not supported: recpipe's zch "
            "admits every id",
        )
    return _value_keyed("zch", z.zch_size, path, found, out, given)


def _value_keyed(
    what: str, rows: int, path: str, found: Findings, out: dict[str, Any], given: list[str]
) -> list[str]:
    """The bucket setting of a table keyed by the id's value (``zch``, ``dynamicemb``) of ``rows`` rows: none
    given keys the ids by hash (``hash_bucket_size: rows``); a vocabulary is refused. Returns the mapping fields."""
    if given and given[0] in ("vocab_list", "vocab_file"):
        found.problem(
            f"{path}.{given[0]}", f"{what} with {given[0]}: a vocabulary already gives each value its row"
        )
        return given
    if not given:
        out["hash_bucket_size"] = rows
    return given or ["hash_bucket_size"]


def _default_field(cfg: Any, path: str, found: Findings, encoded: bool) -> str:
    """The default's field: ``fg_encoded_default_value`` for FG_NONE input, else ``default_value``; the other
    one, when set, is noted as ignored."""
    field = "fg_encoded_default_value" if encoded else "default_value"
    other = "default_value" if encoded else "fg_encoded_default_value"
    if cfg.HasField(other):
        why = (
            "FG_NONE input already holds FG's defaults" if encoded else "it fills nulls of FG_NONE input only"
        )
        found.note(f"{path}.{other}", f"ignored: {why}")
    return field


def _default(cfg: Any, out: dict[str, Any], key: str, path: str, found: Findings, encoded: bool) -> None:
    """``default_value`` is applied by FG, before bucketizing (docs/source/feature/feature.md); FG_NONE input
    already holds it, and ``fg_encoded_default_value`` fills nulls of the encoded column instead. ``key`` is
    ``default_value`` (an id feature's text) or ``default`` (a raw feature's number)."""
    field = _default_field(cfg, path, found, encoded)
    if not cfg.HasField(field):
        return
    value = getattr(cfg, field)
    if key == "default_value":
        if value:  # TorchEasyRec's "" means "no default: an empty value has no id", as recpipe's null does
            out[key] = value
        return
    try:
        out[key] = float(value)
    except ValueError:
        found.problem(f"{path}.{field}", f"{field} {value!r} is not a number")


def map_normalizer(text: str) -> str | None:
    """TorchEasyRec's ``"method=expression,expr=log(x+3)"`` (or a bare ``"log(x+3)"``) → ``"log(x+3)"``;
    None for anything else."""
    m = _EXPR_NORMALIZER.match(text)
    expr = re.sub(r"\s+", "", m.group("expr") if m else text)
    return expr if _LOG.match(expr) else None


def _raw(
    cfg: Any, path: str, found: Findings, encoded: bool = False, multival_sep: str = ENCODED_SEPARATOR
) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "raw", "name": cfg.feature_name}
    column = None if encoded else _column(cfg.expression, cfg.feature_name, path, found)
    if column:
        out["column"] = column
    bounds = list(cfg.boundaries)
    if bounds:
        if any(b >= a for b, a in zip(bounds, bounds[1:])):
            found.problem(f"{path}.boundaries", "boundaries must be strictly increasing")
        out["boundaries"] = bounds
    table_or_dense("raw feature", cfg, out, path, found, "boundaries", bool(bounds))
    if cfg.HasField("normalizer") and encoded:
        found.note(f"{path}.normalizer", "ignored: FG_NONE input holds FG's normalized values")
    elif cfg.HasField("normalizer"):
        normalizer = map_normalizer(cfg.normalizer)
        if normalizer is None:
            found.problem(
                f"{path}.normalizer",
                f"normalizer {cfg.normalizer!r} is not supported: recpipe applies log(x+C) "
                "('method=expression,expr=log(x+C)'); zscore statistics are fitted on the training split "
                "rather than given, and log10/minmax/other expressions have no counterpart",
            )
        elif bounds:
            found.problem(
                f"{path}.normalizer", "a normalizer together with boundaries is not supported in recpipe"
            )
        else:
            out["normalizer"] = normalizer
    if cfg.value_dim > 1:
        _raw_vector(cfg, out, path, found, encoded, multival_sep)
    elif cfg.value_dim == 0:
        found.problem(
            f"{path}.value_dim", "value_dim 0 is not a raw feature's: its values are value_dim numbers"
        )
    else:
        _default(cfg, out, "default", path, found, encoded)
    return out


def map_features(
    configs: Any, found: Findings, encoded: bool = False, multival_sep: str = ENCODED_SEPARATOR
) -> list[dict[str, Any]]:
    """Map ``feature_configs`` in order; problems and notes go to ``found``.

    With ``encoded`` (TorchEasyRec's FG_NONE) each feature's column is its name (docs/source/feature/data.md:
    "数据列名与特征名(feature_name)同名"), an ``expression`` is not read, and FG's own settings (normalizer,
    default_value) were applied before the data was written; ``multival_sep`` (data_config's
    ``fg_encoded_multival_sep``) joins the values of one row there."""
    features: list[dict[str, Any]] = []
    paths: list[str] = []
    tables: dict[str, list[_Member]] = {}
    for i, fc in enumerate(configs):
        kind = fc.WhichOneof("feature")
        path = f"feature_configs[{i}].{kind}" if kind else f"feature_configs[{i}]"
        if kind == "custom_feature":  # refused or dropped by recpipe.tzrec.custom
            continue
        if kind is None:
            # An unsupported feature type (sequence_id_feature) is already reported once, at its line.
            if not any(q.path.startswith(f"{path}.") for q in found.problems):
                found.problem(
                    path, "feature config sets no feature (id_feature, raw_feature, sequence_feature)"
                )
            continue
        cfg = getattr(fc, kind)
        if kind == "id_feature":
            out: dict[str, Any] = {"kind": "id", "name": cfg.feature_name}
            out.update(_id_fields(cfg, path, found, encoded))
            out.update(_multi_value(cfg, path, found, encoded, multival_sep))
            column = None if encoded else _column(cfg.expression, cfg.feature_name, path, found)
            if column:
                out["column"] = column
            table = cfg.embedding_name or f"{cfg.feature_name}_emb"
            tables.setdefault(table, []).append(_Member(out, cfg.feature_name, False, path))
        elif kind == "combo_feature":
            out = _combo(cfg, path, found, encoded)
            table = cfg.embedding_name or f"{cfg.feature_name}_emb"
            tables.setdefault(table, []).append(_Member(out, cfg.feature_name, False, path))
        elif kind == "raw_feature":
            out = _raw(cfg, path, found, encoded, multival_sep)
            if "boundaries" in out:
                table = cfg.embedding_name or f"{cfg.feature_name}_emb"
                tables.setdefault(table, []).append(_Member(out, cfg.feature_name, False, path))
        elif kind in VALUE_FEATURES:
            out = map_value_feature(kind, cfg, path, found, encoded, map_normalizer)
            if "boundaries" in out or any(k in out for k in _MAPPINGS):
                table = cfg.embedding_name or f"{cfg.feature_name}_emb"
                tables.setdefault(table, []).append(_Member(out, cfg.feature_name, False, path))
        elif kind == "tokenize_feature":
            column = None if encoded else _column(cfg.expression, cfg.feature_name, path, found)
            out = map_tokenize(cfg, path, found, column, encoded, multival_sep)
            table = cfg.embedding_name or f"{cfg.feature_name}_emb"
            tables.setdefault(table, []).append(_Member(out, cfg.feature_name, False, path))
        elif kind in ("sequence_id_feature", "sequence_raw_feature"):
            out = _standalone_sequence(kind, cfg, path, found, encoded, tables)
        else:
            out = _sequence(cfg, path, found, tables, encoded)
        if kind in ("id_feature", "raw_feature"):
            for unused in ("sequence_length", "sequence_delim"):
                if cfg.HasField(unused):
                    found.note(f"{path}.{unused}", f"ignored: {kind} is not a sequence")
        if kind != "sequence_feature":
            table_settings(cfg, out, path, found)
        features.append(out)
        paths.append(path)
    _assign_tables(tables, found)
    check_feature_outputs(features, paths, found)
    return features


# A mapped feature's input fields (recpipe's name → TorchEasyRec's field, where a problem is reported).
_INPUT_FIELDS = {
    "column": "expression",
    "columns": "expression",
    "map": "map",
    "key": "key",
    "nested_map": "nested_map",
    "pkey": "pkey",
    "skey": "skey",
    "variables": "variables",
    "query": "query",
    "title": "title",
    "document": "document",
    "mask": "expression",
}


def check_feature_outputs(features: list[dict[str, Any]], paths: list[str], found: Findings) -> None:
    """Every ``"feature:X"`` input of the mapped ``features`` (``paths``: each one's config line) that recpipe
    cannot derive is reported at its field: X unknown, not a raw_feature with boundaries of one value a row, or
    reading a feature output itself (a chain or a cycle)."""
    by_name = {f["name"]: f for f in features}
    for f, path in zip(features, paths):
        for field, proto_field in _INPUT_FIELDS.items():
            given = f.get(field)
            for column in given if isinstance(given, list) else [given]:
                if isinstance(column, str) and feature_output(column) is not None:
                    why = feature_output_refusal(column, by_name.get(feature_output(column) or ""))
                    if why is not None:
                        found.problem(f"{path}.{proto_field}", why)


def _sequence(
    cfg: Any, path: str, found: Findings, tables: dict[str, list[_Member]], encoded: bool = False
) -> dict[str, Any]:
    """A grouped ``sequence_feature``: its id and numeric (``raw_feature``) sub-features. Pre-encoded
    (FG_NONE) input holds each sub-feature's ids in its own column, named ``<sequence>__<sub>``
    (``_parse_fg_encoded_sequence_sparse_feature_impl``): recpipe's kind ``sequence`` reads them so under
    ``data.fg_encoded``."""
    name = cfg.sequence_name
    out: dict[str, Any] = {
        "kind": "sequence",
        "name": name,
        "sequence_length": cfg.sequence_length,
        "delimiter": cfg.sequence_delim,
        "sub_features": [],
    }
    if cfg.HasField("sequence_pk"):
        found.note(f"{path}.sequence_pk", "ignored: the serving-side primary key has no recpipe counterpart")
    if not cfg.features:
        found.problem(path, f"sequence feature {name!r} has no sub-features")
    for j, sub_fc in enumerate(cfg.features):
        which = sub_fc.WhichOneof("feature")
        sub_path = f"{path}.features[{j}].{which}"
        if which is None:
            found.problem(f"{path}.features[{j}]", "sub-feature sets no id_feature or raw_feature")
            continue
        sub = getattr(sub_fc, which)
        # The expression names the per-item input; recpipe reads sub-values by position in the sequence
        # column (or, pre-encoded, the column <sequence>__<sub>), so only its form is checked.
        if not encoded:
            _column(sub.expression, sub.feature_name, sub_path, found, outputs=False)
        for unused in ("sequence_length", "sequence_delim"):
            if sub.HasField(unused):
                found.note(f"{sub_path}.{unused}", f"ignored: the sequence's {unused} applies")
        key = sub_feature_key(name, sub.feature_name)
        if which == "raw_feature" and not sub.boundaries:
            # Without boundaries, a float per item concatenated to the item's embeddings (TorchEasyRec's
            # SequenceEmbeddingGroupImpl, tzrec/modules/embedding.py): recpipe's dense sub-feature, no table.
            out["sub_features"].append(_dense_sub(sub, sub_path, found, encoded))
            continue
        if which == "raw_feature":
            sub_out = _bucketized(sub, sub_path, found, encoded, "a numeric sub-feature")
        else:
            sub_out = {"name": sub.feature_name}
            sub_out.update(_id_fields(sub, sub_path, found, encoded))
            _single_value_sub(sub, sub_path, found, sub_out, encoded)
            # TorchEasyRec resets a sequence feature's empty default_value to "0" (tzrec/features/feature.py,
            # Feature.default_value and fg_json): an empty sub-value such as the missing brand in
            # "782577\x037511\x03" is id 0, not a bad row.
            sub_out.setdefault("default_value", "0")
        table_settings(sub, sub_out, sub_path, found)
        table = sub.embedding_name or f"{key}_emb"
        tables.setdefault(table, []).append(_Member(sub_out, key, True, sub_path))
        out["sub_features"].append(sub_out)
    return out


_DENSE_PER_ITEM = (
    "without boundaries it is a dense value per item, which recpipe does not carry yet (a jagged float "
    "per history item through the Batch, the models and every export backend); give boundaries to bucketize "
    "it into one id per item"
)


def _dense_sub(cfg: Any, path: str, found: Findings, encoded: bool) -> dict[str, Any]:
    """A raw sub-feature without boundaries: ``{"name", "dense": true, "default"}``, one float per item (its
    ``default_value`` for an empty one). A normalizer, value_dim > 1 or a dense embedding is refused."""
    raw = _raw(cfg, path, found, encoded)
    out: dict[str, Any] = {"name": cfg.feature_name, "dense": True}
    if "default" in raw:
        out["default"] = raw["default"]
    for field, why in (
        ("normalizer", "a normalizer of a float per history item is not supported in recpipe"),
        ("mlp", "a dense embedding of a float per history item is not supported in recpipe"),
        ("autodis", "a dense embedding of a float per history item is not supported in recpipe"),
    ):
        if field in raw:
            found.problem(f"{path}.{field}", why)
    _float_value_dim(cfg, out, path, found, encoded)
    return out


def _float_value_dim(cfg: Any, out: dict[str, Any], path: str, found: Findings, encoded: bool) -> None:
    """``value_dim`` floats per history item (TorchEasyRec's ``sequence_dense_features``, ``value_dim`` wide;
    raw_feature_test.py ``test_sequence_raw_feature_dense``: ``"0.1\x1d1.1"`` by ``separator``); value_dim 0 (no
    value: TorchEasyRec's RawFeature.output_dim 0) is refused by ``_raw``."""
    if cfg.value_dim > 1:
        if encoded:
            found.problem(
                f"{path}.value_dim",
                "pre-encoded (FG_NONE) value_dim > 1 floats per history item are not supported yet",
            )
        out["value_dim"] = cfg.value_dim
        if cfg.separator != _SEPARATOR:
            out["separator"] = cfg.separator


def _bucketized(cfg: Any, path: str, found: Findings, encoded: bool, what: str) -> dict[str, Any]:
    """A numeric history value (a raw sub-feature, a sequence_raw_feature): bucketized by ``boundaries``."""
    raw = _raw(cfg, path, found, encoded)
    out = {"name": cfg.feature_name}
    if "boundaries" not in raw:
        found.problem(path, f"{what} {cfg.feature_name!r}: {_DENSE_PER_ITEM}")
        return out
    out.update({k: raw[k] for k in ("boundaries", "embedding_dim", "default") if k in raw})
    return out


def _standalone_sequence(
    kind: str, cfg: Any, path: str, found: Findings, encoded: bool, tables: dict[str, list[_Member]]
) -> dict[str, Any]:
    """``sequence_id_feature`` / ``sequence_raw_feature`` (docs/source/feature/feature.md, 普通序列特征) → kinds
    ``sequence_id`` / ``sequence_raw``: one history column (the expression's input; pre-encoded, the feature
    name), items by ``sequence_delim`` (default ``;``), the first ``sequence_length`` kept."""
    name = cfg.feature_name
    if kind == "sequence_id_feature":
        out: dict[str, Any] = {"kind": "sequence_id", "name": name}
        out.update(_id_fields(cfg, path, found, encoded))
        _single_value_sub(cfg, path, found, out, encoded)
        # As a grouped sub-feature's: TorchEasyRec makes an empty default "0" for a sequence (fg_json).
        out.setdefault("default_value", "0")
    elif not cfg.boundaries:
        # Without boundaries a float (value_dim floats) per item (raw_feature_test.py
        # test_simple_sequence_raw_feature_dense): recpipe's dense sequence_raw, no table.
        out = {"kind": "sequence_raw", **_dense_sub(cfg, path, found, encoded)}
    else:
        out = {"kind": "sequence_raw", **_bucketized(cfg, path, found, encoded, "sequence_raw_feature")}
    column = None if encoded else _column(cfg.expression, name, path, found, outputs=False)
    if column:
        out["column"] = column
    if not cfg.sequence_length:
        found.problem(path, f"{kind} {name!r} needs sequence_length (TorchEasyRec's proto has no default)")
    out["sequence_length"] = cfg.sequence_length or 1
    out["delimiter"] = cfg.sequence_delim
    if "embedding_dim" in out:
        table = cfg.embedding_name or f"{name}_emb"
        tables.setdefault(table, []).append(_Member(out, name, False, path))
    return out


def _table_shape(member: _Member) -> tuple[Any, ...]:
    t = member.target
    values = (t.get(k) for k in (*_MAPPINGS, "boundaries", "embedding_dim", "data_type", "trainable", "init"))
    return tuple(
        tuple(v) if isinstance(v, list) else tuple(sorted(v.items())) if isinstance(v, dict) else v
        for v in values
    )


def _assign_tables(tables: dict[str, list[_Member]], found: Findings) -> None:
    for table, members in tables.items():
        owner = next((m for m in members if not m.is_sub), members[0])
        shapes = {_table_shape(m) for m in members}
        if len(shapes) > 1:
            names = ", ".join(m.name for m in members)
            for m in members:
                found.problem(
                    m.path,
                    f"features sharing embedding {table!r} ({names}) differ in their buckets, embedding_dim, data_type, trainable or init",
                )
        for m in members:
            if m.is_sub or m.name != owner.name:
                m.target["embedding_name"] = owner.name


# ------------------------------------------------------------------------ multi-value, vectors, combos
_SEPARATOR = "\x1d"  # TorchEasyRec's multi-value separator (feature.proto's default)


def _multi_value(
    cfg: Any, path: str, found: Findings, encoded: bool = False, multival_sep: str = ENCODED_SEPARATOR
) -> dict[str, Any]:
    """An id or combo feature's ``separator``, ``value_dim`` (0 or unset: every value),
    ``default_bucketize_value`` and ``weighted`` (docs/source/feature/feature.md: ids ``k1:w1\x1dk2:w2``;
    pre-encoded, ``k:w`` pieces joined by ``fg_encoded_multival_sep``, tzrec/features/feature.py
    ``_parse_fg_encoded_sparse_feature_impl``); a weighted zch id is refused (recpipe's zch lookups take no weights)."""
    out: dict[str, Any] = {}
    if cfg.separator != _SEPARATOR:
        out["separator"] = cfg.separator
    if cfg.value_dim:
        out["value_dim"] = cfg.value_dim
    if cfg.HasField("default_bucketize_value"):
        out["default_bucketize_value"] = cfg.default_bucketize_value
    if "weighted" in cfg.DESCRIPTOR.fields_by_name and cfg.weighted:
        if cfg.HasField("zch"):
            found.problem(
                f"{path}.weighted",
                "weighted ids with zch: recpipe's zero-collision tables are jagged lookups without per-id weights",
            )
        out["weighted"] = True
        if encoded:
            out["separator"] = multival_sep
    return out


def _single_value_sub(
    cfg: Any, path: str, found: Findings, out: dict[str, Any] | None = None, encoded: bool = False
) -> None:
    """A history's id holds one value per item (TorchEasyRec's value_dim default of 1 there), or with
    ``value_dim: 0`` several (docs/source/feature/feature.md: array<array<>>; ``separator`` between an item's ids,
    pooled per item by ``pooling``, tzrec/modules/embedding.py ``segment_reduce``): ``out["value_dim"] = 0``."""
    if cfg.HasField("value_dim") and cfg.value_dim == 0 and out is not None:
        if encoded:
            found.problem(
                f"{path}.value_dim", "pre-encoded (FG_NONE) value_dim 0 histories are not supported yet"
            )
        out["value_dim"] = 0
        return
    if cfg.HasField("value_dim") and cfg.value_dim != 1:
        found.problem(
            f"{path}.value_dim", f"value_dim {cfg.value_dim}: recpipe reads one value per item of a sequence"
        )
    if cfg.HasField("separator"):
        found.note(f"{path}.separator", "ignored: an item of a sequence holds one value")
    for field in ("weighted", "default_bucketize_value"):
        if cfg.HasField(field):
            found.problem(f"{path}.{field}", f"{field} of a sequence sub-feature is not supported")


def _raw_vector(
    cfg: Any, out: dict[str, Any], path: str, found: Findings, encoded: bool, multival_sep: str
) -> None:
    """A raw feature of ``value_dim`` > 1 (a vector in one column); its default a number or ``value_dim`` of
    them joined by its separator (TorchEasyRec's ``"0.1\\x1d0.4"``).

    Pre-encoded (FG_NONE), the column holds FG's ``value_dim`` numbers joined by data_config's
    ``fg_encoded_multival_sep`` (default ``"\\x03"``; the feature's ``separator`` split the raw input), or a
    list; ``fg_encoded_default_value`` (numbers by that separator) fills an empty one
    (``_parse_fg_encoded_dense_feature_impl``, ``Feature.fg_encoded_default_value`` in tzrec/features/feature.py).
    """
    out["value_dim"] = cfg.value_dim
    sep = multival_sep if encoded else cfg.separator
    if sep != _SEPARATOR:
        out["separator"] = sep
    if encoded and "boundaries" in out:
        found.problem(
            f"{path}.value_dim",
            "pre-encoded (FG_NONE) bucketized raw features of value_dim > 1 (value_dim bucket ids a row) are "
            "not supported yet",
        )
        return
    field = _default_field(cfg, path, found, encoded)
    text = getattr(cfg, field)
    if not cfg.HasField(field) or not text:
        return
    try:
        values = [float(v) for v in text.split(sep)]
    except ValueError:
        found.problem(f"{path}.{field}", f"{field} {text!r} is not numbers")
        return
    if len(values) not in (1, cfg.value_dim):
        found.problem(
            f"{path}.{field}", f"{field} {text!r} holds {len(values)} numbers; value_dim is {cfg.value_dim}"
        )
        return
    out["default"] = values[0] if len(values) == 1 else values


def _combo(cfg: Any, path: str, found: Findings, encoded: bool) -> dict[str, Any]:
    """``combo_feature`` → kind ``combo``: its ``expression`` list names the crossed columns (each
    ``<side>:<input>``, as an id feature's expression). Pre-encoded (FG_NONE), the column named after the
    feature holds the crossed ids FG wrote: an id feature of kind ``id``."""
    out: dict[str, Any] = {"kind": "id" if encoded else "combo", "name": cfg.feature_name}
    if not encoded:
        if len(cfg.expression) < 2:
            found.problem(f"{path}.expression", "a combo feature crosses 2 or more inputs (expression: [..])")
        columns = [_column(e, "", f"{path}.expression[{j}]", found) for j, e in enumerate(cfg.expression)]
        out["columns"] = [c for c in columns if c]
    out.update(_id_fields(cfg, path, found, encoded))
    out.update(_multi_value(cfg, path, found))
    return out


def table_settings(cfg: Any, out: dict[str, Any], path: str, found: Findings) -> None:
    """The common ``data_type`` (FP32 / FP16, tzrec/features/feature.py ``_dtype_str_to_data_type``),
    ``trainable`` and ``init_fn`` (→ ``init``, recpipe/tzrec/table_init.py) of a feature's embedding table; a dense
    value has no table (a note says so)."""
    has_table = not out.get("dense") and (  # a dense per-item history value has no table either
        out.get("kind") in ("id", "bool_mask", "tokenize", None)
        or "boundaries" in out
        or any(k in out for k in _MAPPINGS)
    )
    data_type = cfg.data_type if cfg.HasField("data_type") else "FP32"
    if data_type not in ("FP32", "FP16"):
        found.problem(
            f"{path}.data_type", f"data_type {data_type!r} is not 'FP32' or 'FP16' (TorchEasyRec's)"
        )
        return
    init_fn = "init_fn" in cfg.DESCRIPTOR.fields_by_name and cfg.HasField("init_fn")
    given = [k for k in ("data_type", "trainable", *(["init_fn"] if init_fn else [])) if cfg.HasField(k)]
    if not has_table:
        for k in given:
            found.note(f"{path}.{k}", "ignored: a dense value has no embedding table")
        return
    if data_type == "FP16":
        out["data_type"] = "fp16"
    if not cfg.trainable:
        out["trainable"] = False
    if init_fn and "dynamicemb" in cfg.DESCRIPTOR.fields_by_name and cfg.HasField("dynamicemb"):
        found.note(
            f"{path}.init_fn",
            "ignored: a dynamicemb table draws from dynamicemb's initializer_args (TorchEasyRec does not convert "
            "init_fn, build_dynamicemb_constraints)",
        )
    elif init_fn:
        init = map_init_fn(cfg.init_fn, f"{path}.init_fn", found)  # recpipe/tzrec/table_init.py
        if init is not None:
            out["init"] = init
