"""The ``features:`` and ``feature_groups:`` sections of the recpipe config (:mod:`recpipe.config`
re-exports every name here).

Each feature kind's config class is a :class:`FeatureSection` named by the kind's line in
:data:`recpipe.config.catalogue.FEATURE_KINDS`; what the kind does with it (FeatureSpec entries, fitting,
FG) is its module in ``recpipe/features/kinds/``. A kind declared outside recpipe (an entry point) brings its
config class in its own module.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from recpipe.config.sections import Strict


# ------------------------------------------------------------------------------------------- features
class FeatureSection(Strict):
    """Base of every feature kind's config: ``kind`` (its catalogue name), ``name`` and the ``column`` it reads
    (default: the name).

    A kind's class answers the questions the config itself asks of a feature, so validating and reading a
    config never needs the kind's FG code.
    """

    kind: str
    name: str
    column: str | None = None

    @property
    def source_column(self) -> str:
        """The input column the feature reads."""
        return self.column or self.name

    def feature_keys(self) -> list[str]:
        """The names feature groups may list for this feature (its own name; a sequence adds its sub-features)."""
        return [self.name]

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        """Columns a CSV reader must read as text (ids: ``"00000000"`` is not ``0``); ``skip_bad_rows``: under
        ``on_bad_row: skip`` numeric columns too, so a bad number is a skipped row, not a failed pass."""
        return []


# An input ``"feature:X"`` (TorchEasyRec's FG_DAG side ``feature``, docs/source/feature/data.md) is feature X's
# output, not a table column: FG computes it from X's own input before the features that read it. recpipe
# reads it for X a raw feature of one value a row: with listed boundaries its bucket id (an integer id), else
# its value (X's default where missing) as a float32 (TorchEasyRec's fg.json writes a raw feature's value_type
# "float"), whose text as a key is the shortest that reads back as that float32 ("0.5", "2", "0.1").
FEATURE_OUTPUT = "feature:"


def feature_output(column: str) -> str | None:
    """The feature X an input ``"feature:X"`` reads the output of, else None (a table column)."""
    return column[len(FEATURE_OUTPUT) :] if column.startswith(FEATURE_OUTPUT) else None


def feature_output_refusal(column: str, target: dict[str, Any] | None) -> str | None:
    """Why input ``column`` (``"feature:X"``) cannot be read, or None when it can.

    Args:
        column (str): the input, ``"feature:X"``.
        target (dict | None): feature X's config as a dict (``kind``, ``boundaries``, ``value_dim``,
            ``column``, ``num_quantile_buckets``, ``normalizer``); None: there is no feature X.
    """
    name = feature_output(column)
    if target is None:
        return f"input {column!r} names no feature {name!r}"
    why = None
    bucketized = target.get("boundaries") is not None
    if target.get("kind") != "raw":
        why = (
            f"feature {name!r} is of kind {target.get('kind')!r}: recpipe reads 'feature:X' of a raw feature only "
            "(its bucket id, or its value); what TorchEasyRec's FG hands on as another kind's output (its text, "
            "its mapped id?) is not documented"
        )
    elif not bucketized and target.get("num_quantile_buckets") is not None:
        why = f"feature {name!r} fits its boundaries (num_quantile_buckets); list them to read its bucket id"
    elif (target.get("value_dim") or 1) > 1:
        what = "bucket ids" if bucketized else "values"
        why = f"feature {name!r} has value_dim {target['value_dim']} {what} a row; 'feature:X' reads one"
    elif not bucketized and target.get("normalizer"):
        why = (
            f"feature {name!r} normalizes its value ({target['normalizer']!r}): recpipe reads 'feature:X' of a "
            "dense raw feature as its value unnormalized, so TorchEasyRec's normalized output has no counterpart"
        )
    elif feature_output(str(target.get("column") or "")) is not None:
        why = (
            f"feature {name!r} reads {target['column']!r} itself: a chain (or cycle) of feature outputs is not "
            "supported, X must read a table column"
        )
    return None if why is None else f"input {column!r}: {why}"


def check_feature_outputs(features: list[FeatureSection]) -> None:
    """Refuse every ``"feature:X"`` input of ``features`` that :func:`feature_output_refusal` refuses.

    Raises:
        ValueError: naming the feature, its input and why.
    """
    by_name = {f.name: f for f in features}
    for f in features:
        for column in dict.fromkeys([*f.text_columns(True), *([f.column] if f.column else [])]):
            name = feature_output(column)
            if name is None:
                continue
            target = by_name.get(name)
            why = feature_output_refusal(column, None if target is None else target.model_dump())
            if why is not None:
                raise ValueError(f"feature {f.name!r}: {why}")


# An embedding table's initializers and the fields each reads (TorchEasyRec's dynamicemb ``initializer_args``
# modes NORMAL / TRUNCATED_NORMAL / UNIFORM / CONSTANT, feature.proto ``DynamicEmbInitializerArgs``).
TABLE_INIT_FIELDS: dict[str, tuple[str, ...]] = {
    "normal": ("mean", "std"),
    "truncated_normal": ("mean", "std", "lower", "upper"),
    "uniform": ("lower", "upper"),
    "constant": ("value",),
}


def table_init_error(init: dict[str, Any]) -> str | None:
    """Why ``init`` (``{mode, mean, std, lower, upper, value}``, None for a field not given) is not an embedding
    table initializer, or None when it is: a known mode, only that mode's fields, finite numbers, ``std > 0``,
    ``lower < upper``, and a truncated normal's two bounds given (it has no default interval)."""
    mode = init.get("mode")
    if mode not in TABLE_INIT_FIELDS:
        return f"init mode {mode!r} is not one of {list(TABLE_INIT_FIELDS)}"
    given = {k: v for k, v in init.items() if k != "mode" and v is not None}
    stray = sorted(set(given) - set(TABLE_INIT_FIELDS[mode]))
    if stray:
        return f"init mode {mode!r} reads {list(TABLE_INIT_FIELDS[mode])}, not {stray}"
    bad = sorted(k for k, v in given.items() if not isinstance(v, (int, float)) or not math.isfinite(v))
    if bad:
        return f"init {bad} must be finite numbers"
    if given.get("std", 1.0) <= 0:
        return f"init std must be > 0, got {given['std']}"
    if mode == "truncated_normal" and ("lower" not in given or "upper" not in given):
        return (
            "init mode 'truncated_normal' needs lower and upper (the interval the normal is conditioned on)"
        )
    if "lower" in given and "upper" in given and not given["lower"] < given["upper"]:
        return f"init lower {given['lower']} must be below upper {given['upper']}"
    return None


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class TableInit:
    """How a feature's embedding table is initialized (every row, and a zch row re-drawn when its id is evicted):
    the config's ``init``, and the same value in the feature spec (``TableSpec.init``) and fg.json.

    ``mode``: ``normal`` N(mean, std²); ``truncated_normal`` N(mean, std²) conditioned on [lower, upper];
    ``uniform`` U(lower, upper); ``constant`` every weight ``value``. Defaults (None): ``mean`` 0, ``std``
    1/sqrt(embedding_dim), ``lower`` / ``upper`` ∓/± sqrt(1/rows) (TorchRec's default table init), ``value`` 0
    (TorchEasyRec dynamicemb's defaults, docs/source/feature/dynamicemb.md). Not set: the model's table init.
    An initializer that :func:`table_init_error` refuses raises a ``ValueError`` saying why.

    Example::

        init: {mode: normal, std: 0.05}      # config: N(0, 0.05²)
        TableInit("normal", std=0.05)         # fg.json: "init": {"mode": "normal", "std": 0.05}
    """

    mode: str
    mean: float | None = None
    std: float | None = None
    lower: float | None = None
    upper: float | None = None
    value: float | None = None

    def __post_init__(self) -> None:
        why = table_init_error(dataclasses.asdict(self))
        if why is not None:
            raise ValueError(why)

    def to_dict(self) -> dict[str, Any]:
        """The mode and the fields given (fg.json's ``init``)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


class ZchAdmissionConfig(Strict):
    """Frequency admission of a zch table (TorchEasyRec dynamicemb's ``frequency_admission_strategy``): each id's
    sightings in training steps are counted (a counter of ``counter_capacity`` ids, default the table's zch_size,
    rounded up to a whole number of ids per table row); an id gets a row only once its count reaches
    ``threshold``, and until then (and whenever it has no row) it reads ``default_value`` in every component,
    untrained. At evaluation and export nothing is counted.

    Example::

        zch_admission: {threshold: 5}                  # a row from the 5th sighting; zeros before
    """

    threshold: int = Field(ge=1)
    counter_capacity: int | None = Field(None, ge=1)
    default_value: float = 0.0

    @field_validator("default_value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"zch_admission default_value must be a finite number, got {v}")
        return v


class _TableMixin(Strict):
    """The settings of a feature's embedding table (TorchEasyRec's common ``data_type``, ``trainable`` and
    ``init_fn``, docs/source/feature/feature.md): ``data_type`` the table's weights, ``fp32`` or ``fp16``
    (TorchEasyRec's FP32 / FP16); ``trainable: false`` freezes the table (TorchEasyRec's frozen tables: SGD with lr
    0, so the optimizer never changes it); ``init`` its initializer (:class:`TableInit`). Features sharing a
    table must agree on all three."""

    data_type: Literal["fp32", "fp16"] = "fp32"
    trainable: bool = True
    init: TableInit | None = None

    def has_table(self) -> bool:
        """The feature looks up an embedding table (its output is ids)."""
        return True

    @model_validator(mode="after")
    def _table_settings(self) -> _TableMixin:
        if not self.has_table():
            defaults = (("data_type", "fp32"), ("trainable", True), ("init", None))
            set_ = [k for k, d in defaults if getattr(self, k) != d]
            if set_:
                raise ValueError(
                    f"{' and '.join(set_)} set a feature's embedding table; this feature is a dense value "
                    "(no boundaries or id mapping) and has none"
                )
        return self


class _IdMappingMixin(_TableMixin):
    hash_bucket_size: int | None = Field(None, ge=1)
    num_buckets: int | None = Field(None, ge=1)
    vocab_list: list[str] | None = None
    vocab_file: str | None = None
    # Fit a vocabulary from the training split: ids seen fewer than min_freq times map to UNK.
    min_freq: int | None = Field(None, ge=1)
    default_bucket: int | None = Field(None, ge=0)
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None
    # Zero-collision hashing (TorchRec managed collision) instead of id % num_buckets: FG keeps the whole
    # id (a 63-bit key) and the model gives each id its own row, evicting the least used when full.
    # zch_size rows (default: hash_bucket_size / num_buckets); each rank keeps one of its rows for ids
    # without a row, so a table needs at least 2 rows per rank.
    zch: bool = False
    zch_size: int | None = Field(None, ge=2)
    # Steps between the zch table's admissions and evictions (TorchEasyRec's zch.eviction_interval); None:
    # recpipe's 1 (every step).
    zch_eviction_interval: int | None = Field(None, ge=1)
    # Which ids a full zch table evicts (TorchEasyRec's zch lfu / lru / distance_lfu, torchrec's
    # LFU_EvictionPolicy / LRU_EvictionPolicy / DistanceLFU_EvictionPolicy): the lowest score, lfu's the access
    # count, lru's 1 / steps_since_seen ** zch_decay_exponent, distance_lfu's count / steps_since_seen **
    # zch_decay_exponent. None: distance_lfu; zch_decay_exponent None: 1.0 (lfu has none).
    zch_eviction_policy: Literal["distance_lfu", "lfu", "lru"] | None = None
    zch_decay_exponent: float | None = Field(None, gt=0)
    # Frequency admission (:class:`ZchAdmissionConfig`); None: every id seen in a step is a candidate for a row.
    zch_admission: ZchAdmissionConfig | None = None
    # Value used when the column is null; None means the feature is absent (no id) in that row.
    default_value: str | None = None

    @model_validator(mode="after")
    def _one_mapping(self) -> _IdMappingMixin:
        given = [
            k
            for k in ("hash_bucket_size", "num_buckets", "vocab_list", "vocab_file", "min_freq")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "exactly one id mapping is required, one of hash_bucket_size, num_buckets, vocab_list, "
                f"vocab_file, min_freq; got {given or 'none'}"
            )
        if self.zch_eviction_interval is not None and not self.zch:
            raise ValueError("zch_eviction_interval is set but zch is false")
        for key in ("zch_eviction_policy", "zch_decay_exponent", "zch_admission"):
            if getattr(self, key) is not None and not self.zch:
                raise ValueError(f"{key} is set but zch is false")
        if self.zch_decay_exponent is not None and self.zch_eviction_policy == "lfu":
            raise ValueError(
                "zch_decay_exponent is set but zch_eviction_policy is lfu, which scores ids by access count "
                "alone; the exponent is lru's and distance_lfu's"
            )
        if self.zch_size is not None and not self.zch:
            raise ValueError("zch_size is set but zch is false; set zch: true for a managed-collision table")
        if self.zch and given[0] not in ("hash_bucket_size", "num_buckets"):
            raise ValueError(
                f"zch needs hash_bucket_size or num_buckets, got {given[0]}: a vocabulary already gives every "
                "listed value its own row"
            )
        return self


# TorchEasyRec's multi-value separator (tzrec/protos/feature.proto, ``separator`` default "\x1d").
MULTI_VALUE_SEPARATOR = "\x1d"


class _MultiIdMixin(Strict):
    """Multi-value ids, as TorchEasyRec's ``id_feature`` / ``combo_feature`` read them (feature.proto, feature.md).

    ``separator`` splits a text value into several ids of one pooled key (an empty piece is no id; a list column
    holds its ids already); ``value_dim`` keeps the first ``value_dim`` ids of a row, 0 keeps all of them;
    ``default_bucketize_value`` makes a vocabulary's ids its 0-based positions, an out-of-vocabulary value taking
    this id (TorchEasyRec's rule; without it recpipe's vocabulary ids are positions + 1, 0 for the unknown).
    """

    separator: str = Field(MULTI_VALUE_SEPARATOR, min_length=1)
    value_dim: int = Field(0, ge=0)
    default_bucketize_value: int | None = Field(None, ge=0)
    pooling: Literal["sum", "mean"] = "sum"

    @model_validator(mode="after")
    def _bucketize_value(self) -> _MultiIdMixin:
        dbv = self.default_bucketize_value
        if dbv is None:
            return self
        vocab = getattr(self, "vocab_list", None)
        if vocab is None and getattr(self, "vocab_file", None) is None:
            raise ValueError(
                "default_bucketize_value is the id of an out-of-vocabulary value: it needs vocab_list or "
                "vocab_file (TorchEasyRec uses it with vocabularies only)"
            )
        if getattr(self, "default_bucket", None) is not None:
            raise ValueError("give default_bucketize_value or default_bucket, not both")
        if vocab is not None and dbv >= len(vocab):
            raise ValueError(
                f"default_bucketize_value {dbv} must be below len(vocab_list) = {len(vocab)}: the vocabulary's ids "
                "are its 0-based positions and an out-of-vocabulary value takes one of them"
            )
        return self


class IdFeatureConfig(_MultiIdMixin, _IdMappingMixin, FeatureSection):
    kind: Literal["id"]
    # TorchEasyRec's weighted ids (feature.md IdFeature ``weighted``): ``k1:w1<sep>k2:w2`` (or a list of
    # ``k:w`` texts, or a map column id → weight), pooled Σ w·e (mean: Σ w·e / n, FBGEMM's weighted MEAN).
    weighted: bool = False

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.source_column]

    @model_validator(mode="after")
    def _weighted(self) -> IdFeatureConfig:
        if self.weighted and self.zch:
            raise ValueError(
                "weighted: true with zch: recpipe's zero-collision tables are jagged lookups without per-id "
                "weights; drop one of them"
            )
        return self


_NORMALIZER = re.compile(r"^\s*(?:log\(\s*x\s*\+\s*(?P<off>[0-9.]+)\s*\))?\s*(?P<z>,?\s*zscore)?\s*$")


def _check_normalizer(v: str | None) -> str | None:
    """A ``normalizer`` setting as given, or ValueError when it is not one :data:`_NORMALIZER` reads."""
    if v is not None and (not v.strip() or not _NORMALIZER.match(v)):
        raise ValueError(f"normalizer {v!r} is not one of 'log(x+C)', 'zscore', 'log(x+C),zscore'")
    return v


def _check_increasing(
    v: list[float] | None, message: str = "boundaries must be strictly increasing"
) -> list[float] | None:
    """``boundaries`` as given, or ValueError(message) when they are not strictly increasing."""
    if v is not None and any(b >= a for b, a in zip(v, v[1:])):
        raise ValueError(message)
    return v


class AutoDisConfig(Strict):
    """TorchEasyRec's ``autodis {}`` of a raw feature (docs/source/feature/autodis.md)."""

    num_channels: int = Field(ge=1)
    temperature: float = Field(0.1, gt=0.0)
    keep_prob: float = Field(0.8, ge=0.0, le=1.0)


class MlpEmbeddingConfig(Strict):
    """TorchEasyRec's ``mlp {}`` of a raw feature: no settings."""


def dense_embedding_settings(
    autodis: AutoDisConfig | None, mlp: MlpEmbeddingConfig | None, dim: int
) -> dict[str, Any] | None:
    """A DenseFeature's ``embedding`` settings from a section's ``autodis`` / ``mlp`` (a raw feature's, a value
    feature's), or None when it has neither."""
    if autodis is not None:
        return {"type": "autodis", "dim": dim, **autodis.model_dump()}
    if mlp is not None:
        return {"type": "mlp", "dim": dim}
    return None


class RawFeatureConfig(_TableMixin, FeatureSection):
    kind: Literal["raw"]
    # The value as an embedding_dim-wide embedding in the model (its group reads the embedding): AutoDis, or
    # TorchEasyRec's mlp (x · w). Only for a dense value (no boundaries).
    autodis: AutoDisConfig | None = None
    mlp: MlpEmbeddingConfig | None = None

    def dense_embedding(self) -> dict[str, Any] | None:
        """The DenseFeature's ``embedding`` settings, or None."""
        return dense_embedding_settings(self.autodis, self.mlp, self.embedding_dim)

    @model_validator(mode="after")
    def _dense_embedding(self) -> RawFeatureConfig:
        if self.autodis is not None and self.mlp is not None:
            raise ValueError("give one of autodis and mlp")
        if (self.autodis is not None or self.mlp is not None) and self.has_table():
            raise ValueError(
                "autodis / mlp embed a dense value; a bucketized feature (boundaries, num_quantile_buckets) "
                "already looks up a table"
            )
        return self

    def has_table(self) -> bool:
        return self.boundaries is not None or self.num_quantile_buckets is not None

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.source_column] if skip_bad_rows or self.value_dim > 1 else []

    # A vector of value_dim numbers in one column (TorchEasyRec's "embedding feature": "0.1|0.2|0.3" with
    # separator "|", or a list column): value_dim dense columns <name>__<i> (a group listing the feature gets
    # all of them), or with boundaries value_dim bucket ids of one pooled key. A row of another count is bad.
    value_dim: int = Field(1, ge=1)
    separator: str = Field(MULTI_VALUE_SEPARATOR, min_length=1)
    # With boundaries: bucketized into len(boundaries)+1 ids and embedded; otherwise a dense column.
    boundaries: list[float] | None = None
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None
    # Fit len = num_quantile_buckets - 1 boundaries from training-split quantiles instead of listing them.
    num_quantile_buckets: int | None = Field(None, ge=2)
    # "log(x+3)", "zscore" or "log(x+3),zscore" (zscore statistics are fitted on the training split).
    normalizer: str | None = None
    # A vector feature's default: one number for every value, or value_dim of them.
    default: float | list[float] = 0.0

    @field_validator("boundaries")
    @classmethod
    def _sorted(cls, v: list[float] | None) -> list[float] | None:
        return _check_increasing(v)

    @field_validator("normalizer")
    @classmethod
    def _normalizer(cls, v: str | None) -> str | None:
        return _check_normalizer(v)

    @model_validator(mode="after")
    def _default_in_log_domain(self) -> RawFeatureConfig:
        # A null is read as the raw value ``default`` and transformed like any other value.
        m = _NORMALIZER.match(self.normalizer or "")
        offset = m.group("off") if m else None
        for default in self.defaults():
            if offset is not None and not default + float(offset) > 0:
                raise ValueError(
                    f"default {default:g} is outside the domain of {self.normalizer}: a null is read as "
                    f"x = default, so default + {offset} must be > 0"
                )
        return self

    def defaults(self) -> list[float]:
        """The default of each of its value_dim values."""
        return list(self.default) if isinstance(self.default, list) else [self.default] * self.value_dim

    @model_validator(mode="after")
    def _vector(self) -> RawFeatureConfig:
        if isinstance(self.default, list) and len(self.default) != self.value_dim:
            raise ValueError(f"default lists {len(self.default)} values; value_dim is {self.value_dim}")
        if self.value_dim > 1 and self.num_quantile_buckets is not None:
            raise ValueError("num_quantile_buckets with value_dim > 1 is not supported yet: give boundaries")
        if self.value_dim > 1 and "zscore" in (self.normalizer or ""):
            raise ValueError(
                "zscore with value_dim > 1 is not supported yet (its statistics are fitted per column)"
            )
        return self


def vector_key(feature: str, index: int) -> str:
    """The dense column of value ``index`` of a raw feature of value_dim > 1 (``vector_key("pic_emb", 0)`` is
    ``"pic_emb__0"``)."""
    return f"{feature}{SUB_KEY_SEPARATOR}{index}"


class _MultiValueItemMixin(Strict):
    """TorchEasyRec's ``value_dim: 0`` on a history's id (a sub-feature or a ``sequence_id_feature``): each item
    holds several ids (``"3\x1d7;8"`` by ``separator``, or array<array<>>), embedded as the ``pooling`` of its
    ids' embeddings (tzrec/modules/embedding.py: ``segment_reduce`` by the item's id count; an item of no ids is
    zeros). ``value_dim: 1`` (the default) is one id per item."""

    value_dim: Literal[0, 1] = 1
    separator: str = Field(MULTI_VALUE_SEPARATOR, min_length=1)
    pooling: Literal["sum", "mean"] = "sum"


class SubFeatureConfig(_MultiValueItemMixin, _IdMappingMixin):
    name: str


class RawSubFeatureConfig(_TableMixin):
    """A numeric sub-value of every history item (TorchEasyRec's ``raw_feature`` inside a ``sequence_feature``:
    the price of each clicked item, the time since each click), bucketized by ``boundaries`` into one id per
    item (``searchsorted(boundaries, x, side="right")``, as a raw feature's bucket). An empty sub-value is
    ``default``. Without boundaries, see :class:`DenseSubFeatureConfig`."""

    name: str
    boundaries: list[float] = Field(min_length=1)
    default: float = 0.0
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None

    @field_validator("boundaries")
    @classmethod
    def _sorted(cls, v: list[float]) -> list[float]:
        return _check_increasing(v)


class DenseSubFeatureConfig(Strict):
    """A numeric sub-value of every history item kept as a float (TorchEasyRec's ``raw_feature`` without
    boundaries inside a ``sequence_feature``, e.g. the time since each click): one float per item, jagged as
    the history, concatenated to the item's embeddings as one more column (TorchEasyRec's
    ``SequenceEmbeddingGroupImpl``). An empty sub-value is ``default``; text that is not a finite number is
    a bad row naming the history column.

    Example::

        {"name": "ts", "dense": true, "default": 0.0}   # "3\x030.5|8\x03" -> [0.5, 0.0] beside the items
    """

    name: str
    dense: Literal[True]
    default: float = 0.0
    # value_dim floats per item (TorchEasyRec's value_dim of a raw sub-feature: "0.1\x1d1.1" by separator):
    # value_dim KJT keys <sequence>__<name>__<i>, a group listing the sub-feature gets all of them.
    value_dim: int = Field(1, ge=1)
    separator: str = Field(MULTI_VALUE_SEPARATOR, min_length=1)


def _sub_kind(v: Any) -> str:
    """A sub-feature with ``boundaries`` is numeric (bucketized), one with ``dense: true`` a float per item,
    any other one an id."""
    if isinstance(v, dict):
        return "raw" if "boundaries" in v else "dense" if "dense" in v else "id"
    if isinstance(v, DenseSubFeatureConfig):
        return "dense"
    return "raw" if isinstance(v, RawSubFeatureConfig) else "id"


SubFeature = Annotated[
    Annotated[SubFeatureConfig, Tag("id")]
    | Annotated[RawSubFeatureConfig, Tag("raw")]
    | Annotated[DenseSubFeatureConfig, Tag("dense")],
    Discriminator(_sub_kind),
]


SUB_KEY_SEPARATOR = "__"


def sub_feature_key(sequence: str, sub: str) -> str:
    """The feature key of sub-feature ``sub`` of sequence ``sequence``: the one spelling of it, in the config,
    the FeatureSpec, fg.json and the KJT (``sub_feature_key("click_50_seq", "cate_id")`` is
    ``"click_50_seq__cate_id"``)."""
    return f"{sequence}{SUB_KEY_SEPARATOR}{sub}"


class SequenceFeatureConfig(FeatureSection):
    kind: Literal["sequence"]
    sequence_length: int = Field(100, ge=1)
    delimiter: str = "|"
    sub_delimiter: str = "\x03"
    sub_features: list[SubFeature] = Field(min_length=1)

    def sub_keys(self) -> list[str]:
        """The keys of its sub-features, in order (:func:`sub_feature_key`)."""
        return [sub_feature_key(self.name, s.name) for s in self.sub_features]

    def feature_keys(self) -> list[str]:
        return [self.name, *self.sub_keys()]

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        # Pre-encoded input (data.fg_encoded) holds each sub-feature's ids in a column named by its key.
        return [self.source_column, *self.sub_keys()]


class FeatureGroupConfig(Strict):
    """A named set of features a model reads together.

    A ``wide`` group is TorchEasyRec's WIDE group (tzrec/modules/embedding.py, ``EmbeddingGroupImpl``):
    each sparse feature in it also looks up a table of its own, ``<table>_wide``, of ``embedding_dim``
    columns (TorchEasyRec's ``wide_embedding_dim``, default 4: fbgemm has no dim-1 tables), and models
    sum all of the group's values into one first-order term. Dense features are refused there, as
    TorchEasyRec refuses them.
    """

    name: str
    type: Literal["deep", "sequence", "wide"]
    features: list[str] = Field(min_length=1)
    embedding_dim: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _wide_dim(self) -> FeatureGroupConfig:
        if self.embedding_dim is not None and self.type != "wide":
            raise ValueError(f"embedding_dim is a setting of wide groups; group {self.name!r} is {self.type}")
        return self


# ------------------------------------------------------------------ lookup, match, expr, overlap kinds
# The kinds computing one value per row from several columns (TorchEasyRec's lookup_feature, match_feature,
# expr_feature, overlap_feature, kv_dot_product; docs/source/feature/feature.md): the value is a dense column,
# or, with ``boundaries``, a bucket id, or (lookup, match) with an id mapping the looked-up value as an id.
_VALUE_MAPPINGS = ("hash_bucket_size", "num_buckets", "vocab_list", "vocab_file")


class _ValueOutputMixin(_TableMixin):
    boundaries: list[float] | None = None
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None
    pooling: Literal["sum", "mean"] = "sum"
    # As a raw feature's: "log(x+C)", "zscore" or "log(x+C),zscore" (zscore fitted on the training split).
    normalizer: str | None = None
    # TorchEasyRec's default_value (default "0"): the value of a row with nothing to compute (a missing input,
    # nothing found). None (TorchEasyRec's ""): an id output has no id there; a dense output is 0.
    default_value: str | None = "0"
    # As a raw feature's (feature.proto gives every value feature dense_emb): a dense value as an
    # embedding_dim-wide embedding in the model, AutoDis or TorchEasyRec's mlp (x · w).
    autodis: AutoDisConfig | None = None
    mlp: MlpEmbeddingConfig | None = None

    def dense_embedding(self) -> dict[str, Any] | None:
        """The DenseFeature's ``embedding`` settings, or None."""
        return dense_embedding_settings(self.autodis, self.mlp, self.embedding_dim)

    def mapping_field(self) -> str | None:
        """The id mapping the value is mapped by (lookup, match), else None."""
        return None

    def has_table(self) -> bool:
        return self.sparse_output

    @property
    def sparse_output(self) -> bool:
        """An id output (bucketized or mapped), else one dense column."""
        return self.boundaries is not None or self.mapping_field() is not None

    @field_validator("boundaries")
    @classmethod
    def _sorted(cls, v: list[float] | None) -> list[float] | None:
        message = "boundaries must be a non-empty, strictly increasing list"
        if v is not None and not v:
            raise ValueError(message)
        return _check_increasing(v, message)

    @field_validator("normalizer")
    @classmethod
    def _normalizer(cls, v: str | None) -> str | None:
        return _check_normalizer(v)

    @model_validator(mode="after")
    def _output(self) -> _ValueOutputMixin:
        if self.column is not None:  # type: ignore[attr-defined]
            raise ValueError(f"kind {self.kind} names its input columns itself; column is not used")  # type: ignore[attr-defined]
        if self.normalizer is not None and self.sparse_output:
            raise ValueError(
                "normalizer applies to a dense value; an id output (boundaries or an id mapping) has none"
            )
        if self.autodis is not None and self.mlp is not None:
            raise ValueError("give one of autodis and mlp")
        if (self.autodis is not None or self.mlp is not None) and self.sparse_output:
            raise ValueError(
                "autodis / mlp embed a dense value; an id output (boundaries or an id mapping) already looks up "
                "a table"
            )
        if self.default_value is not None and self.mapping_field() is None:
            try:
                float(self.default_value)
            except ValueError:
                raise ValueError(f"default_value {self.default_value!r} is not a number") from None
        return self


class _DiscreteValueMixin(_ValueOutputMixin):
    # The looked-up value as an id (TorchEasyRec's need_discrete, implied by a mapping): exactly one mapping.
    hash_bucket_size: int | None = Field(None, ge=1)
    num_buckets: int | None = Field(None, ge=1)
    vocab_list: list[str] | None = None
    vocab_file: str | None = None
    default_bucket: int | None = Field(None, ge=0)
    need_discrete: bool = False

    def mapping_field(self) -> str | None:
        given = [k for k in _VALUE_MAPPINGS if getattr(self, k) is not None]
        return given[0] if given else None

    def prefixed(self) -> bool:
        """The id is the key (keys) joined to the value: need_key / show_pkey / show_skey."""
        return False

    @model_validator(mode="after")
    def _discrete(self) -> _DiscreteValueMixin:
        given = [k for k in _VALUE_MAPPINGS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"at most one id mapping, one of {', '.join(_VALUE_MAPPINGS)}; got {given}")
        if given and self.boundaries is not None:
            raise ValueError(
                f"boundaries bucketize a numeric value and {given[0]} maps an id; give one of them"
            )
        if (self.need_discrete or self.prefixed()) and not given:
            why = "need_discrete" if self.need_discrete else "a key prefix"
            raise ValueError(
                f"{why} makes the value an id: give an id mapping ({', '.join(_VALUE_MAPPINGS)})"
            )
        if self.prefixed() and given[0] == "num_buckets":
            raise ValueError(
                "an id prefixed with its key is text: map it by hash_bucket_size or a vocabulary, not num_buckets"
            )
        return self


LOOKUP_COMBINERS = ("sum", "mean", "avg", "min", "max", "count", "")


class LookupFeatureConfig(_DiscreteValueMixin, FeatureSection):
    """TorchEasyRec's ``lookup_feature``: the value(s) of ``key`` looked up in the ``map`` column."""

    kind: Literal["lookup"]
    map: str
    key: str
    # Multi-value separator of a text key column (TorchEasyRec's separator, default \x1d).
    separator: str = Field("\x1d", min_length=1)
    combiner: str = "sum"
    need_key: bool = False

    def prefixed(self) -> bool:
        return self.need_key

    @field_validator("combiner")
    @classmethod
    def _combiner(cls, v: str) -> str:
        v = v.lower()
        if v in ("gap_min", "gap_max"):
            raise ValueError(
                f"combiner {v!r}: TorchEasyRec's docs name it but do not define it; recpipe does not guess it"
            )
        if v not in LOOKUP_COMBINERS:
            raise ValueError(
                f"combiner {v!r} is not one of sum, mean (avg), min, max, count or '' (every value)"
            )
        return "mean" if v == "avg" else v

    @model_validator(mode="after")
    def _dense_needs_combiner(self) -> LookupFeatureConfig:
        if not self.sparse_output and self.combiner == "":
            raise ValueError(
                "a dense lookup value needs a combiner (sum, mean, min, max, count): a dense column holds one value per row"
            )
        return self

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.map, self.key]


class MatchFeatureConfig(_DiscreteValueMixin, FeatureSection):
    """TorchEasyRec's ``match_feature``: the value of (``pkey``, ``skey``) in the two-level ``nested_map``
    (``pk1^sk1:0.2,sk2:0.3|pk2^sk4:0.1``); ``pkey`` or ``skey`` ``ALL`` matches every key of its level."""

    kind: Literal["match"]
    nested_map: str
    pkey: str
    skey: str
    combiner: Literal["sum", "mean", "min", "max"] = "sum"
    show_pkey: bool = False
    show_skey: bool = False

    def prefixed(self) -> bool:
        return self.show_pkey or self.show_skey

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [c for c in (self.nested_map, self.pkey, self.skey) if c != MATCH_ALL]


MATCH_ALL = "ALL"


class ExprFeatureConfig(_ValueOutputMixin, FeatureSection):
    """TorchEasyRec's ``expr_feature``: an arithmetic expression over numeric columns
    (:mod:`recpipe.config.expr` parses it; every name is a variable, a function or a constant)."""

    kind: Literal["expr"]
    expression: str
    # The columns the expression names (TorchEasyRec's variables, without the side); default: every name in
    # the expression that is not a function or a constant, in order of appearance.
    variables: list[str] | None = None
    # Multi-value separator of a text vector (the arguments of the vector functions).
    separator: str = Field("\x1d", min_length=1)
    # The value padding the shorter vector of dot/euclid_dist/corr (TorchEasyRec's fill_missing); None: vectors
    # of different lengths make the value missing (default_value).
    fill_missing: float | None = None

    @model_validator(mode="after")
    def _parse(self) -> ExprFeatureConfig:
        from recpipe.config.expr import ExprError, parse_expression

        try:
            parsed = parse_expression(self.expression)
        except ExprError as err:
            raise ValueError(f"expression {self.expression!r}: {err}") from None
        if self.variables is not None:
            unknown = [v for v in parsed.variables if v not in self.variables]
            unused = [v for v in self.variables if v not in parsed.variables]
            if unknown:
                raise ValueError(
                    f"expression {self.expression!r} names {unknown}, not among variables {self.variables}"
                )
            if unused:
                raise ValueError(f"variables {unused} are not used by expression {self.expression!r}")
        if not parsed.variables:
            raise ValueError(f"expression {self.expression!r} names no column: it is a constant")
        return self

    def input_columns(self) -> list[str]:
        from recpipe.config.expr import parse_expression

        return list(self.variables or parse_expression(self.expression).variables)

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        from recpipe.config.expr import parse_expression

        vectors = parse_expression(self.expression).vectors
        return [c for c in self.input_columns() if c in vectors or skip_bad_rows]


OVERLAP_METHODS = (
    "query_common_ratio",
    "title_common_ratio",
    "is_contain",
    "is_equal",
    "index_of",
    "proximity_min_cover",
    "proximity_min_dist",
    "proximity_max_dist",
    "proximity_avg_dist",
)


class OverlapFeatureConfig(_ValueOutputMixin, FeatureSection):
    """TorchEasyRec's ``overlap_feature``: how the terms of ``query`` and ``title`` overlap (``method``)."""

    kind: Literal["overlap"]
    query: str
    title: str
    method: Literal[OVERLAP_METHODS]  # type: ignore[valid-type]
    separator: str = Field("\x1d", min_length=1)
    # TorchEasyRec's overlap_feature has no default_value: a missing query or title gives the method's
    # no-overlap value (0; index_of -1; the proximity distances len(title) + 1).
    default_value: None = None

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.query, self.title]


class ComboFeatureConfig(_MultiIdMixin, _IdMappingMixin, FeatureSection):
    """Kind ``combo``: the cross of two or more columns (TorchEasyRec's ``combo_feature``, its ``expression``
    list): each row's ids are the cartesian product of its columns' values (multi-value ones included), each
    crossed value the text of its parts joined by ``"_"`` (``"ua_ia"``), mapped by hash or a vocabulary.

    Example::

        {kind: combo, name: age_x_cate, columns: [age, cate], hash_bucket_size: 1000}
    """

    kind: Literal["combo"]
    columns: list[str] = Field(min_length=2)

    @property
    def source_column(self) -> str:
        return self.columns[0]

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return list(self.columns)

    @model_validator(mode="after")
    def _combo(self) -> ComboFeatureConfig:
        if self.column is not None:
            raise ValueError("a combo feature reads its columns: give columns, not column")
        if len(set(self.columns)) != len(self.columns):
            raise ValueError(f"columns {self.columns} name a column twice")
        if self.num_buckets is not None:
            raise ValueError(
                "a combo feature has no num_buckets (TorchEasyRec's ComboFeature has none: a crossed value is "
                "text); use hash_bucket_size, vocab_list, vocab_file or min_freq"
            )
        return self


# ------------------------------------------------------------------------ sequence_id, sequence_raw kinds
# TorchEasyRec's standalone sequences (sequence_id_feature, sequence_raw_feature; docs/source/feature/feature.md
# 普通序列特征): one history column of one value per item, items by ``delimiter`` (TorchEasyRec's
# sequence_delim, default ";"), the first ``sequence_length`` kept. The feature's own name is its KJT key.
class _StandaloneSequenceMixin(Strict):
    # TorchEasyRec's proto gives sequence_length no default; recpipe asks for it.
    sequence_length: int = Field(ge=1)
    delimiter: str = Field(";", min_length=1)

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.source_column]  # type: ignore[attr-defined]


class SequenceIdFeatureConfig(
    _MultiValueItemMixin, _IdMappingMixin, _StandaloneSequenceMixin, FeatureSection
):
    """TorchEasyRec's ``sequence_id_feature``: a history of ids (``"3;8;1"``), mapped as an id feature's."""

    kind: Literal["sequence_id"]


class SequenceRawFeatureConfig(_TableMixin, _StandaloneSequenceMixin, FeatureSection):
    """TorchEasyRec's ``sequence_raw_feature``: a history of numbers (``"0.1;0.2"``), each bucketized by
    ``boundaries`` (one id per item; an empty item is ``default``), or (``dense: true``, TorchEasyRec's
    sequence_raw_feature without boundaries) kept as ``value_dim`` floats per item (``"0.1\x1d1.1;0.2\x1d1.2"``
    by ``separator``), carried as a grouped dense sub-feature's are (:class:`DenseSubFeatureConfig`)."""

    kind: Literal["sequence_raw"]
    boundaries: list[float] | None = None
    dense: bool = False
    value_dim: int = Field(1, ge=1)
    separator: str = Field(MULTI_VALUE_SEPARATOR, min_length=1)
    default: float = 0.0
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None

    @model_validator(mode="after")
    def _bucketized_or_dense(self) -> SequenceRawFeatureConfig:
        if self.dense == bool(self.boundaries):
            raise ValueError(
                f"sequence_raw feature {self.name!r} needs exactly one of boundaries (its items bucketized into "
                "ids) or dense: true (its items kept as floats)"
            )
        if self.boundaries:
            _check_increasing(self.boundaries)
            if self.value_dim != 1:
                raise ValueError(
                    f"sequence_raw feature {self.name!r}: value_dim {self.value_dim} with boundaries is not "
                    "supported (one bucket id per item)"
                )
        return self


# ------------------------------------------------------------------------------ kv_dot_product, bool_mask
class KvDotProductFeatureConfig(_ValueOutputMixin, FeatureSection):
    """TorchEasyRec's ``kv_dot_product``: the dot product of two key:value columns (``query``, ``document``),
    or the size of the intersection of two key sets (a key without a value weighs 1)."""

    kind: Literal["kv_dot_product"]
    query: str
    document: str
    # Multi-value separator of text (TorchEasyRec's separator, default \x1d) and the key:value separator.
    separator: str = Field("\x1d", min_length=1)
    kv_delimiter: str = Field(":", min_length=1, max_length=1)

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.query, self.document]


class BoolMaskFeatureConfig(_TableMixin, FeatureSection):
    """TorchEasyRec's ``bool_mask_feature``: the values of ``column`` (default: the name) whose place in the
    ``mask`` column is true, as ids (``tf.boolean_mask``), mapped like an id feature's."""

    kind: Literal["bool_mask"]
    mask: str
    hash_bucket_size: int | None = Field(None, ge=1)
    num_buckets: int | None = Field(None, ge=1)
    vocab_list: list[str] | None = None
    vocab_file: str | None = None
    default_bucket: int | None = Field(None, ge=0)
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None
    pooling: Literal["sum", "mean"] = "sum"
    # Multi-value separator of both text columns (TorchEasyRec's separator, default \x1d).
    separator: str = Field("\x1d", min_length=1)
    # TorchEasyRec's default_value (default ""): the value of a row that keeps none; None: no id there.
    default_value: str | None = None

    def mapping_field(self) -> str:
        return next(k for k in _VALUE_MAPPINGS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _one_mapping(self) -> BoolMaskFeatureConfig:
        given = [k for k in _VALUE_MAPPINGS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"exactly one id mapping is required, one of {', '.join(_VALUE_MAPPINGS)}; got {given or 'none'}"
            )
        if self.mask == self.source_column:
            raise ValueError(f"mask {self.mask!r} is the values column itself")
        return self

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.source_column, self.mask]
