"""Synthetic rows for any recpipe config (``synthetic:config?path=<config.yaml>``): every input column its
features read, in the form each kind parses, with a planted click model whose true probability is written
(``true_prob``), so the oracle AUC is known before any real data exists.

How the rows are made:

- **Plan.** Each feature's kind claims its input columns through :data:`CLAIMS` (one entry per kind: ids,
  numbers, a raw vector, a ``k:v`` map, a two-level ``pk^sk:v`` map, query/title terms, text to tokenize
  (an item's title: 1 to 3 words joined by spaces, text even with ``lists=1``, drawn a title a row from a
  Zipf catalogue so titles repeat across rows as items do), a history: a
  standalone ``sequence_id`` / ``sequence_raw`` is one of one sub-feature, itself). Columns
  read by several features merge their claims (an id column a lookup keys on and an ``expr`` compares is
  one integer id column); claims that cannot be one column are refused, naming both features. A kind
  without an entry is refused by name.
- **Id spaces.** Ids come from bounded vocabularies with Zipf popularity. Columns of one embedding table
  (``embedding_name``), a history's sub-feature and its candidate column (the feature of the same name), a
  lookup's key column and its map's keys, a match's key columns and the map's keys, a query and its title
  share one space, so a history holds the candidate's ids and a map holds the row's key. A ``num_buckets``
  space holds integers below it, a ``vocab_list`` space the list plus a few out-of-vocabulary values, a
  hashed one short strings (``pid3``); an id column a kind reads as a number holds integers.
- **Multi-value ids.** An id column holds several ids per row when its feature says so: ``value_dim`` > 1,
  a ``separator`` other than TorchEasyRec's default ``"\\x1d"``, or ``pooling: mean`` (unless another reader
  needs one value per row, or splits by another separator and reads integers); ``lists=1`` writes them (and
  vectors, terms) as list columns.
- **Weighted ids.** A ``weighted: true`` id column holds ``k:w`` pieces (a weight in ``[0.1, 2]``, two decimals;
  with ``lists=1`` a list of ``k:w`` texts), several per row, and no other feature may read it.
- **The click model.** ``logit = base + Σ per-id effects`` of the first few id features ``+`` linear terms of
  the first numeric columns and raw vector ``+`` a pair effect of the first combo's columns ``+ 1.2 ·
  0.93^position`` of the candidate's most recent occurrence in each history (the candidate is one of the
  history's items a third of the time) ``+`` the looked-up value of the first lookup and match ``+`` the
  first overlap's planted query-in-title; ``base`` is calibrated to a 10% positive rate; ``true_prob`` is
  ``sigmoid(logit)``. Each further label of ``data.label_fields`` is drawn after the previous one (a buy after
  a click), ``P = P(previous) · sigmoid(its own logit)``, its true probability in ``true_<label>_prob``.
- **Other columns.** ``data.split.time_column`` (8 days of timestamps), ``data.weight``,
  ``data.group_column`` / ``eval.gauc_group`` when no feature reads them.
- **A domain label** (PEPNet's ``domain_label``, ``D`` domains) is not a task's: its column holds integers drawn
  uniformly in ``[0, D)``, never null, replacing a feature's values when a feature reads that column (as
  TorchEasyRec's ``occupation``; that feature then plays no part in the click model's probabilities).
- **Nulls.** A share ``nulls`` (default 1%) of every feature input column is null; the raw-value contract
  makes a null a missing value everywhere, so with ``on_bad_row: error`` every row passes FG. Labels, weight
  and time are never null.

Vectorized: every column is drawn and formatted with numpy and pyarrow over whole chunks (loops run over
columns and over a handful of positions, never over rows). Deterministic for ``(config, rows, seed,
chunk_rows)``.

Example::

    cfg = load_config("configs/rich_taobao_small.yaml")
    model = build_model(cfg, seed=0, rows=5000)
    table, labels, probs = make_chunk(model, 0, 0, 5000)     # every input column, labels, true_prob
    generate("config", 5000, "runs/x/raw", config="configs/rich_taobao_small.yaml")   # what the URI does
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config import RecpipeConfig
from recpipe.config.expr import parse_expression
from recpipe.config.features import MATCH_ALL, MULTI_VALUE_SEPARATOR, feature_output, sub_feature_key
from recpipe.data.synthetic.common import ZipfSampler, calibrate_base, sigmoid

_TAG = 0xC0F16  # separates this generator's random streams from the Taobao and Criteo ones
FIRST_DAY = 1_494_028_800  # as synthetic Taobao data: 2017-05-06 00:00:00 UTC
DAYS = 8
TARGET_POSITIVE_RATE = 0.10
NEXT_LABEL_RATE = 0.3  # P(label t | label t-1)
DEFAULT_NULLS = 0.01
MAX_EFFECT_IDS = 6  # id columns with per-id effects in the click model
MAX_NUMBERS = 3  # numeric columns with a linear term
ID_EFFECT_SD = 0.6
HISTORY_MATCH = 1.2
RECENCY_DECAY = 0.93
TARGETED = 1 / 3  # share of rows whose candidate is an item of the history
MAP_VALUES = 20  # a map's numeric values are 1..20
VECTOR_LENGTH = 4  # items of an expr vector not also a raw vector
CALIBRATION_ROWS = 20_000


class SyntheticConfigError(ValueError):
    """A config synthetic:config cannot generate rows for: the message names the feature (and kind)."""


# ----------------------------------------------------------------------------------------------- plan
@dataclass
class Space:
    """A bounded vocabulary of values: what the columns sharing it draw from (constraints merged)."""

    key: str
    bound: int | None = None  # integers below it (num_buckets)
    limit: int | None = None  # at most this many values (hash_bucket_size)
    ints: bool = False  # non-negative integers (a mod mapping, or read as a number)
    vocab: list[str] | None = None
    linear: bool = False  # a map's values: small integers whose effect grows with the value
    # built
    values: pa.Array | None = None  # int64 or string
    text: pa.Array | None = None  # the values as text
    sampler: ZipfSampler | None = None
    effect: np.ndarray = field(default_factory=lambda: np.zeros(0))
    effect2: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def size(self) -> int:
        return len(self.values) if self.values is not None else 0


@dataclass
class Column:
    """One input column and what its readers need of it."""

    name: str
    role: str  # ids | number | vector | map | nested | sequence
    owners: list[str] = field(default_factory=list)
    # ids
    space: str = ""
    seps: set[str] = field(default_factory=set)  # separators the readers split it by
    multi: str | None = None  # the separator of a reader asking for several values per row
    single: bool = False  # a reader needs one value per row
    max_values: int = 0  # value_dim of the reader asking for several
    effect: bool = False  # an id feature's column: part of the click model
    weighted: bool = False  # a weighted id feature's column: "k:w" pieces
    numeric: bool = False  # a reader takes it as a number: one integer per row
    target: tuple[str, int] | None = None  # (history column, sub-feature index): the candidate of a history
    contains: str | None = None  # a title: holds its query column's terms half of the time
    terms: bool = False
    text: bool = False  # text a tokenizer reads: words joined by spaces, never a list column
    # number / vector
    boundaries: list[float] | None = None
    offset: float | None = None  # a log(x+C) normalizer: values > -C
    grid: list[float] | None = None  # the values drawn (a dense raw feature's output keys a lookup)
    dim: int | None = None
    vsep: str = MULTI_VALUE_SEPARATOR
    # map (lookup) / nested (match)
    keys: list[str] = field(default_factory=list)  # key column(s) (map: key columns; nested: pkey, skey)
    key_spaces: list[str] = field(default_factory=list)
    value_space: str = ""
    # sequence
    sequence: Any = None
    # "feature:X" (a lookup key): X's bucket ids or values, which FG derives from X's column: drawn from it,
    # not written
    output_of: Any = None

    @property
    def is_multi(self) -> bool:
        return self.role == "ids" and self.multi is not None and not self.single


class Plan:
    """The columns a config's features read, claimed kind by kind (:data:`CLAIMS`), and their id spaces."""

    def __init__(self, cfg: RecpipeConfig, features: list[Any] | None = None) -> None:
        self.cfg = cfg
        self.columns: dict[str, Column] = {}
        self._spaces: dict[str, Space] = {}
        self._parent: dict[str, str] = {}
        self.feature_list = list(cfg.features if features is None else features)
        self.features = {key: f for f in self.feature_list for key in f.feature_keys()}
        self.combos: list[list[str]] = []
        self.lookups: list[str] = []
        self.matches: list[str] = []
        self.overlaps: list[str] = []

    # ---------------------------------------------------------------------- spaces (union-find)
    def space(self, key: str, **constraints: Any) -> str:
        """The space ``key`` (created when new) with ``constraints`` merged in."""
        if key not in self._parent:
            self._parent[key] = key
            self._spaces[key] = Space(key)
        s = self._spaces[self.root(key)]
        _constrain(s, **constraints)
        return key

    def root(self, key: str) -> str:
        while self._parent[key] != key:
            self._parent[key] = self._parent[self._parent[key]]
            key = self._parent[key]
        return key

    def union(self, a: str, b: str) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return
        self._parent[rb] = ra
        other = self._spaces.pop(rb)
        _constrain(
            self._spaces[ra],
            bound=other.bound,
            ints=other.ints,
            vocab=other.vocab,
            linear=other.linear,
            limit=other.limit,
        )

    def spaces(self) -> dict[str, Space]:
        return {k: s for k, s in self._spaces.items() if self.root(k) == k}

    def space_of(self, key: str) -> Space:
        return self._spaces[self.root(key)]

    # ---------------------------------------------------------------------------------- claims
    def _column(self, name: str, role: str, feature: str) -> Column:
        col = self.columns.get(name)
        if col is None:
            col = self.columns[name] = Column(name, role)
        elif {col.role, role} == {"ids", "number"}:  # an id column read as a number: integer ids
            if col.role == "number":
                col.role, col.boundaries, col.offset = "ids", None, None
            col.single = col.numeric = True
            if col.space:
                self.space_of(col.space).ints = True
        elif col.role != role:
            raise SyntheticConfigError(
                f"column {name!r} is read as {_ROLE[col.role]} by feature(s) {col.owners} and as {_ROLE[role]} by "
                f"feature {feature!r}: synthetic:config generates one kind of value per column"
            )
        if feature not in col.owners:
            col.owners.append(feature)
        return col

    def ids(
        self,
        column: str,
        feature: str,
        space: str,
        sep: str | None = None,
        multi: bool = False,
        single: bool = False,
        max_values: int = 0,
        effect: bool = False,
        **constraints: Any,
    ) -> Column:
        """Claim ``column`` as ids of ``space`` (joined with the space its other readers gave it)."""
        col = self._column(column, "ids", feature)
        self.space(space, **constraints)
        if col.space:
            self.union(col.space, space)
        else:
            col.space = space
        if col.numeric:
            self.space_of(col.space).ints = True
        if sep is not None:
            col.seps.add(sep)
        if multi and sep is not None and col.multi is None:
            col.multi, col.max_values = sep, max_values
        col.single |= single
        col.effect |= effect
        return col

    def number(self, column: str, feature: str, boundaries: list[float] | None = None, offset=None) -> None:
        col = self._column(column, "number", feature)
        if col.role == "ids":
            return
        col.boundaries = col.boundaries or boundaries
        col.offset = offset if col.offset is None else max(col.offset, offset or 0.0)

    def vector(self, column: str, feature: str, dim: int | None, sep: str, offset=None) -> None:
        col = self._column(column, "vector", feature)
        if dim is not None and col.dim is not None and dim != col.dim:
            raise SyntheticConfigError(
                f"column {column!r} is a vector of {col.dim} values for {col.owners[:-1]} and of {dim} for "
                f"feature {feature!r}"
            )
        if len(col.owners) == 1:
            col.vsep = sep
        col.dim = col.dim or dim
        col.offset = offset if col.offset is None else col.offset

    def kv_map(self, column: str, feature: str, key: str, values: str) -> None:
        col = self._column(column, "map", feature)
        key_space = self.columns[key].space
        if col.keys:
            self.union(col.key_spaces[0], key_space)
            self.union(col.value_space, values)
        else:
            col.keys, col.key_spaces, col.value_space = [key], [key_space], values

    def nested_map(self, column: str, feature: str, keys: list[str | None], spaces: list[str], values: str):
        col = self._column(column, "nested", feature)
        if col.keys:
            for mine, theirs in zip(col.key_spaces, spaces):
                self.union(mine, theirs)
            self.union(col.value_space, values)
        else:
            col.keys = [k or "" for k in keys]
            col.key_spaces, col.value_space = spaces, values


_ROLE = {
    "ids": "ids",
    "number": "a number",
    "vector": "a vector of numbers",
    "map": "a key:value map (lookup)",
    "nested": "a two-level map (match)",
    "sequence": "a history",
}


def _constrain(s: Space, bound=None, ints=False, vocab=None, linear=False, limit=None) -> None:
    if limit is not None:
        s.limit = limit if s.limit is None else min(s.limit, limit)
    if bound is not None:
        s.bound = bound if s.bound is None else min(s.bound, bound)
        s.ints = True
    s.ints |= bool(ints)
    s.linear |= bool(linear)
    if vocab is not None and s.vocab is None:
        s.vocab = list(vocab)


# The values a dense raw feature read as "feature:X" draws from: exact in float32, positive (a log(x+C) reader
# of the same column holds).
_OUTPUT_VALUES = (0.25, 0.5, 1.0, 1.5, 2.5, 4.0)


def float_keys(x: np.ndarray) -> pa.Array:
    """Numbers as the key text FG reads of a dense raw feature's output: float32, shortest round-trip."""
    return pa.array(np.asarray(x, np.float32)).cast(pa.string())


# A numeric history sub-value (bucketized by boundaries, or a dense float per item) draws from the integers
# below this: their text is a number FG reads.
_NUMERIC_SUB_VALUES = 100


def _mapping(f: Any) -> dict[str, Any]:
    """The space constraints of an id mapping (num_buckets, vocab_list, vocab_file; hash_bucket_size caps the
    number of values)."""
    if getattr(f, "hash_bucket_size", None) is not None:
        return {"limit": f.hash_bucket_size}
    if getattr(f, "num_buckets", None) is not None:
        return {"bound": f.num_buckets}
    if getattr(f, "vocab_list", None) is not None:
        return {"vocab": f.vocab_list}
    if getattr(f, "vocab_file", None) is not None:
        path = Path(f.vocab_file)
        if not path.is_file():
            raise SyntheticConfigError(f"feature {f.name!r}: vocab_file {path} does not exist")
        return {"vocab": [line.strip() for line in path.read_text().splitlines() if line.strip()]}
    return {}


def _log_offset(normalizer: str | None) -> float | None:
    from recpipe.config.features import _NORMALIZER

    m = _NORMALIZER.match(normalizer or "")
    return float(m.group("off")) if m and m.group("off") else None


# ----------------------------------------------------------------------------------- kind claims
def claim_id(f: Any, plan: Plan) -> None:
    multi = f.value_dim > 1 or f.separator != MULTI_VALUE_SEPARATOR or f.pooling == "mean" or f.weighted
    col = plan.ids(
        f.source_column,
        f.name,
        f"table:{f.embedding_name or f.name}",
        sep=f.separator,
        multi=multi,
        max_values=f.value_dim,
        effect=True,
        **_mapping(f),
    )
    col.weighted |= f.weighted


def claim_raw(f: Any, plan: Plan) -> None:
    offset = _log_offset(f.normalizer)
    if f.value_dim > 1:
        plan.vector(f.source_column, f.name, f.value_dim, f.separator, offset)
    else:
        plan.number(f.source_column, f.name, f.boundaries, offset)


def claim_sequence(f: Any, plan: Plan) -> None:
    _claim_history(f, plan, lambda sub: sub_feature_key(f.name, sub.name))


@dataclass(frozen=True)
class StandaloneHistory:
    """A standalone history (``sequence_id``, ``sequence_raw``) drawn as a grouped one of one sub-feature, the
    feature itself: its items are the sub-feature's values (a dense one's ``value_dim`` floats by its separator)."""

    feature: Any
    sub_delimiter: str = MULTI_VALUE_SEPARATOR  # unused: one sub-value an item

    @property
    def name(self) -> str:
        return self.feature.name

    @property
    def source_column(self) -> str:
        return self.feature.source_column

    @property
    def sequence_length(self) -> int:
        return self.feature.sequence_length

    @property
    def delimiter(self) -> str:
        return self.feature.delimiter

    @property
    def sub_features(self) -> list[Any]:
        return [self.feature]


def claim_standalone_sequence(f: Any, plan: Plan) -> None:
    # Its table is its own (or its embedding_name's), as an id feature's: other readers of it share the ids.
    _claim_history(StandaloneHistory(f), plan, lambda sub: sub.name)


def _claim_history(f: Any, plan: Plan, table_of: Callable[[Any], str]) -> None:
    """A history column of ``f`` (its sub-features' spaces; a sub-feature named after an id feature holds the
    candidate's ids); ``table_of(sub)`` is a sub-feature's table without an ``embedding_name``."""
    col = plan._column(f.source_column, "sequence", f.name)
    if col.sequence is not None:
        raise SyntheticConfigError(
            f"column {f.source_column!r} is the history of sequences {col.owners}: synthetic:config draws one "
            "history per column"
        )
    col.sequence = f
    col.key_spaces = []
    for j, sub in enumerate(f.sub_features):
        numeric = getattr(sub, "dense", False) or getattr(sub, "boundaries", None) is not None
        space = plan.space(
            f"table:{getattr(sub, 'embedding_name', None) or table_of(sub)}",
            **({"bound": _NUMERIC_SUB_VALUES} if numeric else _mapping(sub)),
        )
        target = plan.features.get(sub.name)
        if target is not None and getattr(target, "kind", None) == "id":  # the candidate: the same ids
            tcol = plan.ids(target.source_column, f.name, space, single=True)
            if tcol.target is None:
                tcol.target = (f.source_column, j)
        col.key_spaces.append(space)


def claim_combo(f: Any, plan: Plan) -> None:
    for c in f.columns:
        plan.ids(c, f.name, f"col:{c}", sep=f.separator)
    plan.combos.append(list(f.columns))


def _value_space(plan: Plan, f: Any, key: str) -> str:
    """The space of a lookup's or match's values: ids of its mapping, else small integers (numbers)."""
    constraints = _mapping(f)
    if not constraints.get("vocab"):
        constraints["ints"] = True
        constraints["linear"] = True
    return plan.space(key, **constraints)


def claim_lookup(f: Any, plan: Plan) -> None:
    name = feature_output(f.key)
    if name is not None and plan.features[name].boundaries is None:
        # A dense X (the config checked it): its column draws from a grid of values exact in float32 and the
        # map's keys are their text as FG writes it ("0.25", "2"), X's default's among them, so lookups hit.
        target = plan.features[name]
        plan._column(target.source_column, "number", target.name).grid = list(_OUTPUT_VALUES)
        keys = float_keys(np.asarray([*_OUTPUT_VALUES, target.default])).unique().to_pylist()
        col = plan.ids(f.key, f.name, f"values-of:{name}", single=True, vocab=keys)
        col.output_of = target
    elif name is not None:
        # X's bucket ids 0..len(boundaries) (the config checked X), so the map's keys are those and lookups hit.
        target = plan.features[name]
        buckets = [str(i) for i in range(len(target.boundaries) + 1)]
        col = plan.ids(f.key, f.name, f"buckets:{name}", single=True, bound=len(buckets), vocab=buckets)
        col.output_of = target
    else:
        multi = f.separator != MULTI_VALUE_SEPARATOR
        plan.ids(f.key, f.name, f"col:{f.key}", sep=f.separator, multi=multi)
    plan.kv_map(f.map, f.name, f.key, _value_space(plan, f, f"values:{f.map}"))
    plan.lookups.append(f.map)


def claim_match(f: Any, plan: Plan) -> None:
    keys: list[str | None] = []
    spaces: list[str] = []
    for level, column in (("pk", f.pkey), ("sk", f.skey)):
        if column == MATCH_ALL:
            keys.append(None)
            spaces.append(plan.space(f"{level}:{f.nested_map}"))
        else:
            col = plan.ids(column, f.name, f"col:{column}", single=True)
            keys.append(column)
            spaces.append(col.space)
    plan.nested_map(f.nested_map, f.name, keys, spaces, _value_space(plan, f, f"values:{f.nested_map}"))
    plan.matches.append(f.nested_map)


def claim_expr(f: Any, plan: Plan) -> None:
    vectors = parse_expression(f.expression).vectors
    for v in f.input_columns():
        if v in vectors:
            plan.vector(v, f.name, None, f.separator)
        else:
            plan.number(v, f.name)


def claim_overlap(f: Any, plan: Plan) -> None:
    space = f"terms:{f.query}"
    q = plan.ids(f.query, f.name, space, sep=f.separator, multi=True)
    t = plan.ids(f.title, f.name, space, sep=f.separator, multi=True)
    q.terms = t.terms = True
    if t.contains is None and f.title != f.query:
        t.contains = f.query
    plan.overlaps.append(f.title)


def claim_tokenize(f: Any, plan: Plan) -> None:
    # Text: words of the column's own space ("title3 title17") joined by spaces, which any tokenizer reads.
    col = plan.ids(f.source_column, f.name, f"words:{f.source_column}", sep=" ", multi=True)
    col.terms = col.text = True


# kind → how its features claim their input columns. A new kind is one entry (reusing Plan's claims).
CLAIMS: dict[str, Callable[[Any, Plan], None]] = {
    "id": claim_id,
    "raw": claim_raw,
    "sequence": claim_sequence,
    "sequence_id": claim_standalone_sequence,
    "sequence_raw": claim_standalone_sequence,
    "combo": claim_combo,
    "lookup": claim_lookup,
    "match": claim_match,
    "expr": claim_expr,
    "overlap": claim_overlap,
    "tokenize": claim_tokenize,
}


def encoded_features(features: list[Any]) -> list[Any]:
    """The raw-row features whose columns hold what pre-encoded input (``data.fg_encoded``, TorchEasyRec's
    FG_NONE) holds for ``features``: an id's column integer ids below its table's rows (``num_buckets`` or
    ``hash_bucket_size``), a bucketized raw value its bucket id, a dense one its number(s) as they are, and each
    history sub-feature a column ``<sequence>__<sub>`` of its ids by the sequence's delimiter, item by item of
    one history (:func:`encoded_histories`), so the columns agree in length and hold the candidate's ids.

    Raises:
        SyntheticConfigError: a kind that has no pre-encoded form here (the value kinds read raw columns).
    """
    from recpipe.config.features import IdFeatureConfig, SequenceFeatureConfig, SubFeatureConfig

    def rows(sub: Any) -> int:
        bounds = getattr(sub, "boundaries", None)
        if getattr(sub, "dense", False):  # a float per item: the integers below it are floats too
            return _NUMERIC_SUB_VALUES
        return len(bounds) + 1 if bounds is not None else (sub.num_buckets or sub.hash_bucket_size)

    out: list[Any] = []
    for f in features:
        if f.kind == "id":
            update = {"num_buckets": rows(f), "hash_bucket_size": None, "column": f.source_column}
            out.append(f.model_copy(update=update))
        elif f.kind == "raw" and f.boundaries is not None and f.value_dim == 1:
            out.append(
                IdFeatureConfig(
                    kind="id",
                    name=f.name,
                    column=f.source_column,
                    num_buckets=rows(f),
                    embedding_dim=f.embedding_dim,
                )
            )
        elif f.kind == "raw":
            out.append(f)
        elif f.kind in ("sequence", "sequence_id"):
            # One history of every sub-feature (make_chunk writes each sub-feature's column from it); a
            # sequence_id feature is a history of one sub-feature named after it, its column its name.
            subs = f.sub_features if f.kind == "sequence" else [f]
            ids = [SubFeatureConfig(name=sub.name, num_buckets=rows(sub)) for sub in subs]
            out.append(
                SequenceFeatureConfig(
                    kind="sequence",
                    name=f.name,
                    column=f.source_column,
                    sequence_length=f.sequence_length,
                    delimiter=f.delimiter,
                    sub_features=ids,
                )
            )
        else:
            raise SyntheticConfigError(
                f"feature {f.name!r}: synthetic:config has no pre-encoded (data.fg_encoded) form of kind {f.kind!r}"
            )
    return out


def plan_columns(cfg: RecpipeConfig) -> Plan:
    """Every input column of ``cfg``'s features, claimed through :data:`CLAIMS`.

    Raises:
        SyntheticConfigError: a kind without a generator, pre-encoded input, or columns two features read in
            ways one column cannot hold.
    """
    plan = Plan(cfg, encoded_features(cfg.features) if cfg.data.fg_encoded else None)
    for f in plan.feature_list:
        claim = CLAIMS.get(f.kind)
        if claim is None:
            raise SyntheticConfigError(
                f"feature {f.name!r}: synthetic:config has no generator for kind {f.kind!r} (it generates "
                f"{', '.join(sorted(CLAIMS))}); add an entry to recpipe.data.synthetic.config.CLAIMS"
            )
        claim(f, plan)
    for col in plan.columns.values():
        if col.weighted and len(col.owners) > 1:
            raise SyntheticConfigError(
                f"column {col.name!r} holds the weighted ids ('k:w') of {col.owners[0]!r} and is read by "
                f"{col.owners[1:]} too: synthetic:config draws a weighted id column for its feature alone"
            )
        # Several ids per row, unless a reader needs one, or splits by another separator and reads integers
        # (it would see "12,34" as one id, not an integer); a text reader sees one (unknown) id, no bad row.
        if col.multi is not None and (
            col.single or (col.seps - {col.multi} and plan.space_of(col.space).ints)
        ):
            col.multi = None
    return plan


# ---------------------------------------------------------------------------------------------- model
@dataclass
class Catalogue:
    """A history's items: each item's index in the space of every sub-feature, its popularity and text."""

    column: str
    attrs: list[np.ndarray]
    sampler: ZipfSampler
    text: pa.Array
    max_length: int
    delimiter: str


@dataclass
class ConfigModel:
    """Everything drawn once per seed: spaces, catalogues, effects, the calibrated intercepts."""

    plan: Plan
    spaces: dict[str, Space]
    catalogues: dict[str, Catalogue]
    columns: list[Column]
    labels: tuple[str, ...]  # the tasks' labels (a domain label is not one)
    oracle: str
    nulls: float
    lists: bool
    extra: dict[str, str]  # time / weight / group column name → what it is
    coef: dict[str, float]
    pair_effect: np.ndarray
    bases: list[float] = field(default_factory=list)
    rows: int = 0
    # History column → (the first history of its sequence group, their shortest max_length): histories FG reads
    # item by item together (:func:`aligned_histories`) take one length per row.
    aligned: dict[str, tuple[str, int]] = field(default_factory=dict)
    domain: tuple[str, int] | None = None  # (domain label, D): the model's domain towers read it

    def prob_columns(self) -> list[str]:
        return [self.oracle] + [f"true_{label}_prob" for label in self.labels[1:]]


def aligned_histories(
    cfg: RecpipeConfig, plan: Plan, catalogues: dict[str, Catalogue]
) -> dict[str, tuple[str, int]]:
    """The histories of different sequences one sequence group lists (TorchEasyRec's standalone sequence_id and
    sequence_raw features side by side), which FG reads item by item and so checks row by row for equal
    lengths: each history column → (the group's first, the shortest ``sequence_length`` of them)."""
    out: dict[str, tuple[str, int]] = {}
    for g in cfg.feature_groups:
        if g.type != "sequence":
            continue
        read = (plan.features.get(k) for k in g.features)
        cols = list(
            dict.fromkeys(f.source_column for f in read if f is not None and f.source_column in catalogues)
        )
        cap = min((catalogues[c].max_length for c in cols), default=0)
        for c in cols if len(cols) > 1 else []:
            out.setdefault(c, (cols[0], cap))
    return out


def _cap(rows: int, vocab: int | None) -> int:
    return int(vocab) if vocab else max(20, min(100_000, rows // 20))


def _build_space(s: Space, rng: np.random.Generator, cap: int) -> None:
    cap = min(cap, s.limit) if s.limit else cap
    prefix = "".join(ch for ch in s.key.split(":", 1)[-1].lower() if ch.isalnum())[:8] or "v"
    if not prefix[0].isalpha():
        prefix = "v" + prefix
    if s.vocab is not None and not (s.ints and not any(_is_uint(v, s.bound) for v in s.vocab)):
        vocab = [v for v in s.vocab if _is_uint(v, s.bound)] if s.ints else list(s.vocab)
        n_oov = max(1, len(vocab) // 20)
        if s.ints:
            top = max(int(v) for v in vocab)
            oov = [str(top + 1 + k) for k in range(n_oov) if s.bound is None or top + 1 + k < s.bound]
        else:
            oov = [f"oov{prefix}{k}" for k in range(n_oov)]
        values: pa.Array = pa.array(vocab + oov, pa.string())
        if s.ints:
            values = values.cast(pa.int64())
    elif s.linear:
        size = min(MAP_VALUES, s.bound or MAP_VALUES)
        values = pa.array(np.arange(size, dtype=np.int64) + (0 if s.bound is not None else 1))
    elif s.ints:
        bound = s.bound or 10 * cap + 1
        if bound <= cap + 1:
            values = pa.array(np.arange(bound, dtype=np.int64))
        else:
            values = pa.array(rng.choice(bound - 1, size=cap, replace=False).astype(np.int64) + 1)
    else:
        values = pc.binary_join_element_wise(
            prefix, pa.array(np.arange(cap, dtype=np.int64)).cast(pa.string()), ""
        )
    s.values = values
    s.text = values if pa.types.is_string(values.type) else values.cast(pa.string())
    s.sampler = ZipfSampler(len(values), 0.3 if s.linear else 1.0)
    if s.linear:  # a larger value found (more clicks of the category) makes a click likelier
        s.effect = np.linspace(0.2, 1.6, len(values))
    else:
        s.effect = rng.normal(0.0, ID_EFFECT_SD, len(values))
    s.effect2 = rng.normal(0.0, ID_EFFECT_SD, len(values))


def _is_uint(v: str, bound: int | None) -> bool:
    return v.isdigit() and len(v) < 19 and (bound is None or int(v) < bound)


def build_model(
    cfg: RecpipeConfig,
    seed: int,
    rows: int,
    nulls: float = DEFAULT_NULLS,
    vocab: int | None = None,
    lists: bool = False,
) -> ConfigModel:
    """The spaces, history catalogues and click model of ``cfg`` for ``seed`` (``rows`` sizes the
    vocabularies: one value per 20 rows, at least 20, at most 100,000; ``vocab`` sets it).

    Raises:
        SyntheticConfigError: see :func:`plan_columns`.
    """
    if not 0.0 <= nulls < 0.5:
        raise ValueError(f"nulls must be in [0, 0.5), got {nulls}")
    plan = plan_columns(cfg)
    rng = np.random.default_rng([seed, _TAG, 1 << 40])
    cap = _cap(rows, vocab)
    spaces = plan.spaces()
    for key in sorted(spaces):  # a fixed order: the same seed, the same values
        _build_space(spaces[key], rng, cap)
    catalogues: dict[str, Catalogue] = {}
    for col in plan.columns.values():
        if col.role != "sequence":
            continue
        f = col.sequence
        subs = [plan.space_of(k) for k in col.key_spaces]
        n_items = max(10, min(cap, 5 * max(s.size for s in subs)))
        attrs = []
        for j, s in enumerate(subs):
            if j == 0 and s.size >= n_items:
                attrs.append(rng.permutation(s.size)[:n_items].astype(np.int64))
            else:
                attrs.append(s.sampler.sample(rng, n_items))
        lone = len(subs) == 1
        parts = [_sub_text(s, a, sub, lone) for s, a, sub in zip(subs, attrs, f.sub_features)]
        text = pc.binary_join_element_wise(*parts, f.sub_delimiter) if len(parts) > 1 else parts[0]
        catalogues[col.name] = Catalogue(
            col.name, attrs, ZipfSampler(n_items, 0.9), text, f.sequence_length, f.delimiter
        )
    extra: dict[str, str] = {}
    split = cfg.data.split
    if split.eval_fraction is None and split.time_column:
        extra[split.time_column] = "time"
    if cfg.data.weight:
        extra[cfg.data.weight] = "weight"
    for g in (cfg.data.group_column, cfg.eval.gauc_group):
        if g:
            extra.setdefault(g, "group")
    for name, what in list(extra.items()):
        if name in plan.columns and not (what == "time" and plan.columns[name].role == "number"):
            del extra[name]  # a feature's column already
    domain = cfg.model.domains()
    tasks = [c for c in cfg.data.labels if domain is None or c != domain[0]]
    if any(c in plan.columns for c in tasks):
        raise SyntheticConfigError(f"a label column of {tasks} is also a feature's input column")
    columns = list(plan.columns.values())
    numbers = [c.name for c in columns if c.role == "number" and extra.get(c.name) != "time"][:MAX_NUMBERS]
    coef = {name: float(rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 0.6)) for name in numbers}
    model = ConfigModel(
        plan=plan,
        spaces=spaces,
        catalogues=catalogues,
        columns=columns,
        labels=tuple(tasks),
        oracle=cfg.data.oracle_column or "true_prob",
        nulls=float(nulls),
        lists=bool(lists),
        extra=extra,
        coef=coef,
        pair_effect=rng.normal(0.0, 0.5, 4096),
        aligned=aligned_histories(cfg, plan, catalogues),
        rows=rows,
        domain=domain,
    )
    calib = _draw(model, np.random.default_rng([seed, _TAG, (1 << 40) + 1]), CALIBRATION_ROWS)
    model.bases = [calibrate_base(calib.logits[0], TARGET_POSITIVE_RATE)]
    prev = sigmoid(model.bases[0] + calib.logits[0])
    for logit in calib.logits[1:]:
        base = calibrate_base(logit, NEXT_LABEL_RATE, weights=prev)
        model.bases.append(base)
        prev = prev * sigmoid(base + logit)
    return model


# ----------------------------------------------------------------------------------------------- draws
@dataclass
class _Ids:
    idx: np.ndarray  # space indices, row-major (n,) for one per row
    counts: np.ndarray | None  # values per row (None: one per row)


@dataclass
class _Draw:
    n: int
    null: dict[str, np.ndarray] = field(default_factory=dict)
    ids: dict[str, _Ids] = field(default_factory=dict)
    numbers: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # (values, z)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # (n, dim)
    maps: dict[str, tuple] = field(default_factory=dict)
    histories: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # (counts, items)
    candidate: dict[str, np.ndarray] = field(default_factory=dict)
    logits: list[np.ndarray] = field(default_factory=list)
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def _counts(rng: np.random.Generator, n: int, lo: int, hi: int, empty: float = 0.0) -> np.ndarray:
    c = rng.integers(lo, hi + 1, n)
    if empty:
        c[rng.random(n) < empty] = 0
    return c.astype(np.int64)


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def _first_match_recency(rows: np.ndarray, pos: np.ndarray, match: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n)
    hit_rows = rows[match]
    if hit_rows.size:
        first_rows, first_idx = np.unique(hit_rows, return_index=True)  # items in row order, recent first
        out[first_rows] = RECENCY_DECAY ** pos[match][first_idx]
    return out


def _draw(model: ConfigModel, rng: np.random.Generator, n: int) -> _Draw:  # noqa: C901 - one pass per role
    d = _Draw(n)
    for col in model.columns:
        d.null[col.name] = rng.random(n) < model.nulls if model.nulls else np.zeros(n, bool)
    # Histories first: a history's candidate column takes the candidate item's ids.
    recency: list[np.ndarray] = []
    # A group's first history before the others it aligns (a stable order: unchanged without aligned ones).
    for name in sorted(model.catalogues, key=lambda c: model.aligned.get(c, (c, 0))[0] != c):
        cat = model.catalogues[name]
        first, cap = model.aligned.get(name, (name, cat.max_length))
        if first != name:  # as many items as its group's first history, row by row (its nulls too)
            d.null[name] = d.null[first].copy()
            lengths = d.histories[first][0]
        else:
            lengths = np.where(rng.random(n) < 0.15, 0, rng.geometric(1 / 4.0, n))
            lengths = np.minimum(lengths, cap).astype(np.int64)
            lengths[d.null[name]] = 0
        items = cat.sampler.sample(rng, int(lengths.sum()))
        offsets = _offsets(lengths)
        cand = cat.sampler.sample(rng, n)
        targeted = (rng.random(n) < TARGETED) & (lengths > 0)
        pick = offsets[:-1] + (rng.random(n) * np.maximum(lengths, 1)).astype(np.int64)
        cand[targeted] = items[pick[targeted]]
        d.histories[name], d.candidate[name] = (lengths, items), cand
        rows = np.repeat(np.arange(n), lengths)
        pos = np.arange(rows.size) - offsets[rows]
        first = _primary_target(model, name)
        if first is not None:
            j, tcol = first
            hist_val = cat.attrs[j][items]
            cand_val = _candidate_value(model, d, tcol, rng)
            match = (hist_val == cand_val[rows]) & ~d.null[tcol][rows]
            recency.append(_first_match_recency(rows, pos, match, n))
    for col in model.columns:
        if col.role != "ids" or col.contains is not None or col.name in d.ids or col.output_of is not None:
            continue
        _draw_ids(model, d, col, rng)
    for col in model.columns:
        if col.role == "ids" and col.contains is not None:
            _draw_title(model, d, col, rng)
    for col in model.columns:
        if col.role == "number":
            d.numbers[col.name] = _draw_number(col, rng, n)
        elif col.role == "vector":
            dim = col.dim or VECTOR_LENGTH
            x = rng.normal(0.0, 1.0, (n, dim))
            if col.offset is not None:
                x = np.abs(x) + 0.01
            d.vectors[col.name] = np.round(x, 4)
    for col in model.columns:
        if col.output_of is not None:
            _draw_output(model, d, col)
    for col in model.columns:
        if col.role in ("map", "nested"):
            d.maps[col.name] = _draw_map(model, d, col, rng)
    for name, what in model.extra.items():
        if what == "time":
            d.extra[name] = rng.integers(FIRST_DAY, FIRST_DAY + DAYS * 86_400, n)
        elif what == "weight":
            d.extra[name] = np.round(rng.uniform(0.5, 1.5, n), 3)
        else:
            d.extra[name] = ZipfSampler(max(10, model.rows // 10), 0.6).sample(rng, n) + 1
    d.logits = _logits(model, d, recency)
    return d


def _sub_text(space: Any, attrs: np.ndarray, sub: Any, lone: bool = False) -> pa.Array:
    """Each catalogue item's text of one sub-feature: its value, or (value_dim floats per item) value_dim
    values of its space joined by the sub-feature's separator; ``lone``: the history's only sub-feature."""
    dim = getattr(sub, "value_dim", 1) if getattr(sub, "dense", False) else 1
    if not getattr(sub, "dense", False) and getattr(sub, "value_dim", 1) == 0:
        # several ids per item (value_dim 0): 0 to 3 ids of its space by its separator, an empty item 1 in 4;
        # 1 to 3 for a history's lone sub-feature, whose one empty item would be the text "" of no items (a
        # sequence group's other histories, reading one item there, would disagree)
        counts = (attrs % 3 + 1 if lone else attrs % 4).astype(np.int32)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        ids = (np.repeat(attrs, counts) + 7 * (np.arange(int(counts.sum())) - first)) % space.size
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        lists = pa.ListArray.from_arrays(offsets, space.text.take(pa.array(ids, pa.int64())))
        return pc.binary_join(lists, sub.separator)
    if dim == 1:
        return space.text.take(pa.array(attrs))
    values = [space.text.take(pa.array((attrs + i) % space.size)) for i in range(dim)]
    return pc.binary_join_element_wise(*values, sub.separator)


def _primary_target(model: ConfigModel, seq_column: str) -> tuple[int, str] | None:
    """The first sub-feature of a history whose candidate column exists: (sub index, candidate column)."""
    seq = model.plan.columns[seq_column].sequence
    for j, sub in enumerate(seq.sub_features):
        target = model.plan.features.get(sub.name)
        if target is not None and target.kind == "id" and target.source_column in model.plan.columns:
            return j, target.source_column
    return None


def _candidate_value(model: ConfigModel, d: _Draw, column: str, rng: np.random.Generator) -> np.ndarray:
    """The candidate column's space indices (drawn now when no history owns it)."""
    if column not in d.ids:
        _draw_ids(model, d, model.plan.columns[column], rng)
    return d.ids[column].idx


def _draw_ids(model: ConfigModel, d: _Draw, col: Column, rng: np.random.Generator) -> None:
    n = d.n
    space = model.plan.space_of(col.space)
    if col.target is not None and col.target[0] in d.candidate:
        seq_col, j = col.target
        d.ids[col.name] = _Ids(model.catalogues[seq_col].attrs[j][d.candidate[seq_col]], None)
        return
    if not col.is_multi:
        d.ids[col.name] = _Ids(space.sampler.sample(rng, n), None)
        return
    if col.text:  # a tokenized text: a title of an item, whose rows repeat as the items' rows repeat in logs
        _draw_titles(d, col, space, rng)
        return
    if col.terms:
        counts = _counts(rng, n, 1, 3, empty=0.03)
    else:
        hi = col.max_values + 1 if col.max_values else 4
        counts = _counts(rng, n, 1, max(hi, 2), empty=0.05)
    counts[d.null[col.name]] = 0
    d.ids[col.name] = _Ids(space.sampler.sample(rng, int(counts.sum())), counts)
    if col.weighted:
        d.maps[f"weights:{col.name}"] = (np.round(rng.uniform(0.1, 2.0, int(counts.sum())), 2),)


def _draw_titles(d: _Draw, col: Column, space: Space, rng: np.random.Generator) -> None:
    """A text column's rows: one title a row, drawn from as many titles as its space has words (popular ones
    oftener, as items are), 3% empty; title ``t`` is 1 to 3 words, the first word ``t`` (so popular words lead
    popular titles), each next one a stride of ``t`` further in the words space."""
    titles = space.sampler.sample(rng, d.n)
    counts = (titles % 3 + 1).astype(np.int64)
    counts[(rng.random(d.n) < 0.03) | d.null[col.name]] = 0
    k = np.arange(int(counts.sum())) - np.repeat(_offsets(counts)[:-1], counts)
    t = np.repeat(titles, counts)
    d.ids[col.name] = _Ids((t + k * (t % 97 + 7)) % space.size, counts)


def _draw_output(model: ConfigModel, d: _Draw, col: Column) -> None:
    """A feature output's ids as FG derives them: X's bucket of its drawn value, or (a dense X) the value's
    key text (a null: X's default's)."""
    target = col.output_of
    source = model.plan.columns.get(target.source_column)
    if source is None or source.role != "number":
        raise SyntheticConfigError(
            f"feature {target.name!r}: its column {target.source_column!r} is read as ids by {source.owners}, so "
            f"synthetic:config draws no number for the bucket ids {col.name!r} reads"
            if source is not None
            else f"feature {target.name!r}: no column {target.source_column!r} was drawn"
        )
    x = np.where(d.null[source.name], target.default, d.numbers[source.name][0])
    space = model.plan.space_of(col.space)
    if target.boundaries is None:
        at = pc.index_in(float_keys(x), value_set=space.text).to_numpy(zero_copy_only=False)
        d.ids[col.name] = _Ids(at.astype(np.int64), None)
        d.null[col.name] = np.zeros(d.n, bool)
        return
    buckets = np.searchsorted(np.asarray(target.boundaries, np.float64), x, side="right")
    values = space.values.to_numpy()  # the bucket ids 0..n-1, in order
    d.ids[col.name] = _Ids(np.searchsorted(values, buckets).astype(np.int64), None)
    d.null[col.name] = np.zeros(d.n, bool)


def _draw_title(model: ConfigModel, d: _Draw, col: Column, rng: np.random.Generator) -> None:
    """Title terms; half of the rows hold their query's terms, contiguous and in order."""
    n = d.n
    space = model.plan.space_of(col.space)
    query = d.ids[col.contains]
    if query.counts is None:  # one term per row: row i's term is idx[i]
        q_counts, q_off = (~d.null[col.contains]).astype(np.int64), np.arange(n + 1)
    else:
        q_counts, q_off = query.counts, _offsets(query.counts)
    planted = (rng.random(n) < 0.5) & (q_counts > 0) & ~d.null[col.name]
    if col.is_multi:
        counts = np.where(planted, np.maximum(_counts(rng, n, 2, 8), q_counts), _counts(rng, n, 2, 8))
        counts[d.null[col.name]] = 0
    else:
        counts = np.ones(n, np.int64)
        planted &= q_counts == 1
    idx = space.sampler.sample(rng, int(counts.sum()))
    t_off = _offsets(counts)
    start = (rng.random(n) * (counts - q_counts + 1)).astype(np.int64)
    for k in range(int(q_counts.max(initial=0))):
        rows = np.flatnonzero(planted & (q_counts > k))
        idx[t_off[rows] + start[rows] + k] = query.idx[q_off[rows] + k]
    d.ids[col.name] = _Ids(idx, counts if col.is_multi else None)
    d.maps[f"planted:{col.name}"] = (planted,)


def _draw_number(col: Column, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and their standardized score (the click model's term)."""
    if col.grid:
        at = rng.integers(0, len(col.grid), n)
        return np.asarray(col.grid, np.float64)[at], (at / max(len(col.grid) - 1, 1) - 0.5) * 3.4
    if col.boundaries:
        b = np.asarray(col.boundaries, np.float64)
        width = (b[-1] - b[0]) / max(len(b) - 1, 1) if len(b) > 1 else max(abs(b[0]), 1.0)
        edges = np.concatenate(([b[0] - width], b, [b[-1] + width]))
        if b[0] >= 0:
            edges[0] = max(edges[0], 0.0)
        bucket = rng.integers(0, len(edges) - 1, n)
        x = edges[bucket] + rng.random(n) * (edges[bucket + 1] - edges[bucket])
        z = (bucket / max(len(edges) - 2, 1) - 0.5) * 3.4
    else:
        z = rng.normal(0.0, 1.0, n)
        x = np.exp(z)  # lognormal: positive, so log(x+C) normalizers and log() in expressions hold
    return np.round(x, 4), z


def _draw_map(model: ConfigModel, d: _Draw, col: Column, rng: np.random.Generator) -> tuple:
    """Entries of a lookup map (row, key, value) or a match map (row, pk, sk, value), the row's own keys
    planted in 60% of the rows; with whether each row holds its keys and the value found."""
    n = d.n
    values = model.plan.space_of(col.value_space)
    spaces = [model.plan.space_of(k) for k in col.key_spaces]
    own: list[np.ndarray] = []
    own_ok = ~d.null[col.name]
    for key in col.keys:
        if not key:
            own.append(np.zeros(n, np.int64))
            continue
        ids = d.ids[key]
        if ids.counts is None:
            own.append(ids.idx)
            own_ok = own_ok & ~d.null[key]
        else:  # a multi-value key: its first id
            first = np.minimum(_offsets(ids.counts)[:-1], max(ids.idx.size - 1, 0))
            own.append(np.where(ids.counts > 0, ids.idx[first], 0) if ids.idx.size else np.zeros(n, np.int64))
            own_ok = own_ok & (ids.counts > 0)
    planted = (rng.random(n) < 0.6) & own_ok
    value = values.sampler.sample(rng, n)
    if col.role == "map":
        counts = _counts(rng, n, 1, 5, empty=0.05)
        counts[d.null[col.name]] = 0
        counts = np.where(planted, np.maximum(counts, 1), counts)
        keys = spaces[0].sampler.sample(rng, int(counts.sum()))
        vals = values.sampler.sample(rng, keys.size)
        at = _offsets(counts)[:-1] + (rng.random(n) * np.maximum(counts, 1)).astype(np.int64)
        rows = np.flatnonzero(planted)
        keys[at[rows]], vals[at[rows]] = own[0][rows], value[rows]
        # The row's own key only where planted (a small key space, e.g. bucket ids, draws it by chance): so FG
        # finds exactly the planted value, which the click model counts.
        entry_row = np.repeat(np.arange(n), counts)
        clash = (keys == own[0][entry_row]) & own_ok[entry_row]
        clash[at[rows]] = False
        if spaces[0].size > 1:
            keys[clash] = (keys[clash] + 1) % spaces[0].size
        return (counts, keys, vals, planted, value)
    # nested: 1..3 primary keys per row, 1..3 secondary keys each; entry (0, 0) is the row's when planted
    p_counts = _counts(rng, n, 1, 3, empty=0.05)
    p_counts[d.null[col.name]] = 0
    p_counts = np.where(planted, np.maximum(p_counts, 1), p_counts)
    pk = spaces[0].sampler.sample(rng, int(p_counts.sum()))
    s_counts = _counts(rng, pk.size, 1, 3)
    sk = spaces[1].sampler.sample(rng, int(s_counts.sum()))
    vals = values.sampler.sample(rng, sk.size)
    rows = np.flatnonzero(planted)
    first_p = _offsets(p_counts)[:-1][rows]
    pk[first_p] = own[0][rows]
    first_s = _offsets(s_counts)[:-1][first_p]
    sk[first_s], vals[first_s] = own[1][rows], value[rows]
    return (p_counts, pk, s_counts, sk, vals, planted, value)


def _mean_effect(effect: np.ndarray, ids: _Ids, null: np.ndarray, n: int) -> np.ndarray:
    if ids.counts is None:
        return np.where(null, 0.0, effect[ids.idx])
    rows = np.repeat(np.arange(n), ids.counts)
    total = np.bincount(rows, weights=effect[ids.idx], minlength=n)[:n]
    return total / np.maximum(ids.counts, 1)


def _logits(model: ConfigModel, d: _Draw, recency: list[np.ndarray]) -> list[np.ndarray]:
    """The click logit (without the intercept) and each further label's."""
    n = d.n
    plan = model.plan
    logit = np.zeros(n)
    second = np.zeros(n)
    effect_cols = [c for c in model.columns if c.role == "ids" and c.effect][:MAX_EFFECT_IDS]
    for k, col in enumerate(effect_cols):
        space = plan.space_of(col.space)
        logit += _mean_effect(space.effect, d.ids[col.name], d.null[col.name], n)
        if k < 3:
            second += 0.8 * _mean_effect(space.effect2, d.ids[col.name], d.null[col.name], n)
    for name, c in model.coef.items():
        z = d.numbers[name][1]
        logit += c * np.where(d.null[name], 0.0, z)
    vectors = [c.name for c in model.columns if c.role == "vector"]
    if vectors:
        v = d.vectors[vectors[0]]
        logit += 0.5 * np.where(d.null[vectors[0]], 0.0, v[:, 0] - v[:, 0].mean())
    for columns in plan.combos[:1]:
        a, b = (d.ids[c] for c in columns[:2])
        if a.counts is None and b.counts is None:
            ok = ~d.null[columns[0]] & ~d.null[columns[1]]
            logit += np.where(ok, model.pair_effect[(a.idx * 1_000_003 + b.idx) % 4096], 0.0)
    for r in recency:
        logit += HISTORY_MATCH * r
        second += 0.6 * r
    for name in plan.lookups[:1] + plan.matches[:1]:
        m = d.maps[name]
        hit, value = m[-2], m[-1]
        logit += np.where(hit, plan.space_of(plan.columns[name].value_space).effect[value], 0.0)
    for title in plan.overlaps[:1]:
        planted = d.maps.get(f"planted:{title}")
        if planted is not None:
            logit += 0.7 * planted[0]
    logits = [logit]
    for t in range(1, len(model.labels)):
        logits.append(second if t == 1 else 0.5 * second + 0.3 * logit)
    return logits


# ------------------------------------------------------------------------------------------ formatting
def _masked(arr: pa.Array, null: np.ndarray) -> pa.Array:
    if not null.any():
        return arr
    return pc.if_else(pa.array(null), pa.scalar(None, arr.type), arr)


def _joined(values: pa.Array, counts: np.ndarray, sep: str, null: np.ndarray, as_list: bool) -> pa.Array:
    """Rows of ``counts`` values each: a list column, or text joined by ``sep``; ``null`` rows null."""
    offsets = pa.array(_offsets(counts).astype(np.int32))
    if as_list:
        return pa.ListArray.from_arrays(offsets, values, mask=pa.array(null) if null.any() else None)
    return _masked(pc.binary_join(pa.ListArray.from_arrays(offsets, values), sep), null)


def _format(model: ConfigModel, d: _Draw, col: Column) -> pa.Array:
    null = d.null[col.name]
    plan = model.plan
    if col.role == "ids":
        space = plan.space_of(col.space)
        ids = d.ids[col.name]
        if ids.counts is None:
            return _masked(space.values.take(pa.array(ids.idx)), null)
        lists = model.lists and not col.text
        values = space.values if lists else space.text
        values = values.take(pa.array(ids.idx))
        if col.weighted:  # "k:w" pieces
            (w,) = d.maps[f"weights:{col.name}"]
            values = pc.binary_join_element_wise(
                space.text.take(pa.array(ids.idx)), pa.array(w).cast(pa.string()), ":"
            )
        return _joined(values, ids.counts, col.multi or "", null, lists)
    if col.role == "number":
        return pa.array(d.numbers[col.name][0], mask=null)
    if col.role == "vector":
        x = d.vectors[col.name]
        counts = np.full(d.n, x.shape[1], np.int64)
        values = pa.array(x.reshape(-1))
        return _joined(
            values if model.lists else values.cast(pa.string()), counts, col.vsep, null, model.lists
        )
    if col.role == "sequence":
        cat = model.catalogues[col.name]
        lengths, items = d.histories[col.name]
        return _joined(cat.text.take(pa.array(items)), lengths, cat.delimiter, null, False)
    values = plan.space_of(col.value_space).text
    spaces = [plan.space_of(k).text for k in col.key_spaces]
    m = d.maps[col.name]
    if col.role == "map":
        counts, keys, vals = m[0], m[1], m[2]
        entries = pc.binary_join_element_wise(
            spaces[0].take(pa.array(keys)), values.take(pa.array(vals)), ":"
        )
        return _joined(entries, counts, "\x1d", null, False)
    p_counts, pk, s_counts, sk, vals = m[:5]
    inner = pc.binary_join_element_wise(spaces[1].take(pa.array(sk)), values.take(pa.array(vals)), ":")
    inner = pc.binary_join(
        pa.ListArray.from_arrays(pa.array(_offsets(s_counts).astype(np.int32)), inner), ","
    )
    outer = pc.binary_join_element_wise(spaces[0].take(pa.array(pk)), inner, "^")
    return _joined(outer, p_counts, "|", null, False)


def encoded_histories(model: ConfigModel, d: _Draw, col: Column) -> dict[str, pa.Array]:
    """A history as pre-encoded input holds it (TorchEasyRec's FG_NONE, ``_parse_fg_encoded_sequence_sparse_
    feature_impl``): each sub-feature's ids in a column ``<sequence>__<sub>`` (a sequence_id feature's in its
    own column), items by the delimiter, the same items in every column."""
    cat, f = model.catalogues[col.name], col.sequence
    lengths, items = d.histories[col.name]
    out: dict[str, pa.Array] = {}
    for j, sub in enumerate(f.sub_features):
        text = model.plan.space_of(col.key_spaces[j]).text.take(pa.array(cat.attrs[j][items]))
        alone = len(f.sub_features) == 1 and sub.name == f.name
        name = f.source_column if alone else sub_feature_key(f.name, sub.name)
        out[name] = _joined(text, lengths, cat.delimiter, d.null[col.name], False)
    return out


def make_chunk(model: ConfigModel, seed: int, chunk: int, n: int) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Rows of chunk ``chunk`` (deterministic for ``seed``): the table, its labels ``(n, T)`` and their true
    probabilities ``(n, T)``, one column per task label of ``data.label_fields`` (a domain label is a column
    of the table only)."""
    rng = np.random.default_rng([seed, _TAG, chunk])
    d = _draw(model, rng, n)
    columns: dict[str, pa.Array] = {}
    for col in model.columns:
        if col.output_of is not None:  # FG derives it from its feature's column
            continue
        if col.role == "sequence" and model.plan.cfg.data.fg_encoded:
            columns.update(encoded_histories(model, d, col))
        elif model.extra.get(col.name) == "time":
            columns[col.name] = pa.array(d.extra[col.name])
        else:
            columns[col.name] = _format(model, d, col)
    for name in model.extra:
        if name not in columns:
            columns[name] = pa.array(d.extra[name])
    labels = np.zeros((n, len(model.labels)), np.int8)
    probs = np.zeros((n, len(model.labels)), np.float64)
    prev_p, prev_y = np.ones(n), np.ones(n, bool)
    for t, (name, base, logit) in enumerate(zip(model.labels, model.bases, d.logits)):
        q = sigmoid(base + logit)
        y = prev_y & (rng.random(n) < q)
        prev_p, prev_y = prev_p * q, y
        labels[:, t], probs[:, t] = y, prev_p
        columns[name] = pa.array(y.astype(np.int64))
    for name, t in zip(model.prob_columns(), range(len(model.labels))):
        columns[name] = pa.array(probs[:, t])
    if model.domain is not None:  # drawn last: the other columns are those of the same config without it
        columns[model.domain[0]] = pa.array(rng.integers(0, model.domain[1], n, dtype=np.int64))
    return pa.table(columns), labels, probs.astype(np.float32)


def input_columns(cfg: RecpipeConfig) -> list[str]:
    """The columns synthetic:config writes for ``cfg``'s features (labels, time, weight, group excluded)."""
    plan = plan_columns(cfg)
    if not cfg.data.fg_encoded:
        return [c.name for c in plan.columns.values() if c.output_of is None]
    out: list[str] = []
    for col in plan.columns.values():
        if col.role != "sequence":
            out.append(col.name)
            continue
        f = col.sequence
        alone = len(f.sub_features) == 1 and f.sub_features[0].name == f.name
        out.extend([f.source_column] if alone else f.sub_keys())
    return out
