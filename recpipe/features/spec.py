"""FeatureSpec: the one schema object, shared by training and serving and written as ``fg.json``.

It says, for every feature, where its values come from, how raw values become ids or dense floats,
and which embedding table the ids look up. Sequences are described by their sub-features; each
sub-feature becomes one jagged KeyedJaggedTensor key ``<sequence>__<sub>`` whose table is shared by
name with the target feature of the same name (``click_50_seq__adgroup_id`` looks up ``adgroup_id``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from recpipe.config.features import TableInit, feature_output

# The FeatureSpec's file name wherever one is written (a dataset, a checkpoint, an export folder).
FG_JSON = "fg.json"

FG_FORMAT_VERSION = 1


# The types an embedding table's weights may have (TorchEasyRec's data_type FP32 / FP16), and the table
# settings fg.json leaves out at their defaults.
TABLE_DATA_TYPES = ("fp32", "fp16")
_TABLE_DEFAULTS: dict[str, Any] = {
    "data_type": "fp32",
    "trainable": True,
    "zch_eviction_interval": None,
    "zch_eviction_policy": "distance_lfu",
    "zch_decay_exponent": 1.0,
    "zch_admission": None,
    "embedding": None,
    "init": None,
}
# A zch table's eviction policies (torchrec.modules.mc_modules' LFU / LRU / DistanceLFU_EvictionPolicy).
ZCH_EVICTION_POLICIES = ("distance_lfu", "lfu", "lru")


@dataclass(frozen=True)
class ZchAdmission:
    """A zch table's frequency admission (the config's ``zch_admission``,
    :class:`recpipe.config.features.ZchAdmissionConfig`).

    Args:
        threshold (int): sightings in training steps an id needs before it gets a row (>= 1).
        counter_capacity (int | None): ids the sighting counter holds; None: the table's zch_size.
        value (float): what every component of an id without a row reads (not trained).

    Example::

        ZchAdmission(5)        # fg.json: "zch_admission": {"threshold": 5, "counter_capacity": null, "value": 0.0}
    """

    threshold: int
    counter_capacity: int | None = None
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.threshold < 1 or (self.counter_capacity is not None and self.counter_capacity < 1):
            raise FeatureSpecError(
                f"zch_admission needs threshold >= 1 and counter_capacity >= 1 or null, got {self}"
            )

    def slots(self, zch_size: int) -> int:
        """Counter slots per table row: ``counter_capacity`` (None: ``zch_size``) ids, rounded up to whole rows."""
        return max(1, -(-(self.counter_capacity or zch_size) // zch_size))


class FeatureSpecError(ValueError):
    """A FeatureSpec (or fg.json) is inconsistent or unreadable."""


@dataclass(frozen=True)
class IdMapping:
    """How a raw value becomes a row id of an embedding table.

    Args:
        kind (str): ``"hash"`` (stable 64-bit FNV-1a of the string form, mod ``size``), ``"mod"``
            (integer id mod ``size``), ``"vocab"`` (position in ``vocab`` plus one; 0 is UNK) or
            ``"identity"`` (already an id in ``[0, size)``: bucketized raw features, and every id of
            pre-encoded input, whose ids outside the range are bad rows; a pre-encoded zch feature's ids are
            instead any non-negative int64, keyed for its managed-collision module).
        size (int): number of table rows the mapping can produce.
        vocab (list[str] | None): the vocabulary for ``"vocab"``.
        default_value (str | None): replaces nulls before mapping; ``None`` leaves the feature absent.

    Example::

        IdMapping("mod", 846812)       # adgroup_id: id % 846812
        IdMapping("hash", 20)          # pid: fnv1a64("430548_1007") % 20
        IdMapping("identity", 39060)   # pre-encoded cat_1: the column holds the row, 0 <= id < 39060
    """

    kind: Literal["hash", "mod", "vocab", "identity"]
    size: int
    vocab: list[str] | None = None
    default_value: str | None = None
    unk_id: int = 0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise FeatureSpecError(f"id mapping size must be >= 1, got {self.size}")
        if self.kind == "vocab" and self.vocab is None:
            raise FeatureSpecError("a vocab mapping needs its vocabulary")


@dataclass(frozen=True)
class SparseFeature:
    """One KeyedJaggedTensor key: a single-valued id feature, a bucketized raw feature, or one
    sub-feature of a sequence (then ``sequence`` names the parent and values are jagged per row).

    Args:
        name (str): the KJT key.
        column (str): source column.
        mapping (IdMapping): raw value → row id.
        table (str): embedding table name (shared by name).
        embedding_dim (int): table dim.
        pooling (str): ``"sum"`` or ``"mean"`` when pooled.
        boundaries (list[float] | None): bucketize a raw float column instead of mapping ids.
        sequence (str | None): parent sequence feature name for sub-features.
        zch (bool): use a managed-collision (zero-collision hashing) module for this feature: FG emits
            63-bit keys (not ``id % size``) and the model's module gives each key its own row.
        zch_size (int | None): rows of the zch table (default ``mapping.size``).
        kind (str): the feature kind whose FG computes the key (:mod:`recpipe.features.kinds`; default: what an
            fg.json written before kinds were recorded means, :func:`default_kind`).
        inputs (list[str]): the other input columns the kind reads besides ``column`` (a combo's other
            columns, a lookup's key column…), in the kind's order.
        params (dict): the kind's own settings (JSON values: separators, combiners, an expression…).
        data_type (str): the table's weights, ``"fp32"`` or ``"fp16"`` (TorchEasyRec's ``data_type``).
        trainable (bool): False freezes the table (TorchEasyRec's ``trainable``: the optimizer never moves it).
        init (TableInit | None): the table's initializer; None: the model's.
    """

    name: str
    column: str
    mapping: IdMapping
    table: str
    embedding_dim: int
    pooling: str = "sum"
    boundaries: list[float] | None = None
    raw_default: float = 0.0
    sequence: str | None = None
    zch: bool = False
    zch_size: int | None = None
    kind: str = ""
    inputs: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    data_type: str = "fp32"
    trainable: bool = True
    # Steps between a zch table's admissions and evictions; None: recpipe's default (every step).
    zch_eviction_interval: int | None = None
    # Which ids a full zch table evicts (one of ZCH_EVICTION_POLICIES) and lru's / distance_lfu's exponent on
    # the steps since an id was seen (lfu ignores it); written to fg.json only when not these defaults.
    zch_eviction_policy: str = "distance_lfu"
    zch_decay_exponent: float = 1.0
    init: TableInit | None = None
    # Frequency admission of the zch table; None: none (written to fg.json only when set).
    zch_admission: ZchAdmission | None = None

    @property
    def item_float(self) -> bool:
        """A history sub-feature that is one float per item, not an id (``params["item_float"]``): it has no
        table; its KJT values are the float64 bits of each item's value (``np.float64.view(np.int64)``), read
        back with ``values.view(torch.float64)`` beside the items' embeddings, ``embedding_dim`` (1) wide."""
        return bool(self.params.get("item_float"))

    @property
    def weights_key(self) -> str | None:
        """The KJT key holding this pooled key's per-id weights (a weighted id, ``params["weights"]``), or None.

        TorchEasyRec's ``weighted: true`` ids ``k1:w1\x1dk2:w2``: the weights travel as their own KJT key
        (:attr:`weights_of`), one float64 bit pattern per id as an item float's, so every backend's
        ``(dense, values, lengths)`` carries them; the lookup pools ``Σ w·e`` (``mean``: ``Σ w·e / n``).
        """
        return self.params.get("weights")

    @property
    def weights_of(self) -> str | None:
        """For the weights key of a weighted id: the id key whose weights it holds (no table; FG fills it with
        that key's weights, one per id, as float64 bits)."""
        return self.params.get("weights_of")

    @property
    def item_lengths_key(self) -> str | None:
        """For a multi-value history key (TorchEasyRec's ``value_dim: 0``, ``params["item_lengths"]``): the KJT
        key holding each item's id count; this key's values are every item's ids, its lengths ids per row, and
        the model embeds an item as the ``pooling`` of its ids (:func:`recpipe.models.blocks.items.pool_items`).
        """
        return self.params.get("item_lengths")

    @property
    def item_lengths_of(self) -> str | None:
        """For the id counts key of a multi-value history: the history key whose items it counts (no table;
        values: one id count per item, lengths: items per row, as a one-id history's)."""
        return self.params.get("item_lengths_of")

    @property
    def has_table(self) -> bool:
        """Whether the key looks up an embedding table (a float per history item, a weights key and a
        multi-value history's id counts do not)."""
        return not self.item_float and self.weights_of is None and self.item_lengths_of is None

    def __post_init__(self) -> None:
        if self.data_type not in TABLE_DATA_TYPES:
            raise FeatureSpecError(
                f"feature {self.name!r}: data_type {self.data_type!r} is not one of {list(TABLE_DATA_TYPES)}"
            )
        if self.zch_eviction_policy not in ZCH_EVICTION_POLICIES:
            raise FeatureSpecError(
                f"feature {self.name!r}: zch_eviction_policy {self.zch_eviction_policy!r} is not one of "
                f"{list(ZCH_EVICTION_POLICIES)}"
            )
        if not self.kind:
            object.__setattr__(self, "kind", default_kind(self))


@dataclass(frozen=True)
class DenseFeature:
    """One column of ``Batch.dense``: ``(log(x + log_offset) - mean) / std``, a null read as ``x = default``.

    The default is a raw value (TorchEasyRec's ``default_value``), transformed like any other: with
    ``log(x+3)`` and ``default 0`` a missing value looks exactly like a 0. Give it a value no real one takes
    (e.g. ``-2.5`` → ``log 0.5`` when real values are ``>= -2``) where missing and 0 mean different things.
    """

    name: str
    column: str
    default: float = 0.0
    log_offset: float | None = None
    mean: float = 0.0
    std: float = 1.0
    kind: str = "raw"
    # As a SparseFeature's: the other input columns of its kind, and the kind's own settings.
    inputs: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    # The model's embedding of the value (TorchEasyRec's autodis / mlp of a raw feature), read by the model,
    # not by FG: {"type": "autodis", "dim", "num_channels", "temperature", "keep_prob"} or {"type": "mlp",
    # "dim"}; None: the value enters its group as it is.
    embedding: dict[str, Any] | None = None


@dataclass(frozen=True)
class SequenceFeature:
    """A multi-value history column: items split by ``delimiter``, sub-values by ``sub_delimiter``.

    Items are ordered most recent first; only the first ``max_length`` items are kept.
    """

    name: str
    column: str
    max_length: int
    delimiter: str
    sub_delimiter: str
    sub_features: list[str]  # KJT keys, in sub-value order
    kind: str = "sequence"


def sub_value_positions(feats: list[SparseFeature]) -> list[int]:
    """The sub-value (its position in an item) each history key reads: one each, except the ``value_dim`` keys
    of a vector sub-value (``params["index"]`` 1, 2, …), which read the sub-value of their index 0."""
    out: list[int] = []
    for f in feats:
        out.append(out[-1] + (f.params.get("index", 0) == 0) if out else 0)
    return out


def default_kind(entry: SparseFeature | DenseFeature | SequenceFeature) -> str:
    """The kind an entry without a recorded one was made by: ``sequence`` for histories and their keys, ``raw``
    for dense columns and bucketized keys, else ``id``. fg.json leaves a kind out when it is this one, so the
    files (and digests) of these kinds read as they did before kinds were recorded."""
    if isinstance(entry, SequenceFeature) or getattr(entry, "sequence", None) is not None:
        return "sequence"
    if isinstance(entry, DenseFeature) or entry.boundaries is not None:
        return "raw"
    return "id"


@dataclass(frozen=True)
class TableSpec:
    """An embedding table and the KJT keys that look it up."""

    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: list[str]
    # True when any of its features is a sequence sub-feature: lives in an EmbeddingCollection.
    sequence: bool
    # Rows of a managed-collision (zero-collision hashing) table, == num_embeddings; None: ids index rows.
    zch_size: int | None = None
    # The weights' type (SparseFeature.data_type) and whether the optimizer updates them.
    data_type: str = "fp32"
    trainable: bool = True
    zch_eviction_interval: int | None = None
    zch_eviction_policy: str = "distance_lfu"
    zch_decay_exponent: float = 1.0
    # A weighted table's keys → the KJT keys of their per-id weights (SparseFeature.weights_key); empty:
    # unweighted. A table's keys are all weighted or none (TorchRec's EmbeddingBagCollection is one or the other).
    weights: dict[str, str] = field(default_factory=dict)
    # Multi-value history keys → [their id counts key, "sum" | "mean"] (SparseFeature.item_lengths_key): the
    # EmbeddingCollection's per-id rows pooled item by item. Empty: one id per item.
    items: dict[str, list[str]] = field(default_factory=dict)
    # The table's initializer (SparseFeature.init); None: the model's.
    init: TableInit | None = None
    # The zch table's frequency admission (SparseFeature.zch_admission); None: none.
    zch_admission: ZchAdmission | None = None


@dataclass(frozen=True)
class FeatureGroup:
    """A named set of features the model consumes together (``deep``, ``sequence`` or ``wide``; a wide
    group's ``sparse`` are the ``<feature>__wide`` keys of its features' wide tables).

    A sequence group's ``dense`` are ``Batch.dense`` columns of its query (TorchEasyRec's
    SequenceEmbeddingGroupImpl concatenates a dense query feature's value(s) into the query); then
    ``query_order`` is the whole query in the group's order, pooled keys and dense columns alike.

    Example::

        # features [id_2, raw_2, click_50_seq__id_2, click_50_seq__raw_2], raw_2 a dense column:
        FeatureGroup("seq", "sequence", sparse=[...], dense=["raw_2"], query=["id_2"],
                     history=["click_50_seq__id_2", "click_50_seq__raw_2"], query_order=["id_2", "raw_2"])
        # query (B, D_id_2 + 1) = id_2's embedding | raw_2's value; an item (T, D + 1) = its id_2 | its raw_2
    """

    name: str
    type: Literal["deep", "sequence", "wide"]
    sparse: list[str]
    dense: list[str]
    # For sequence groups: (query key, history key) pairs matched by sub-feature name.
    query: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    # For a sequence group with dense query columns: ``query`` and ``dense`` interleaved in the group's order.
    query_order: list[str] = field(default_factory=list)

    def query_parts(self) -> list[str]:
        """The query's parts in concatenation order: ``query_order``, or ``query`` when it has no dense column."""
        return list(self.query_order) if self.dense else list(self.query)


def _zch_size(table: str, feats: list[SparseFeature]) -> int | None:
    """Rows of ``table`` if its features are zch (all of them must be, with one key scheme), else None."""
    zch = [f.name for f in feats if f.zch]
    if not zch:
        return None
    plain = [f.name for f in feats if not f.zch]
    if plain:
        raise FeatureSpecError(
            f"table {table!r} is shared by zch features {zch} and features without zch {plain}: their ids "
            "would not match (FG keys vs id % size); set zch on all of them or none"
        )
    kinds = sorted({f.mapping.kind for f in feats})
    if len(kinds) != 1 or kinds[0] not in ("hash", "mod", "identity"):
        raise FeatureSpecError(
            f"table {table!r}: zch features need one id mapping, hash_bucket_size or num_buckets, for all "
            f"features sharing the table (their keys must match); got {kinds}"
        )
    explicit = sorted({f.zch_size for f in feats if f.zch_size is not None})
    if len(explicit) > 1:
        raise FeatureSpecError(
            f"table {table!r} is shared by zch features with different zch_size {explicit}"
        )
    return explicit[0] if explicit else max(f.mapping.size for f in feats)


def _table_weights(table: str, feats: list[SparseFeature], zch_size: int | None) -> dict[str, str]:
    """A table's weighted keys → their weights keys; every key weighted or none, pooled, no zch."""
    weighted = {f.name: f.weights_key for f in feats if f.weights_key is not None}
    if not weighted:
        return {}
    plain = [f.name for f in feats if f.weights_key is None]
    if plain or zch_size is not None:
        why = f"features without weights {plain}" if plain else "zch"
        raise FeatureSpecError(
            f"table {table!r} is looked up by weighted ids {sorted(weighted)} and {why}: a weighted table's "
            "lookups are all weighted (TorchRec's weighted EmbeddingBagCollection), pooled, without zch"
        )
    return weighted  # type: ignore[return-value]


@dataclass
class FeatureSpec:
    """Everything FG needs to turn Arrow rows into a ``Batch``, and the model needs to build tables.

    Args:
        sparse (list[SparseFeature]): KJT keys in batch order.
        dense (list[DenseFeature]): ``Batch.dense`` columns in order, ``(B, len(dense))``.
        sequences (list[SequenceFeature]): history columns and their sub-feature keys.
        groups (list[FeatureGroup]): feature groups for the model.
        label (str): label column (the primary one); ``weight`` optional sample-weight column.
        extra_labels (list[str]): the other label columns of a multi-task model, in task order.
        domain_label (str | None): the last label, when the model has a tower per task and domain (PEPNet's
            ``domain_label``): not a task's, it holds each row's domain, an integer in ``[0, domain_num)`` that
            FG checks; the loss and metrics read each row's domain tower (:meth:`output_names`).
        domain_num (int): the number of domains (with ``domain_label``).

    Example::

        spec = build_feature_spec(load_config("configs/din_taobao_small.yaml"))
        spec.sparse_keys()[:2]  # ['user_id', 'cms_segid']
        # a batch of B=2 rows, history lengths 3 and 0:
        #   click_50_seq__adgroup_id: [[a1, a2, a3], []]  -> values (3,), lengths [3, 0]
    """

    sparse: list[SparseFeature]
    dense: list[DenseFeature]
    sequences: list[SequenceFeature]
    groups: list[FeatureGroup]
    label: str
    weight: str | None = None
    group_column: str | None = None
    version: int = FG_FORMAT_VERSION
    # Digest of the config's feature definition it was fitted from (recpipe.features.fit.config_digest):
    # training refuses an fg.json whose features the config has since changed. None: written before.
    config_digest: str | None = None
    extra_labels: list[str] = field(default_factory=list)
    domain_label: str | None = None
    domain_num: int = 0

    def __post_init__(self) -> None:
        if self.domain_label is not None and (self.labels[-1] != self.domain_label or self.domain_num < 1):
            raise FeatureSpecError(
                f"domain_label {self.domain_label!r} must be the last of the labels {self.labels}, with "
                f"domain_num >= 1 (got {self.domain_num})"
            )

    @property
    def labels(self) -> list[str]:
        """Every label column, the primary one first (FG's ``labels`` columns, in this order)."""
        return [self.label, *self.extra_labels]

    @property
    def task_labels(self) -> list[str]:
        """The labels the tasks predict: every label but the domain label (the first ``T`` columns of
        ``Batch.labels``)."""
        return self.labels if self.domain_label is None else self.labels[:-1]

    def output_names(self) -> list[str]:
        """The model's outputs in its logits' column order: a task label each (``clk``, ``buy``); with a
        ``domain_label``, ``<label>_<j>`` per task and domain ``j``, task-major (``clk_0, clk_1, clk_2,
        buy_0, ...``: TorchEasyRec's tower ``i * D + j``)."""
        if self.domain_label is None:
            return self.labels
        return [f"{label}_{j}" for label in self.task_labels for j in range(self.domain_num)]

    def output_columns(self, output: str = "probability") -> list[str]:
        """A served model's output columns: ``[output]`` for one label; ``<output>_<name>`` for each of a
        multi-task model's :meth:`output_names` (``probability_clk``, ``probability_buy``; with domain towers
        ``probability_clk_0`` ... ``probability_buy_2``)."""
        names = self.output_names()
        return [output] if len(names) == 1 else [f"{output}_{name}" for name in names]

    def label_only_columns(self) -> set[str]:
        """The label and weight columns no feature reads: what serving rows need not have (a domain label is
        often a feature's column too, TorchEasyRec's ``occupation``)."""
        read = {c for e in self.fg_entries() for c in (e.column, *getattr(e, "inputs", ()))}
        return {c for c in (*self.labels, self.weight) if c and c not in read}

    # ------------------------------------------------------------------ queries
    def sparse_keys(self) -> list[str]:
        return [f.name for f in self.sparse]

    def dense_names(self) -> list[str]:
        return [f.name for f in self.dense]

    def item_float_keys(self) -> list[str]:
        """The history sub-features that are a float per item (:attr:`SparseFeature.item_float`), in order."""
        return [f.name for f in self.sparse if f.item_float]

    def pooling(self) -> dict[str, str]:
        """``"sum"`` or ``"mean"`` per sparse key: how its embedding bag pools."""
        return {f.name: f.pooling for f in self.sparse}

    @property
    def dense_dim(self) -> int:
        return len(self.dense)

    def feature(self, name: str) -> SparseFeature:
        for f in self.sparse:
            if f.name == name:
                return f
        raise FeatureSpecError(f"no sparse feature {name!r}; known: {self.sparse_keys()}")

    def group(self, name: str) -> FeatureGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise FeatureSpecError(f"no feature group {name!r}; known: {[g.name for g in self.groups]}")

    def tables(self) -> list[TableSpec]:
        """Embedding tables in first-use order, with every KJT key that looks each one up."""
        order: dict[str, list[SparseFeature]] = {}
        for f in self.sparse:
            if f.has_table:  # a float per history item and a weighted id's weights have none
                order.setdefault(f.table, []).append(f)
        out = []
        for name, feats in order.items():
            dims = {f.embedding_dim for f in feats}
            sizes = {f.mapping.size for f in feats}
            if len(dims) != 1:
                raise FeatureSpecError(
                    f"table {name!r} is shared by features with different dims {sorted(dims)}"
                )
            zch_size = _zch_size(name, feats)
            weights = _table_weights(name, feats, zch_size)
            multi = [f.name for f in feats if f.item_lengths_key is not None]
            if multi and zch_size is not None:
                raise FeatureSpecError(
                    f"table {name!r}: multi-value history keys {multi} (value_dim 0) on a zch table are not "
                    "supported yet"
                )
            zch_settings = (
                "zch_eviction_interval",
                "zch_eviction_policy",
                "zch_decay_exponent",
                "zch_admission",
            )
            for setting in ("data_type", "trainable", "init", *zch_settings):
                values = {getattr(f, setting) for f in feats}
                if len(values) > 1:
                    raise FeatureSpecError(
                        f"table {name!r} is shared by features with different {setting} "
                        f"{ {f.name: getattr(f, setting) for f in feats} }"
                    )
            out.append(
                TableSpec(
                    name=name,
                    num_embeddings=zch_size or max(sizes),
                    embedding_dim=dims.pop(),
                    feature_names=[f.name for f in feats],
                    sequence=any(f.sequence is not None for f in feats),
                    zch_size=zch_size,
                    data_type=feats[0].data_type,
                    trainable=feats[0].trainable,
                    zch_eviction_interval=feats[0].zch_eviction_interval,
                    zch_eviction_policy=feats[0].zch_eviction_policy,
                    zch_decay_exponent=feats[0].zch_decay_exponent,
                    zch_admission=feats[0].zch_admission,
                    weights=weights,
                    init=feats[0].init,
                    items={
                        f.name: [f.item_lengths_key, f.pooling]
                        for f in feats
                        if f.item_lengths_key is not None
                    },
                )
            )
        return out

    def fg_entries(self) -> list[SparseFeature | SequenceFeature | DenseFeature]:
        """Every entry FG computes from an input column, by its kind: the pooled keys (a history's sub-feature
        keys come with their history), the histories, the dense columns."""
        pooled = (
            f for f in self.sparse if f.sequence is None and f.weights_of is None
        )  # weights: with their ids
        return [*pooled, *self.sequences, *self.dense]

    def input_columns(self) -> list[str]:
        """Source columns FG reads (label and weight included); a feature output (``"feature:X"``) is not one:
        FG derives it from X's column."""
        cols = [c for e in self.fg_entries() for c in (e.column, *getattr(e, "inputs", ()))]
        cols = [c for c in cols if feature_output(c) is None] + self.labels
        if self.weight:
            cols.append(self.weight)
        if self.group_column:
            cols.append(self.group_column)
        return list(dict.fromkeys(cols))

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["extra_labels"]:  # a single-label spec reads (and digests) as before multi-task labels
            del out["extra_labels"]
        if self.domain_label is None:  # a spec without domain towers reads (and digests) as before
            del out["domain_label"], out["domain_num"]
        for g in out["groups"]:  # a group without dense query columns reads (and digests) as before
            if not g["query_order"]:
                del g["query_order"]
        for part, entries in (("sparse", self.sparse), ("dense", self.dense), ("sequences", self.sequences)):
            for d, entry in zip(out[part], entries, strict=True):
                if entry.kind == default_kind(entry):
                    del d["kind"]
                for optional in ("inputs", "params"):  # the kinds without them read (and digest) as before
                    if optional in d and not d[optional]:
                        del d[optional]
                for setting, default in _TABLE_DEFAULTS.items():  # written when not the default, likewise
                    if d.get(setting, default) == default:
                        d.pop(setting, None)
                if getattr(entry, "init", None) is not None:
                    d["init"] = entry.init.to_dict()  # type: ignore[union-attr]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FeatureSpec:
        version = int(d.get("version", 0))
        if version > FG_FORMAT_VERSION:
            raise FeatureSpecError(
                f"fg.json format version {version} is newer than this recpipe understands ({FG_FORMAT_VERSION})"
            )
        try:
            sparse = [
                SparseFeature(
                    **{
                        **f,
                        "mapping": IdMapping(**f["mapping"]),
                        **({"init": TableInit(**f["init"])} if f.get("init") else {}),
                        **(
                            {"zch_admission": ZchAdmission(**f["zch_admission"])}
                            if f.get("zch_admission")
                            else {}
                        ),
                    }
                )
                for f in d["sparse"]
            ]
            return cls(
                sparse=sparse,
                dense=[DenseFeature(**f) for f in d["dense"]],
                sequences=[SequenceFeature(**s) for s in d["sequences"]],
                groups=[FeatureGroup(**g) for g in d["groups"]],
                label=d["label"],
                weight=d.get("weight"),
                group_column=d.get("group_column"),
                version=version,
                config_digest=d.get("config_digest"),
                extra_labels=list(d.get("extra_labels", [])),
                domain_label=d.get("domain_label"),
                domain_num=int(d.get("domain_num", 0)),
            )
        except FeatureSpecError:
            raise
        except (KeyError, TypeError, ValueError) as err:  # ValueError: a table init TableInit refuses
            raise FeatureSpecError(f"malformed FeatureSpec: {err}") from None

    def digest(self) -> str:
        """sha256 of what FG and the model use; ``config_digest`` (where it was fitted from) is left out, so
        a spec built from the config and the same spec fitted from it are one spec."""
        content = {k: v for k, v in self.to_dict().items() if k != "config_digest"}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write ``fg.json`` atomically."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fg.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1, ensure_ascii=True)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> FeatureSpec:
        path = Path(path)
        if path.is_dir():
            path = path / FG_JSON
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            raise FeatureSpecError(f"no FeatureSpec at {path}") from None
        except json.JSONDecodeError as err:
            raise FeatureSpecError(f"{path} is not valid JSON: {err}") from None
