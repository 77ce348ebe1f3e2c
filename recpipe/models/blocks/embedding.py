"""Embedding lookups for a FeatureSpec: pooled tables in an EmbeddingBagCollection, tables that serve
sequences in one EmbeddingCollection per embedding dim (jagged, never padded), zero-collision (zch) tables
in a ManagedCollisionEmbeddingCollection that maps 63-bit id keys to rows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm used by KeyedJaggedTensor)
import torch
from torch import nn
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, EmbeddingConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.modules.mc_embedding_modules import ManagedCollisionEmbeddingCollection
from torchrec.modules.mc_modules import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    ManagedCollisionCollection,
    MCHEvictionPolicy,
    MCHManagedCollisionModule,
)
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor

from recpipe.features.spec import TableInit, TableSpec, ZchAdmission
from recpipe.models.blocks.item_floats import item_floats
from recpipe.models.blocks.items import pool_items
from recpipe.models.blocks.zch_admission import (
    EMPTY,
    constant_without_row,
    count_sightings,
    forget_admitted,
    hold_spare_rows,
)

INIT_KINDS = ("uniform", "xavier_uniform", "normal")
POOLINGS = {"sum": PoolingType.SUM, "mean": PoolingType.MEAN}
# TableSpec.data_type → TorchRec's table data type (TorchEasyRec's data_type FP32 / FP16).
DATA_TYPES = {"fp32": DataType.FP32, "fp16": DataType.FP16}


# The init functions return the weight: TorchRec's managed-collision modules re-initialize evicted
# rows with ``rows[idx] = init_fn(rows[idx])``.
def _uniform(weight: torch.Tensor, bound: float) -> torch.Tensor:
    return nn.init.uniform_(weight, -bound, bound)


def _xavier_uniform(weight: torch.Tensor, gain: float) -> torch.Tensor:
    return nn.init.xavier_uniform_(weight, gain=gain)


def _normal(weight: torch.Tensor, std: float) -> torch.Tensor:
    return nn.init.normal_(weight, 0.0, std)


def _normal_at(weight: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    return nn.init.normal_(weight, mean, std)


def _constant(weight: torch.Tensor, value: float) -> torch.Tensor:
    return nn.init.constant_(weight, value)


@torch.no_grad()
def _truncated_normal(
    weight: torch.Tensor, mean: float, std: float, lower: float, upper: float
) -> torch.Tensor:
    """N(mean, std²) conditioned on [lower, upper] by the inverse CDF, in place (torch <= 2.11's trunc_normal_,
    which TorchEasyRec's init_util keeps for large tables: no table-sized temporaries; half-precision tables
    draw in float32, where erfinv is defined on every device)."""
    low, up = (0.5 * (1.0 + math.erf((x - mean) / (std * math.sqrt(2.0)))) for x in (lower, upper))
    out = (
        weight
        if weight.dtype in (torch.float32, torch.float64)
        else torch.empty_like(weight, dtype=torch.float32)
    )
    out.uniform_(2 * low - 1, 2 * up - 1).erfinv_().mul_(std * math.sqrt(2.0)).add_(mean).clamp_(lower, upper)
    return weight if out is weight else weight.copy_(out)


def table_init_fn(
    init: TableInit, num_embeddings: int, embedding_dim: int, table: str = ""
) -> partial[torch.Tensor]:
    """A picklable ``init_fn(weight)`` drawing a table's own initializer (``TableSpec.init``), its unset fields
    at their defaults: ``mean`` 0, ``std`` 1/sqrt(dim), ``lower`` / ``upper`` ∓/± sqrt(1/rows), ``value`` 0.

    Example::

        table_init_fn(TableInit("normal", std=0.05), 1000, 16)   # partial drawing N(0, 0.05²)
    """
    mean = init.mean if init.mean is not None else 0.0
    std = init.std if init.std is not None else 1.0 / math.sqrt(embedding_dim)
    bound = math.sqrt(1.0 / num_embeddings)
    lower = init.lower if init.lower is not None else -bound
    upper = init.upper if init.upper is not None else bound
    if init.mode in ("uniform", "truncated_normal") and not lower < upper:
        raise ValueError(
            f"table {table!r}: init {init.mode} lower {lower} is not below upper {upper} (an unset bound is "
            f"∓/± sqrt(1/rows) = {bound:.6g})"
        )
    if init.mode == "normal":
        return partial(_normal_at, mean=mean, std=std)
    if init.mode == "truncated_normal":
        return partial(_truncated_normal, mean=mean, std=std, lower=lower, upper=upper)
    if init.mode == "uniform":
        return partial(nn.init.uniform_, a=lower, b=upper)
    return partial(_constant, value=init.value if init.value is not None else 0.0)


@dataclass(frozen=True)
class EmbeddingInit:
    """How embedding tables are initialized (passed to TorchRec as each table's ``init_fn``).

    The DLRM seed's pitfall 5.1: a bad scale makes the dot interactions vanish at the start, so the
    scale is a choice, not a hidden default.

    Args:
        kind (str): ``"uniform"``: ``U(−s, s)`` with ``s = scale`` or, if ``None``, ``sqrt(1 / rows)``
            (TorchRec's and the DLRM reference's default); ``"xavier_uniform"``: ``U(±gain·sqrt(6 / (rows + dim)))``
            with ``gain = scale or 1``; ``"normal"``: ``N(0, scale²)``, default ``scale = 1 / sqrt(dim)``.
        scale (float | None): see ``kind``.

    Example::

        EmbeddingInit("uniform", 0.05).init_fn(1000, 16)  # a TorchRec init_fn drawing U(-0.05, 0.05)
    """

    kind: str = "uniform"
    scale: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in INIT_KINDS:
            raise ValueError(f"unknown embedding init {self.kind!r}; allowed: {list(INIT_KINDS)}")
        if self.scale is not None and not self.scale > 0.0:
            raise ValueError(f"embedding init scale must be > 0, got {self.scale}")

    def init_fn(
        self, num_embeddings: int, embedding_dim: int, table: TableInit | None = None, name: str = ""
    ) -> partial[torch.Tensor]:
        """A picklable ``init_fn(weight)`` for one table (sharded tables call it on each local shard); a table
        with its own initializer (``table``, ``TableSpec.init``) takes that instead (:func:`table_init_fn`)."""
        if table is not None:
            return table_init_fn(table, num_embeddings, embedding_dim, name)
        if self.kind == "uniform":
            return partial(_uniform, bound=self.scale or math.sqrt(1.0 / num_embeddings))
        if self.kind == "xavier_uniform":
            return partial(_xavier_uniform, gain=self.scale or 1.0)
        return partial(_normal, std=self.scale or 1.0 / math.sqrt(embedding_dim))


class EmbeddingLookup(NamedTuple):
    """What :class:`EmbeddingGroup` returns.

    Args:
        pooled (dict[str, torch.Tensor]): ``(B, D)`` per pooled key.
        values (dict[str, torch.Tensor]): ``(T, D)`` per sequence key, rows back to back.
        offsets (dict[str, torch.Tensor]): ``(B + 1,)`` int64 row offsets per sequence key.
    """

    pooled: dict[str, torch.Tensor]
    values: dict[str, torch.Tensor]
    offsets: dict[str, torch.Tensor]


# Managed collision: new ids are admitted every step (history coalesced each step); when the table is
# full, the rows with the lowest count / (steps since last seen + 1) (DistanceLFU) are evicted for them.
ZCH_EVICTION_INTERVAL = 1
ZCH_DECAY_EXPONENT = 1.0
ZCH_EVICTION_POLICY = "distance_lfu"


def eviction_policy(
    name: str = ZCH_EVICTION_POLICY, decay_exponent: float = ZCH_DECAY_EXPONENT
) -> MCHEvictionPolicy:
    """TorchRec's eviction policy of a zch table (TableSpec.zch_eviction_policy; TorchEasyRec's ``zch { lfu {} }``,
    ``lru { decay_exponent }``, ``distance_lfu { decay_exponent }``, tzrec/features/feature.py): a full table
    evicts the ids of lowest score, ``lfu``'s the access count, ``lru``'s ``1 / steps_since_seen ** e``,
    ``distance_lfu``'s ``count / steps_since_seen ** e``.

    Example::

        eviction_policy("lru", 2.0)      # LRU_EvictionPolicy(decay_exponent=2.0)
    """
    if name == "lfu":
        return LFU_EvictionPolicy()
    if name == "lru":
        return LRU_EvictionPolicy(decay_exponent=decay_exponent)
    if name == "distance_lfu":
        return DistanceLFU_EvictionPolicy(decay_exponent=decay_exponent)
    raise ValueError(f"unknown zch eviction policy {name!r}; known: distance_lfu, lfu, lru")


class ZchRemapModule(MCHManagedCollisionModule):
    """TorchRec's zero-collision remapping with two fixes, and frequency admission when ``admission`` is given
    (:mod:`recpipe.models.blocks.zch_admission`: an id is offered a row only once its sightings across training
    steps reach the threshold; the counter is the module's ``_admit_keys`` / ``_admit_counts`` buffers).

    1. Every id of a step is counted. TorchRec sizes the buffer that collects a step's ids for
       admission from the first batch (1.25 × its ids) and silently drops the ids past it in later,
       larger batches (histories vary in length): they were neither admitted nor counted, and a run
       resumed from a checkpoint (sized by another first batch) diverged from the uninterrupted one.
       The buffer grows instead.
    2. Keys without a row go to the row a sharded run used. Row-wise sharded over ``W`` ranks, rank
       ``r`` remaps the keys in the ``r``-th ``1/W`` of the key space and sends those it has no row for
       to the last row of its own range; unsharded, TorchRec sends them all to the table's last row, so
       a model loaded from a ``W``-rank checkpoint would score unseen ids differently from the trainer.
       The row ranges the checkpoint was written with (``_output_segments_tensor``) are kept when it is
       loaded and used for such keys.
    """

    _miss_segments: list[int] | None = None

    def __init__(self, *args: Any, admission: ZchAdmission | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._admission = admission
        if admission is not None:
            self._init_counter(admission.slots(self._zch_size))

    def _init_counter(self, slots: int) -> None:
        shape = (self._zch_size, slots)
        self.register_buffer("_admit_keys", torch.full(shape, EMPTY, dtype=torch.int64, device=self.device))
        self.register_buffer("_admit_counts", torch.zeros(shape, dtype=torch.int64, device=self.device))

    def rebuild_with_output_id_range(
        self,
        output_id_range: tuple[int, int],
        output_segments: list[int],
        device: torch.device | None = None,
    ) -> ZchRemapModule:
        """TorchRec's per-rank module of a row-wise sharded table, with the admission (its counter keeps the
        unsharded module's slots per row, so the ranks together count as many ids)."""
        module = super().rebuild_with_output_id_range(output_id_range, output_segments, device)
        module._admission = self._admission
        if self._admission is not None:
            module._init_counter(int(self._admit_keys.shape[1]))
        return module

    def profile(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        if not self.training or self._admission is None:
            return self._profile_history(features)
        ids = [f.values() for f in features.values()]
        passes = count_sightings(
            self._admit_keys.view(-1),
            self._admit_counts.view(-1),
            torch.cat(ids).to(torch.int64),
            self._mch_sorted_raw_ids,
            self._admission.threshold,
        )
        offered: dict[str, JaggedTensor] = {}
        for (name, f), part in zip(features.items(), torch.split(passes, [v.numel() for v in ids])):
            values = f.values()[part]
            offered[name] = JaggedTensor(
                values=values, lengths=torch.tensor([values.numel()], device=values.device)
            )
        self._profile_history(offered)
        if self._last_eviction_iter == self._current_iter:  # this step admitted and evicted
            forget_admitted(self._admit_keys.view(-1), self._admit_counts.view(-1), self._mch_sorted_raw_ids)
        return features  # every id is remapped: those without a row to the spare row

    def _profile_history(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        if self.training and self._input_history_buffer_size != -1:
            need = self._current_history_buffer_offset + sum(f.values().numel() for f in features.values())
            if need > self._input_history_buffer_size:
                self._grow_history(max(need, 2 * self._input_history_buffer_size))
        return super().profile(features)

    @torch.no_grad()
    def _grow_history(self, size: int) -> None:
        used = self._current_history_buffer_offset
        accumulator = torch.empty(size, dtype=torch.int64, device=self.device)
        accumulator[:used] = self._history_accumulator[:used]
        self._history_accumulator = accumulator
        for name, old in list(self._history_metadata.items()):
            grown = torch.zeros(size, dtype=old.dtype, device=self.device)
            grown[:used] = old[:used]
            self.register_buffer(f"_history_{name}", grown, persistent=False)
            self._history_metadata[name] = grown
        self._input_history_buffer_size = size

    def validate_state(self) -> None:
        super().validate_state()
        segments = [int(x) for x in self._output_segments_tensor.tolist() if x >= 0]
        whole = [self._output_global_offset, self._output_global_offset + self._zch_size]
        # Several ranges loaded into one module that spans them all: an unsharded model of a W-rank run.
        self._miss_segments = segments if len(segments) > 2 and [segments[0], segments[-1]] == whole else None

    def remap(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
        write_weights: torch.Tensor | None = None,
    ) -> dict[str, JaggedTensor]:
        remapped = super().remap(features, mutate_miss_lengths, write_weights)
        if self._miss_segments is None:
            return remapped
        bounds = torch.tensor(self._miss_segments, dtype=torch.int64, device=self.device)
        ranks = len(self._miss_segments) - 1
        block = -(-self.input_size() // ranks)  # the row-wise input dist's key range per rank
        out: dict[str, JaggedTensor] = {}
        for name, jt in remapped.items():
            keys = features[name].values()
            miss = jt.values() == self.output_size() - 1 + self._output_global_offset
            rank = torch.div(keys, block, rounding_mode="floor").clamp_(max=ranks - 1)
            values = torch.where(miss, bounds[rank + 1] - 1, jt.values())
            out[name] = JaggedTensor(
                values=values, lengths=jt.lengths(), offsets=jt.offsets(), weights=jt.weights_or_none()
            )
        return out


def managed_collision_ec(
    configs: list[EmbeddingConfig],
    device: torch.device | None = None,
    eviction_interval: int | dict[str, int | None] = ZCH_EVICTION_INTERVAL,
    decay_exponent: float = ZCH_DECAY_EXPONENT,
    policies: dict[str, tuple[str, float]] | None = None,
    admissions: dict[str, ZchAdmission] | None = None,
) -> ManagedCollisionEmbeddingCollection:
    """An EmbeddingCollection whose ids are 63-bit keys remapped to rows by TorchRec's zero-collision
    hashing (one ``MCHManagedCollisionModule`` per table, DistanceLFU eviction unless ``policies`` says).

    Each table of ``num_embeddings`` rows keeps its last row (one per rank when sharded row-wise) for
    keys without a row: keys never seen in training, and keys that could not be admitted because the
    table is full of more frequent ones. In eval mode nothing is admitted or evicted.

    Args:
        configs (list[EmbeddingConfig]): the zch tables; their ``num_embeddings`` are the zch sizes.
        device (torch.device | None): where the tables and the remapping buffers live (default CPU).
        eviction_interval (int | dict): steps between admissions/evictions, or per table name (a table not
            given, or given None, takes :data:`ZCH_EVICTION_INTERVAL`).
        decay_exponent (float): DistanceLFU's exponent on the steps since an id was last seen.
        policies (dict | None): per table name, ``(policy, decay_exponent)`` for :func:`eviction_policy`; a
            table not given takes DistanceLFU with ``decay_exponent``.
        admissions (dict | None): per table name, its frequency admission (:class:`ZchAdmission`); a table not
            given admits every id it sees; one given reads the admission's constant for ids without a row.

    Example::

        mc = managed_collision_ec([EmbeddingConfig(name="item", num_embeddings=1000, embedding_dim=16,
                                                   feature_names=["item"])])
        jagged, _ = mc(kjt)          # kjt: "item" keys × B rows, values are 63-bit keys
        jagged["item"].values()      # (N, 16): one row per distinct key until the table is full
    """
    device = device or torch.device("cpu")
    remap_device = torch.device("cpu") if device.type == "meta" else device
    intervals = eviction_interval if isinstance(eviction_interval, dict) else {}
    modules = {
        c.name: ZchRemapModule(
            zch_size=c.num_embeddings,
            device=remap_device,
            eviction_policy=eviction_policy(
                *(policies or {}).get(c.name, (ZCH_EVICTION_POLICY, decay_exponent))
            ),
            eviction_interval=intervals.get(c.name)
            or (ZCH_EVICTION_INTERVAL if intervals else eviction_interval),
            name=c.name,
            **({"admission": (admissions or {})[c.name]} if c.name in (admissions or {}) else {}),
        )
        for c in configs
    }
    collection = ManagedCollisionEmbeddingCollection(
        EmbeddingCollection(configs, device=device), ManagedCollisionCollection(modules, configs)
    )
    if admissions:
        hold_spare_rows(collection)
    return collection


def jagged_pool(values: torch.Tensor, lengths: torch.Tensor, mode: str = "sum") -> torch.Tensor:
    """Sum (or mean) of each row's jagged values: ``(T, D)`` with ``(B,)`` lengths → ``(B, D)``.

    Empty rows give zeros, like an EmbeddingBag.
    """
    lengths = lengths.long()
    rows = torch.arange(lengths.shape[0], device=values.device)
    seg = torch.repeat_interleave(rows, lengths, output_size=values.shape[0])
    out = torch.zeros(lengths.shape[0], values.shape[1], dtype=values.dtype, device=values.device)
    out = out.index_add(0, seg, values)
    if mode == "mean":
        out = out / lengths.clamp_min(1).to(values.dtype).unsqueeze(1)
    return out


class EmbeddingGroup(nn.Module):
    """Looks up every key a model needs: pooled ``(B, D)`` embeddings and jagged sequence embeddings.

    Tables with ``sequence=False`` live in an EmbeddingBagCollection (pooled per feature, sum or mean).
    Tables with ``sequence=True`` live in an EmbeddingCollection that serves both the history
    sub-features and the target features sharing the table by name (table ``adgroup_id`` serves
    ``adgroup_id`` and ``click_50_seq__adgroup_id``); pooled outputs of such target features are a
    jagged sum (they hold 0 or 1 id per row). TorchRec's EmbeddingCollection has one ``embedding_dim``
    for all its tables, so sequence tables of several dims (TorchEasyRec lets a sequence's sub-features
    differ) take one collection per dim: ``ec`` holds those of the first sequence table's dim (a model of
    one dim keeps its parameter names), ``ec_by_dim["d<dim>"]`` those of each further dim. Zero-collision tables (``TableSpec.zch_size``), pooled or
    sequence, live in one ManagedCollisionEmbeddingCollection (:func:`managed_collision_ec`; pooled keys
    are jagged sums too): TorchRec shards managed collision only row-wise, which its pooled
    EmbeddingBagCollection cannot do on CPU. Tables no requested key uses are not built. Weighted tables
    (``TableSpec.weights``: TorchEasyRec's ``weighted`` ids) live in a second, weighted EmbeddingBagCollection
    (TorchRec's ``is_weighted`` holds for all of a collection's tables or none): each key's ids with its weights key's
    values (float64 bits, :func:`item_floats`) as the KJT's weights, pooled ``Σ w·e``, ``mean`` ``Σ w·e / n``
    (FBGEMM's weighted MEAN, which TorchEasyRec's sharded tables run). A multi-value history key
    (``TableSpec.items``: several ids per item) is looked up id by id in its EmbeddingCollection and each item
    is the pooling of its ids' rows (:func:`pool_items`, by its id counts key), jagged by items as a one-id key.

    Args:
        tables (list[TableSpec]): tables from ``FeatureSpec.tables()``.
        pooled_keys (list[str]): KJT keys to return pooled, ``(B, D)`` each.
        sequence_keys (list[str]): KJT keys to return jagged, ``(T, D)`` values and ``(B + 1,)`` offsets;
            their tables must be sequence tables.
        pooling (dict[str, str] | None): ``"sum"`` or ``"mean"`` per pooled key (default ``"sum"``).
        device (torch.device | None): table device; ``meta`` builds without allocating.
        init (EmbeddingInit): table initialization, for the tables without their own (``TableSpec.init``).

    Example::

        # keys × batch (B = 2):       row 0       row 1
        #   user_id                   [7]         [9]
        #   adgroup_id                [3]         [5]
        #   click_50_seq__adgroup_id  [3, 8, 1]   []
        group = EmbeddingGroup(spec.tables(), ["user_id", "adgroup_id"], ["click_50_seq__adgroup_id"])
        out = group(kjt)
        out.pooled["user_id"].shape                     # (2, 16), from the EmbeddingBagCollection
        out.pooled["adgroup_id"].shape                  # (2, 16), jagged sum from the EmbeddingCollection
        out.values["click_50_seq__adgroup_id"].shape    # (3, 16): T = 3 real items
        out.offsets["click_50_seq__adgroup_id"]         # tensor([0, 3, 3])
    """

    def __init__(
        self,
        tables: list[TableSpec],
        pooled_keys: list[str],
        sequence_keys: list[str],
        pooling: dict[str, str] | None = None,
        device: torch.device | None = None,
        init: EmbeddingInit = EmbeddingInit(),
    ) -> None:
        super().__init__()
        pooling = dict(pooling or {})
        for key, mode in pooling.items():
            if mode not in POOLINGS:
                raise ValueError(f"pooling of {key!r} must be one of {list(POOLINGS)}, got {mode!r}")
        for name, keys in (("pooled_keys", pooled_keys), ("sequence_keys", sequence_keys)):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            if dup:
                raise ValueError(f"duplicate {name} {dup}")
        table_of: dict[str, TableSpec] = {}
        for t in tables:
            for f in t.feature_names:
                if f in table_of:
                    raise ValueError(f"feature {f!r} is listed by tables {table_of[f].name!r} and {t.name!r}")
                table_of[f] = t
        unknown = [k for k in [*pooled_keys, *sequence_keys] if k not in table_of]
        if unknown:
            raise ValueError(f"keys {unknown} have no embedding table; tables serve {sorted(table_of)}")
        not_seq = [k for k in sequence_keys if not table_of[k].sequence]
        if not_seq:
            raise ValueError(f"sequence keys {not_seq} look up tables that are not sequence tables")

        self.pooled_keys = list(pooled_keys)
        self.sequence_keys = list(sequence_keys)
        self._sequence = set(sequence_keys)
        self._pooling = {k: pooling.get(k, "sum") for k in pooled_keys}
        self._dims = {k: table_of[k].embedding_dim for k in [*pooled_keys, *sequence_keys]}
        wanted_pooled, wanted_seq = set(pooled_keys), set(sequence_keys)

        bag_configs: list[EmbeddingBagConfig] = []
        weighted_configs: list[EmbeddingBagConfig] = []
        seq_configs: list[EmbeddingConfig] = []
        zch_configs: list[EmbeddingConfig] = []
        for t in tables:
            if t.sequence or t.zch_size is not None:
                feats = [f for f in t.feature_names if f in wanted_pooled or f in wanted_seq]
                if feats:
                    (zch_configs if t.zch_size is not None else seq_configs).append(
                        EmbeddingConfig(
                            name=t.name,
                            num_embeddings=t.num_embeddings,
                            embedding_dim=t.embedding_dim,
                            feature_names=feats,
                            init_fn=init.init_fn(t.num_embeddings, t.embedding_dim, t.init, t.name),
                            data_type=DATA_TYPES[t.data_type],
                        )
                    )
                continue
            feats = [f for f in t.feature_names if f in wanted_pooled]
            if not feats:
                continue
            modes = {self._pooling[f] for f in feats}
            if len(modes) != 1:
                raise ValueError(
                    f"table {t.name!r} is pooled by features {feats} with different modes {sorted(modes)}; "
                    "an EmbeddingBag table has one pooling mode"
                )
            # A weighted table pools by sum; mean divides by the id count after (torch's embedding_bag takes
            # per-id weights in sum mode only, and FBGEMM's weighted mean is that sum over the count).
            (weighted_configs if t.weights else bag_configs).append(
                EmbeddingBagConfig(
                    name=t.name,
                    num_embeddings=t.num_embeddings,
                    embedding_dim=t.embedding_dim,
                    feature_names=feats,
                    pooling=PoolingType.SUM if t.weights else POOLINGS[modes.pop()],
                    init_fn=init.init_fn(t.num_embeddings, t.embedding_dim, t.init, t.name),
                    data_type=DATA_TYPES[t.data_type],
                )
            )
        dims = {c.embedding_dim for c in zch_configs}
        if len(dims) > 1:
            raise ValueError(
                f"zch tables {[c.name for c in zch_configs]} have different dims {sorted(dims)}; "
                "one ManagedCollisionEmbeddingCollection needs one dim"
            )
        by_dim: dict[int, list[EmbeddingConfig]] = {}
        for c in seq_configs:
            by_dim.setdefault(c.embedding_dim, []).append(c)
        seq_groups = list(by_dim.values())  # the first sequence table's dim first
        self.ebc = EmbeddingBagCollection(bag_configs, device=device) if bag_configs else None
        self.weighted_ebc = (
            EmbeddingBagCollection(weighted_configs, is_weighted=True, device=device)
            if weighted_configs
            else None
        )
        self.ec = EmbeddingCollection(seq_groups[0], device=device) if seq_groups else None
        self.ec_by_dim = nn.ModuleDict(
            {f"d{g[0].embedding_dim}": EmbeddingCollection(g, device=device) for g in seq_groups[1:]}
        )
        intervals = {t.name: t.zch_eviction_interval for t in tables}
        policies = {t.name: (t.zch_eviction_policy, t.zch_decay_exponent) for t in tables}
        admissions = {t.name: t.zch_admission for t in tables if t.zch_admission is not None}
        self.mc_ec = (
            managed_collision_ec(zch_configs, device, intervals, policies=policies, admissions=admissions)
            if zch_configs
            else None
        )
        self._admission = bool(admissions) and self.mc_ec is not None
        weights_of = {k: w for t in tables for k, w in t.weights.items()}
        # Multi-value history keys (TableSpec.items): their id counts key and whether an item's ids are averaged.
        self._item_counts: dict[str, str] = {
            k: v[0] for t in tables for k, v in t.items.items() if k in wanted_seq
        }
        self._item_mean: dict[str, bool] = {
            k: v[1] == "mean" for t in tables for k, v in t.items.items() if k in wanted_seq
        }
        self._wbc_keys = [f for c in weighted_configs for f in c.feature_names]
        self._wbc_mean = [i for i, k in enumerate(self._wbc_keys) if self._pooling[k] == "mean"]
        # The KJT keys each collection reads, in its order: "ebc", "mc_ec", "wbc", "wbc_weights" and one
        # entry per EmbeddingCollection ("ec", "ec_by_dim.d<dim>", the module's name in this group).
        self._ec_names = ["ec", *(f"ec_by_dim.{d}" for d in self.ec_by_dim)]
        self._keys: dict[str, list[str]] = {
            "ebc": [f for c in bag_configs for f in c.feature_names],
            **{n: [f for c in g for f in c.feature_names] for n, g in zip(self._ec_names, seq_groups)},
            "mc_ec": [f for c in zch_configs for f in c.feature_names],
            "wbc": self._wbc_keys,
            "wbc_weights": [weights_of[k] for k in self._wbc_keys],
        }
        self._permutes: dict[tuple[str, ...], dict[str, list[int]]] = {}
        # Tables built here that the optimizer must not move (TableSpec.trainable false).
        built = {c.name for c in [*bag_configs, *weighted_configs, *seq_configs, *zch_configs]}
        self.frozen_tables = sorted(t.name for t in tables if not t.trainable and t.name in built)

    def embedding_dim(self, key: str) -> int:
        """Embedding width of a requested key."""
        return self._dims[key]

    def tables(self) -> dict[str, list[str]]:
        """Which collection holds which tables: ``{"ebc": [...], "weighted_ebc": [...], "ec": [...], "mc_ec": [...]}``,
        plus ``"ec_by_dim.d<dim>": [...]`` per further sequence dim."""
        ebc = [c.name for c in self.ebc.embedding_bag_configs()] if self.ebc is not None else []
        wbc = (
            [c.name for c in self.weighted_ebc.embedding_bag_configs()]
            if self.weighted_ebc is not None
            else []
        )
        ec = [c.name for c in self.ec.embedding_configs()] if self.ec is not None else []
        by_dim = {
            f"ec_by_dim.{d}": [c.name for c in m.embedding_configs()] for d, m in self.ec_by_dim.items()
        }
        mc = (
            [c.name for c in self.mc_ec._embedding_module.embedding_configs()]
            if self.mc_ec is not None
            else []
        )
        return {"ebc": ebc, "weighted_ebc": wbc, "ec": ec, **by_dim, "mc_ec": mc}

    def _select(self, kjt: KeyedJaggedTensor, which: str) -> KeyedJaggedTensor:
        """The sub-KJT holding collection ``which``'s keys in order; the index lists are computed once per key layout."""
        layout = tuple(kjt.keys())
        if layout not in self._permutes:
            pos = {k: i for i, k in enumerate(layout)}
            missing = [k for keys in self._keys.values() for k in keys if k not in pos]
            if missing:
                raise ValueError(f"the KeyedJaggedTensor lacks keys {missing}; it has {list(layout)}")
            self._permutes[layout] = {name: [pos[k] for k in keys] for name, keys in self._keys.items()}
        indices = self._permutes[layout][which]
        if indices == list(range(len(layout))):
            return kjt
        return kjt.permute(indices)

    def _weighted(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        """The weighted tables' pooled keys: their ids with their weights keys' values as the KJT's weights."""
        ids = self._select(kjt, "wbc")
        weights = self._select(kjt, "wbc_weights")  # one per id: a key and its weights have one length
        weighted = KeyedJaggedTensor(
            keys=self._wbc_keys,
            values=ids.values(),
            weights=item_floats(weights.values()).squeeze(1),
            lengths=ids.lengths(),
            stride=kjt.stride(),
        )
        out = self.weighted_ebc(weighted).to_dict()
        if self._wbc_mean:
            counts = ids.lengths().view(len(self._wbc_keys), -1).clamp_min(1)
            for i in self._wbc_mean:
                key = self._wbc_keys[i]
                out[key] = out[key] / counts[i].to(out[key].dtype).unsqueeze(1)
        return out

    def forward(self, kjt: KeyedJaggedTensor) -> EmbeddingLookup:
        """
        Args:
            kjt (KeyedJaggedTensor): a batch's sparse features (extra keys are ignored).

        Returns:
            EmbeddingLookup: pooled ``(B, D)`` per pooled key; ``(T, D)`` values and ``(B + 1,)`` offsets
            per sequence key.
        """
        pooled: dict[str, torch.Tensor] = {}
        values: dict[str, torch.Tensor] = {}
        offsets: dict[str, torch.Tensor] = {}
        if self.ebc is not None:
            pooled.update(self.ebc(self._select(kjt, "ebc")).to_dict())
        if self.weighted_ebc is not None:
            pooled.update(self._weighted(kjt))
        # Looked up by name each call: DistributedModelParallel replaces the collections with sharded ones.
        # Indexed key by key: a sharded collection returns a lazy awaitable of the dict.
        jagged: dict[str, JaggedTensor] = {}
        for name in self._ec_names if self.ec is not None else []:
            ec = self.ec if name == "ec" else self.ec_by_dim[name.split(".")[1]]
            out = ec(self._select(kjt, name))
            jagged.update({key: out[key] for key in self._keys[name]})
        if self.mc_ec is not None:
            zch_kjt = self._select(kjt, "mc_ec")
            remapped, _ = self.mc_ec(zch_kjt)
            zch_jagged = {key: remapped[key] for key in self._keys["mc_ec"]}
            if self._admission and isinstance(self.mc_ec, ManagedCollisionEmbeddingCollection):
                zch_jagged = constant_without_row(self.mc_ec, zch_kjt, zch_jagged)  # (sharded: in its lookup)
            jagged.update(zch_jagged)
        for key, jt in jagged.items():
            if key in self._pooling:
                pooled[key] = jagged_pool(jt.values(), jt.lengths(), self._pooling[key])
            if key in self._sequence and key in self._item_counts:  # an item: the pooling of its ids
                per_item = kjt[self._item_counts[key]]
                values[key] = pool_items(jt.values(), per_item.values(), self._item_mean[key])
                offsets[key] = per_item.offsets().long()
            elif key in self._sequence:
                values[key] = jt.values()
                offsets[key] = jt.offsets().long()
        return EmbeddingLookup(
            pooled={k: pooled[k] for k in self.pooled_keys},
            values={k: values[k] for k in self.sequence_keys},
            offsets={k: offsets[k] for k in self.sequence_keys},
        )


def pooled_group(
    tables: list[TableSpec],
    keys: Sequence[str],
    pooling: dict[str, str] | None = None,
    device: torch.device | None = None,
) -> tuple[EmbeddingGroup, dict[str, int]]:
    """The lookup of a model over pooled ``keys`` only (one group's, as DCN, MaskNet and xDeepFM read) and each
    key's embedding width."""
    embeddings = EmbeddingGroup(tables, list(keys), [], pooling, device=device)
    return embeddings, {k: embeddings.embedding_dim(k) for k in keys}
