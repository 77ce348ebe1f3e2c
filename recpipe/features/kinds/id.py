"""Kind ``id``: a categorical column → one pooled KJT key, its ids mapped by hash, mod, a vocabulary (listed,
from a file, or fitted with ``min_freq``) or zero-collision keys; pre-encoded ids used as they are (a zch
feature's keyed as an integer raw id is, :func:`recpipe.features.columns.map_ids`).

Multi-value ids, as TorchEasyRec's ``id_feature`` reads them (docs/source/feature/feature.md, feature.proto):
a text value holds several ids joined by ``separator`` (default ``"\\x1d"``), a list column (Parquet's
``list<string>`` / ``list<int64>``) holds them as a list; each becomes one value of the row's pooled key
(``sum`` / ``mean`` pooling). An empty piece is no id; a row without any id takes ``default_value`` (one id)
when it is set, else has none. ``value_dim`` keeps the first ``value_dim`` ids of a row (0: all of them).
``default_bucketize_value`` makes a vocabulary's ids its 0-based positions, an out-of-vocabulary value taking
that id (TorchEasyRec's rule), instead of recpipe's positions + 1 with 0 for the unknown.

Weighted ids (``weighted: true``, TorchEasyRec's ``k1:w1\x1dk2:w2``; tzrec/features/id_feature_test.py): each
piece is an id and its weight split at its last ``:``, a list column holds ``k:w`` texts, a map column ids →
weights. The weights (float32) go to a KJT key of their own, ``<name>__weights``, one per id as float64 bits
(:attr:`~recpipe.features.spec.SparseFeature.weights_key`). A piece without ``:`` or whose weight is not a finite
number is a bad row (TorchEasyRec leaves it undefined); a row that takes ``default_value`` weighs it 1.0
(TorchEasyRec's ``fill_null([1.0])``).

Example::

    # separator "\\x1d", vocab_list [a, b, c], default_bucketize_value 0
    ids(spec.feature("tags"), pa.record_batch({"tags": ["b\\x1dc", "", "z"]}))
    # values [1, 2, 0], lengths [2, 0, 1]
    # weighted, num_buckets 100: "12:0.9\\x1d7:0.2" → values [12, 7], lengths [2], weights [0.9, 0.2]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import MULTI_VALUE_SEPARATOR, IdFeatureConfig, SubFeatureConfig
from recpipe.data.types import DataError
from recpipe.features.columns import (
    BadRows,
    as_numpy,
    dictionary_cached,
    hash_ids,
    integral_ids,
    is_string,
    map_ids,
    to_float,
)
from recpipe.features.hashing import fnv1a64, fnv1a64_ranges, to_string_array
from recpipe.features.kinds.base import (
    ANY,
    IDS,
    LIST_OF,
    ColumnKind,
    FeatureKind,
    FitNeeds,
    SparseOut,
    SpecParts,
)
from recpipe.features.spec import FeatureSpecError, IdMapping, SparseFeature, ZchAdmission
from recpipe.features.text import (
    byte_positions,
    cut_ranges,
    gather,
    one_byte,
    split_once,
    split_pieces,
    split_ranges,
    text_ranges,
)


def id_mapping(cfg: IdFeatureConfig | SubFeatureConfig, encoded: bool = False) -> IdMapping:
    """The :class:`IdMapping` an id (or history sub-feature) config asks for; a ``min_freq`` vocabulary starts
    empty (fitting fills it)."""
    if encoded:
        # TorchEasyRec's FG_NONE (tzrec/features/feature.py, _parse_fg_encoded_sparse_feature_impl): the
        # column holds the ids FG wrote, cast to int64 and used as they are; num_buckets/hash_bucket_size
        # only size the table. recpipe checks each id against that size (TorchEasyRec does not). A zch
        # feature's ids are the raw ids its managed-collision module remaps (mc_module): no range to check.
        size = cfg.num_buckets or cfg.hash_bucket_size
        if size is None:
            raise FeatureSpecError(
                f"feature {cfg.name!r}: pre-encoded input (data.fg_encoded) needs num_buckets or "
                "hash_bucket_size (the table size, or with zch the default zch_size); a vocabulary maps raw values"
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
    else:  # min_freq: filled in by fit
        vocab = []
    dbv = getattr(cfg, "default_bucketize_value", None)
    if dbv is not None:  # TorchEasyRec's ids: 0-based positions, the unknown value takes dbv
        if dbv >= len(vocab):
            raise FeatureSpecError(
                f"feature {cfg.name!r}: default_bucketize_value {dbv} is not below the vocabulary's "
                f"{len(vocab)} entries"
            )
        return IdMapping("vocab", len(vocab), vocab=vocab, default_value=cfg.default_value, unk_id=dbv)
    unk = cfg.default_bucket if cfg.default_bucket is not None else 0
    return IdMapping("vocab", len(vocab) + 1, vocab=vocab, default_value=cfg.default_value, unk_id=unk)


def multi_params(cfg: IdFeatureConfig) -> dict:
    """The entry's ``params``: the multi-value settings that differ from TorchEasyRec's defaults (none for a
    plain id feature, so its fg.json and digest read as before)."""
    params: dict = {}
    if cfg.separator != MULTI_VALUE_SEPARATOR:
        params["separator"] = cfg.separator
    if cfg.value_dim:
        params["value_dim"] = cfg.value_dim
    if cfg.default_bucketize_value is not None:
        params["default_bucketize_value"] = cfg.default_bucketize_value
    if getattr(cfg, "weighted", False):
        params["weights"] = cfg.name + WEIGHTS_SUFFIX
    return params


def id_entry(
    key: str,
    column: str,
    cfg: IdFeatureConfig | SubFeatureConfig,
    kind: str,
    encoded: bool = False,
    sequence: str | None = None,
) -> SparseFeature:
    """The KJT key of an id config (a feature of its own, or a history's sub-feature ``sequence``): its mapping,
    its table (shared by ``embedding_name``) and zch."""
    own = isinstance(cfg, IdFeatureConfig)
    return SparseFeature(
        name=key,
        column=column,
        mapping=id_mapping(cfg, encoded=encoded),
        table=cfg.embedding_name or cfg.name,
        embedding_dim=cfg.embedding_dim,
        pooling=cfg.pooling if own else "sum",  # a history is never pooled here
        sequence=sequence,
        **zch_settings(cfg),
        kind=kind,
        params=multi_params(cfg) if own else {},
    )


def zch_settings(cfg: Any) -> dict[str, Any]:
    """A SparseFeature's zch fields from an id-mapping config (``zch``, ``zch_size``, the eviction interval,
    policy, decay exponent and frequency admission, their unset values read as the spec's defaults)."""
    return {
        "zch": cfg.zch,
        "zch_size": cfg.zch_size,
        "zch_eviction_interval": cfg.zch_eviction_interval,
        "zch_eviction_policy": cfg.zch_eviction_policy or "distance_lfu",
        "zch_decay_exponent": 1.0 if cfg.zch_decay_exponent is None else cfg.zch_decay_exponent,
        "zch_admission": zch_admission(cfg),
    }


def zch_admission(cfg: Any) -> ZchAdmission | None:
    """The SparseFeature's :class:`ZchAdmission` from a config's ``zch_admission`` (None when unset)."""
    a = getattr(cfg, "zch_admission", None)
    return None if a is None else ZchAdmission(a.threshold, a.counter_capacity, a.default_value)


# The KJT key of a weighted id's weights: <name>__weights.
WEIGHTS_SUFFIX = "__weights"


def build(f: IdFeatureConfig, parts: SpecParts) -> None:
    entry = id_entry(f.name, f.source_column, f, "id", encoded=parts.encoded)
    parts.sparse.append(entry)
    if entry.weights_key is not None:  # no table: FG fills it with the ids' weights
        parts.sparse.append(
            SparseFeature(
                name=entry.weights_key,
                column=entry.column,
                mapping=entry.mapping,
                table=entry.weights_key,
                embedding_dim=1,
                kind="id",
                params={"weights_of": entry.name},
            )
        )


def needs(f: IdFeatureConfig) -> FitNeeds:
    return FitNeeds(vocab={f.name: f.min_freq}) if f.min_freq is not None else FitNeeds()


# ------------------------------------------------------------------------------------ multi-value ids
def _has(arr: pa.Array, separator: str) -> bool:
    """Whether any value of a string column holds ``separator`` (one scan of the bytes of its rows)."""
    data = arr.buffers()[2]
    if data is None or not len(arr):
        return False
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], width)
    start, end = int(offsets[arr.offset]), int(offsets[arr.offset + len(arr)])
    return separator.encode() in data.slice(start, end - start).to_pybytes()


def _list_values(values: pa.Array) -> pa.Array:
    """A list column's ids by the raw-value contract: null and "" elements are no id, integral floats ints."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_null(values.type):  # lists that are all empty or of nulls (pandas' [] and [None])
        return pa.nulls(len(values), pa.string())
    if is_string(values.type):
        values = pc.if_else(pc.equal(values, ""), pa.scalar(None, values.type), values)
    elif pa.types.is_floating(values.type):
        ids = integral_ids(values)
        if ids is not None:
            values = ids
        else:
            values = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
            values = pc.cast(values, pa.string())
    return values


def split_values(arr: pa.Array, separator: str) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Every id of a multi-value column: ``(values, row of each value, count per row)``.

    A text value is split by ``separator``, a list column is flattened; null, "" and empty pieces are no id.
    Values keep their row order (a row's ids in the order written).

    Example::

        split_values(pa.array(["a\\x1db", None, "\\x1dc"]), "\\x1d")   # (["a", "b", "c"], [0, 0, 2], [2, 0, 1])
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        flat = _list_values(pc.list_flatten(arr))
        counts = as_numpy(pc.fill_null(pc.list_value_length(arr), 0)).astype(np.int64)
    elif is_string(arr.type) and (split := split_pieces(arr, separator)) is not None:
        rows, flat = split
        return flat, rows, np.bincount(rows, minlength=n).astype(np.int64)
    elif is_string(arr.type):
        items = pc.split_pattern(pc.fill_null(arr, "") if arr.null_count else arr, pattern=separator)
        flat = pc.list_flatten(items)
        flat = pc.if_else(pc.equal(flat, ""), pa.scalar(None, flat.type), flat)
        counts = as_numpy(pc.list_value_length(items)).astype(np.int64)
    else:  # one id per row (an integer column): its nulls are rows without an id
        flat, counts = arr, np.ones(n, np.int64)
    rows = np.repeat(np.arange(n), counts)
    if flat.null_count:
        keep = ~as_numpy(flat.is_null())
        flat, rows = flat.filter(pa.array(keep)), rows[keep]
        counts = np.bincount(rows, minlength=n).astype(np.int64)
    return flat, rows, counts


def first_values(rows: np.ndarray, counts: np.ndarray, value_dim: int) -> np.ndarray | None:
    """The positions of the first ``value_dim`` values of each row (None when no row has more)."""
    if not value_dim or not len(counts) or counts.max() <= value_dim:
        return None
    starts = np.cumsum(counts) - counts
    return np.flatnonzero(np.arange(len(rows)) - starts[rows] < value_dim)


def _default_take(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Where every value goes when rows without one get one default value appended at position ``N``:
    ``(take into values + [default], new rows, new counts)``, or None when every row has a value."""
    empty = counts == 0
    if not empty.any():
        return None
    new_counts = np.where(empty, 1, counts)
    new_rows = np.repeat(np.arange(len(counts)), new_counts)
    within = np.arange(len(new_rows)) - np.repeat(np.cumsum(new_counts) - new_counts, new_counts)
    old_start = np.cumsum(counts) - counts
    take = np.where(empty[new_rows], int(counts.sum()), old_start[new_rows] + within)
    return take, new_rows, new_counts


def with_default(
    flat: pa.Array, rows: np.ndarray, counts: np.ndarray, default: str | None
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Rows without a value get ``default`` as their one value (TorchEasyRec's ``default_value``)."""
    placed = None if default is None else _default_take(counts)
    if placed is None:
        return flat, rows, counts
    take, new_rows, new_counts = placed
    joined = pa.concat_arrays([to_string_array(flat).cast(pa.string()), pa.array([default], pa.string())])
    return joined.take(pa.array(take)), new_rows, new_counts


def vocab_positions(values: pa.Array, vocab: list[str], unknown: int) -> np.ndarray:
    """TorchEasyRec's vocabulary ids under ``default_bucketize_value``: the 0-based position of each value in
    ``vocab``, ``unknown`` for a value outside it."""
    s = to_string_array(values)
    idx = pc.index_in(s, value_set=pa.array(vocab, type=pa.string()).cast(s.type))
    return as_numpy(pc.fill_null(idx, unknown)).astype(np.int64)


def map_values(
    flat: pa.Array, rows: np.ndarray, f: SparseFeature, column: str
) -> tuple[np.ndarray, BadRows | None]:
    """The table rows of every value of a key (:func:`map_ids`, or vocabulary positions under
    ``default_bucketize_value``); a bad value is named by its row."""
    dbv = f.params.get("default_bucketize_value")
    if dbv is not None:
        return vocab_positions(flat, f.mapping.vocab or [], int(dbv)), None
    ids, _, bad = map_ids(flat, f.mapping, column, f.zch)
    if bad is not None:
        bad = BadRows(rows[bad.rows], column, bad.expected, flat, bad.rows)
    return ids, bad


def ids(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    """The ids of each row: one where the column has one value (``default_value`` fills nulls, else the row has
    none), several where it holds ``separator``-joined values or a list; a weighted id's weights too."""
    arr = batch.column(f.column)
    separator = f.params.get("separator", MULTI_VALUE_SEPARATOR)
    # A shuffled window's encoded strings (recpipe.train.data.hashed_id_columns): map_ids hashes each value once.
    if pa.types.is_dictionary(arr.type):
        encoded_ok = (
            f.mapping.kind == "hash" and f.weights_key is None and "default_bucketize_value" not in f.params
        )
        if encoded_ok and not dictionary_cached(
            arr.dictionary, f.column, ("has", separator), lambda d: _has(d, separator)
        ):
            values, present, bad = map_ids(arr, f.mapping, f.column, f.zch)
            return (values if present.all() else values[present]), present.astype(np.int32), bad
        arr = arr.dictionary_decode()
    if f.weights_key is not None:
        return weighted_ids(f, arr, separator)
    multi = pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
    multi = multi or (is_string(arr.type) and _has(arr, separator))
    if not multi and "default_bucketize_value" not in f.params:
        values, present, bad = map_ids(arr, f.mapping, f.column, f.zch)
        return (values if present.all() else values[present]), present.astype(np.int32), bad
    if f.mapping.kind == "hash" and is_string(arr.type) and one_byte(separator) is not None:
        # The pieces hashed on their byte ranges (as split_values cuts them): none becomes a string.
        data, rows, ps, pe, counts = _text_pieces(arr, separator)
        values, counts, _ = hashed_values(f, fnv1a64_ranges(data, ps, pe), rows, counts)
        return values, counts.astype(np.int32), None
    flat, rows, counts = split_values(arr, separator)
    flat, rows, counts = with_default(flat, rows, counts, f.mapping.default_value)
    keep = first_values(rows, counts, int(f.params.get("value_dim", 0)))
    if keep is not None:
        flat, rows = flat.take(pa.array(keep)), rows[keep]
        counts = np.minimum(counts, int(f.params["value_dim"]))
    values, bad = map_values(flat, rows, f, f.column)
    return values, counts.astype(np.int32), bad


def fit_values(f: SparseFeature, batch: pa.RecordBatch) -> pa.Array:
    """The values a fitted vocabulary (``min_freq``) counts: every id of every row, as text."""
    separator = f.params.get("separator", MULTI_VALUE_SEPARATOR)
    if f.weights_key is not None:
        keys, _, _, _, _ = weighted_pairs(batch.column(f.column), separator, f.column)
        return to_string_array(keys)
    flat, _, _ = split_values(batch.column(f.column), separator)
    return to_string_array(flat)


# ------------------------------------------------------------------------------------- weighted ids
# A piece "k:w": the id is everything before the last ':' (non-empty), the weight the text after it.
PAIR_EXPECTED = "ids with weights 'k:w' (a finite number after the last ':')"


def weighted_pairs(
    arr: pa.Array, separator: str, column: str
) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, BadRows | None]:
    """Every ``(id, weight)`` of a weighted column: ``(ids, weights float64, row of each, count per row, bad)``.

    A text value is split by ``separator`` into ``k:w`` pieces (empty pieces are none), a list column holds
    ``k:w`` texts, a map column ids → weights. A piece that is not ``k:w`` with a finite weight is a bad row
    (its id reads ``"0"``, its weight 0, so the arrays stay aligned).

    Example::

        weighted_pairs(pa.array(["12:0.9\x1d7:0.2", None]), "\x1d", "tags")
        # (["12", "7"], [0.9, 0.2], [0, 0], [2, 0], None)
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_map(arr.type):
        pairs = pa.StructArray.from_arrays([arr.keys, arr.items], ["key", "value"])
        lists = pa.ListArray.from_arrays(arr.offsets, pairs, mask=arr.is_null())
        entries = pc.list_flatten(lists)
        keys, w = entries.field("key"), entries.field("value")
        counts = as_numpy(pc.fill_null(pc.list_value_length(lists), 0)).astype(np.int64)
        rows = np.repeat(np.arange(len(arr)), counts)
        weights, bad = to_float(w, np.nan, column)
        if bad is not None:
            bad = BadRows(rows[bad.rows], column, PAIR_EXPECTED, arr, rows[bad.rows])
        return keys, weights, rows, counts, bad
    if not (is_string(arr.type) or pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise DataError(
            f"column {column!r}: a weighted id column holds 'k:w' text, a list of 'k:w' texts or a map of "
            f"ids to weights, got {arr.type}"
        )
    text = _text_pairs(arr, separator, column)
    if text is not None:
        data, ps, pe, cut_at, rows, counts, weights, bad = text
        return gather(arr.type, data, ps, cut_at), weights, rows, counts, bad
    flat, rows, counts = split_values(arr, separator)
    flat = to_string_array(flat)
    # Each piece cut once at its last ':' (a piece without one is all id, no weight: a bad row).
    cut = split_once(flat, ":", last=True)
    if cut is None:  # flat is text and ":" one byte: cannot happen
        raise AssertionError(f"weighted ids of column {column!r}: {flat.type} is not text")
    keys, weight_text, pair = cut
    weights, bad = _pair_weights(weight_text, pair, as_numpy(pc.equal(keys, "")), rows, column)
    return (
        keys,
        weights,
        rows,
        counts,
        None if bad is None else BadRows(bad.rows, column, PAIR_EXPECTED, flat, bad.arr_rows),
    )


def _text_pieces(arr: pa.Array, separator: str) -> tuple[np.ndarray, ...]:
    """``(data, rows, piece starts, piece ends, counts)`` of text split at a one-byte ``separator`` on byte
    ranges, the pieces as :func:`split_values` cuts them (empty ones and null rows give none)."""
    data, starts, ends = text_ranges(arr)
    rows, ps, pe = split_ranges(byte_positions(data, starts, ends, separator), starts, ends)
    return data, rows, ps, pe, np.bincount(rows, minlength=len(arr)).astype(np.int64)


def _text_pairs(
    arr: pa.Array, separator: str, column: str
) -> (
    tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, BadRows | None]
    | None
):
    """:func:`weighted_pairs` of text at a one-byte separator on byte ranges: ``(data, piece starts, piece
    ends, cut, rows, counts, weights, bad)``, each id ``data[start:cut]`` (pieces cut at their last ':' without
    being copied first); None for other columns or separators."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (is_string(arr.type) and one_byte(separator) is not None):
        return None
    data, rows, ps, pe, counts = _text_pieces(arr, separator)
    cut_at, pair = cut_ranges(byte_positions(data, ps, pe, ":"), ps, pe, last=True)
    weights, bad = _pair_weights(gather(arr.type, data, cut_at + pair, pe), pair, cut_at == ps, rows, column)
    if bad is not None:  # the pieces as text, made only for a bad row's message
        bad = BadRows(bad.rows, column, PAIR_EXPECTED, gather(arr.type, data, ps, pe), bad.arr_rows)
    return data, ps, pe, cut_at, rows, counts, weights, bad


def _pair_weights(
    weight_text: pa.Array, pair: np.ndarray, no_key: np.ndarray, rows: np.ndarray, column: str
) -> tuple[np.ndarray, BadRows | None]:
    """The weights of the pieces (0 for a bad one: no ':', no id before it, or no finite number after it) and
    the bad pieces (``rows``: their rows, ``arr_rows``: the pieces)."""
    weights, bad_w = to_float(weight_text, 0.0, column)
    bad = ~pair | no_key
    if bad_w is not None:
        bad[bad_w.rows] = True
    if not bad.any():
        return weights, None
    at = np.flatnonzero(bad)
    return np.where(bad, 0.0, weights), BadRows(rows[at], column, PAIR_EXPECTED, None, at)


def hashed_values(
    f: SparseFeature,
    hashes: np.ndarray,
    rows: np.ndarray,
    counts: np.ndarray,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The ids of a ``hash`` mapping's values from their FNV-1a 64 hashes, as :func:`with_default` (a default
    weighs 1.0), :func:`first_values` and :func:`map_values` place and map the values themselves:
    ``(ids, counts, weights)``."""
    placed = None if f.mapping.default_value is None else _default_take(counts)
    if placed is not None:
        take, rows, counts = placed
        hashes = np.append(hashes, fnv1a64(pa.array([f.mapping.default_value], pa.string())))[take]
        weights = None if weights is None else np.append(weights, 1.0)[take]
    value_dim = int(f.params.get("value_dim", 0))
    keep = first_values(rows, counts, value_dim)
    if keep is not None:
        hashes, counts = hashes[keep], np.minimum(counts, value_dim)
        weights = None if weights is None else weights[keep]
    return hash_ids(hashes, f.mapping, f.zch), counts, weights


def weighted_ids(f: SparseFeature, arr: pa.Array, separator: str) -> SparseOut:
    """A weighted id's ids, lengths, bad rows and the weights key's values (each id's float32 weight as
    float64 bits, :func:`~recpipe.models.blocks.item_floats.item_floats` reads them back)."""
    text = _text_pairs(arr, separator, f.column) if f.mapping.kind == "hash" else None
    if text is not None:  # the ids hashed on their byte ranges: none becomes a string
        data, ps, _, cut_at, rows, counts, weights, bad = text
        ids, counts, weights = hashed_values(f, fnv1a64_ranges(data, ps, cut_at), rows, counts, weights)
        assert weights is not None
        return ids, counts.astype(np.int32), bad, _weight_bits(weights)
    keys, weights, rows, counts, bad = weighted_pairs(arr, separator, f.column)
    placed = None if f.mapping.default_value is None else _default_take(counts)
    if placed is not None:  # a row without ids takes default_value, weighing 1.0
        take, rows, counts = placed
        keys = pa.concat_arrays(
            [to_string_array(keys).cast(pa.string()), pa.array([f.mapping.default_value], pa.string())]
        )
        keys, weights = keys.take(pa.array(take)), np.append(weights, 1.0)[take]
    keep = first_values(rows, counts, int(f.params.get("value_dim", 0)))
    if keep is not None:
        keys, rows, weights = keys.take(pa.array(keep)), rows[keep], weights[keep]
        counts = np.minimum(counts, int(f.params["value_dim"]))
    values, map_bad = map_values(keys, rows, f, f.column)
    if bad is None or map_bad is None:
        bad = bad or map_bad
    else:  # both: one BadRows naming each check, its rows the union
        bad = BadRows(
            np.concatenate([bad.rows, map_bad.rows]), f.column, f"{bad.expected}; {map_bad.expected}", arr
        )
    return values, counts.astype(np.int32), bad, _weight_bits(weights)


def _weight_bits(weights: np.ndarray) -> np.ndarray:
    return weights.astype(np.float32).astype(np.float64).view(np.int64)


def column(f: SparseFeature) -> tuple[ColumnKind, str]:
    if f.weights_key is not None:
        return "text", ANY
    return "id", IDS + LIST_OF if f.mapping.kind in ("mod", "identity") else ANY


KIND = FeatureKind(name="id", build=build, column=column, needs=needs, sparse=ids, fit_values=fit_values)
