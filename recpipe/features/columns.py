"""Arrow column primitives of FG: ids from raw values (mod / hash / vocabulary / zch keys), floats
with their bad rows, and the :class:`BadRows` record every check returns. numpy and pyarrow only."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.data.types import DataError
from recpipe.features.hashing import fnv1a64, to_string_array, zch_keys_from_hashes, zch_keys_from_ints
from recpipe.features.spec import IdMapping

UINT_EXPECTED = "a non-negative integer id below 1e18"
_FLOAT_RE = r"^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"


@dataclass
class BadRows:
    """Rows of a batch that failed one check, for :class:`~recpipe.features.fg.BadRowError` (named by the
    first) or for counting under ``on_bad_row="skip"``."""

    rows: np.ndarray  # 0-based row indices within the batch
    column: str
    expected: str
    arr: pa.Array | None = None  # values aligned with rows, for the message
    arr_rows: np.ndarray | None = None  # position in ``arr`` of each bad row (default: the row itself)


# The magnitude below which an integral float64 is the integer it was written from: float64 holds every integer up
# to 2**53 and only some past it, so a float id of 2**53 or more (pandas writes an int64 column with nulls as
# float64) may have lost its last digits and is not taken as an integer id (a mod mapping refuses its text).
MAX_EXACT_INT = 2.0**53


def integral_ids(arr: pa.Array) -> pa.Array | None:
    """A float column as int64 ids when every value is integral (``123.0`` is id 123; NaN and null are null),
    else None (the raw-value contract's ``123 == "123" == 123.0``)."""
    x = arr.to_numpy(zero_copy_only=False)
    present = ~np.isnan(x)
    v = x[present]
    if not np.all((v == np.floor(v)) & (np.abs(v) < MAX_EXACT_INT)):
        return None
    out = np.zeros(len(x), np.int64)
    out[present] = v.astype(np.int64)
    return pa.array(out, mask=~present)


def as_numpy(arr: pa.Array) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


# What FG computed from a dictionary array's dictionary (its ids under a mapping, whether it holds a separator or
# an empty string): a shuffled training window's string columns are dictionary-encoded once
# (:class:`~recpipe.data.shuffle.ShuffledView`) and every step's rows share that dictionary, so each distinct value
# is hashed once per window instead of once per step. Per thread (a data worker reads its own windows) and per
# (column, what), only the latest dictionary is kept: memory stays one window's dictionaries whatever the number of
# columns, and a thread's entries go with it. An entry holds the dictionary itself, so its buffers (the key) cannot
# be freed and reused by another array while the entry lives.
_DICTIONARY_CACHE = threading.local()


def dictionary_cached(
    dictionary: pa.Array, column: str, what: Hashable, compute: Callable[[pa.Array], Any]
) -> Any:
    """``compute(dictionary)``, computed once while ``dictionary`` is the latest of ``column`` and ``what`` in
    this thread."""
    key = (
        tuple(b.address if b is not None else 0 for b in dictionary.buffers()),
        dictionary.offset,
        len(dictionary),
        str(dictionary.type),
    )
    entries: dict[tuple[str, Hashable], tuple[tuple, pa.Array, Any]] = _DICTIONARY_CACHE.__dict__.setdefault(
        "entries", {}
    )
    hit = entries.get((column, what))
    if hit is not None and hit[0] == key:
        return hit[2]
    value = compute(dictionary)
    entries[(column, what)] = (key, dictionary, value)
    return value


def is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def present_mask(arr: pa.Array) -> np.ndarray:
    return np.ones(len(arr), bool) if arr.null_count == 0 else ~as_numpy(arr.is_null())


def parse_uint(arr: pa.Array, byte_len: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decimal strings → ``(int64 values, ok)``; ``ok`` is False for nulls, non-digits, empty or > 18 digits."""
    if byte_len is None:
        byte_len = as_numpy(pc.fill_null(pc.binary_length(arr), 0))
    # Empty strings become "0" (callers know them from byte_len) so one cast parses everything valid.
    padded = pc.ascii_lpad(arr, width=1, padding="0")
    if arr.null_count:
        padded = pc.fill_null(padded, "0")
    ok_np = as_numpy(pc.fill_null(pc.ascii_is_decimal(padded), False)).astype(bool, copy=False)
    ok_np &= (byte_len <= 18) & (byte_len > 0)
    if not ok_np.all() and not (ok_np | (byte_len == 0)).all():
        padded = pc.if_else(pa.array(ok_np), arr, "0")
    return as_numpy(pc.cast(padded, pa.int64())).astype(np.int64, copy=False), ok_np


def bucket_ids(raw: np.ndarray, m: IdMapping, zch: bool = False) -> np.ndarray:
    """Integer ids of a ``mod`` mapping: ``raw % size``, or their 63-bit keys for a zch feature (whose
    managed-collision module assigns the rows)."""
    return zch_keys_from_ints(raw) if zch else np.mod(raw, m.size)


def hash_ids(hashes: np.ndarray, m: IdMapping, zch: bool = False) -> np.ndarray:
    """Ids of a ``hash`` mapping from FNV-1a 64 hashes: ``hash % size``, or a zch feature's 63-bit keys."""
    return zch_keys_from_hashes(hashes) if zch else (hashes % np.uint64(m.size)).astype(np.int64)


def map_ids(
    arr: pa.Array, m: IdMapping, column: str, zch: bool = False
) -> tuple[np.ndarray, np.ndarray, BadRows | None]:
    """Map raw values to table rows. Returns ``(ids int64, present bool, bad or None)``.

    With ``zch`` (``hash``, ``mod`` and pre-encoded ``identity`` mappings) the ids are not reduced to ``m.size``
    rows: they are 63-bit keys (:func:`recpipe.features.hashing.zch_keys_from_ints` / ``zch_keys_from_hashes``)
    and the model's managed-collision module maps them to rows.
    """
    if zch and m.kind not in ("hash", "mod", "identity"):
        raise ValueError(
            f"column {column!r}: a zch feature needs a hash, mod or identity mapping, not {m.kind!r}"
        )
    if pa.types.is_dictionary(arr.type):
        if m.kind == "hash" and is_string(arr.type.value_type) and not arr.dictionary.null_count:
            return _dictionary_hash_ids(arr, m, column, zch)
        arr = arr.dictionary_decode()
    if m.default_value is not None and arr.null_count:
        fill = pa.scalar(m.default_value).cast(arr.type) if not is_string(arr.type) else m.default_value
        arr = pc.fill_null(arr, fill)
    present = present_mask(arr)
    bad = None
    if m.kind == "mod":
        if pa.types.is_integer(arr.type):
            raw = as_numpy(pc.fill_null(arr, 0) if arr.null_count else arr).astype(np.int64, copy=False)
            # The same range as text ids and history items (at most 18 digits): 1e18 and up is refused.
            neg = present & ((raw < 0) | (raw >= 10**18))
            if neg.any():
                bad = BadRows(np.flatnonzero(neg), column, UINT_EXPECTED, arr)
            ids = bucket_ids(raw, m, zch)
        elif is_string(arr.type):
            parsed, ok = parse_uint(arr)
            wrong = present & ~ok
            if wrong.any():
                bad = BadRows(np.flatnonzero(wrong), column, UINT_EXPECTED, arr)
            ids = bucket_ids(parsed, m, zch)
        else:
            raise DataError(
                f"column {column!r}: expected an integer or string column for ids, got {arr.type}"
            )
    elif m.kind == "hash":
        # Hash each distinct value once: context features like pid have a handful of values.
        enc = pc.dictionary_encode(to_string_array(arr))
        table = hash_ids(fnv1a64(enc.dictionary), m, zch)
        ids = (
            table[as_numpy(pc.fill_null(enc.indices, 0)).astype(np.int64)]
            if len(table)
            else np.zeros(len(arr), np.int64)
        )
    elif m.kind == "identity" and zch:
        ids, bad = _encoded_zch_keys(arr, present, column)
    elif m.kind == "identity":
        ids, bad = _encoded_ids(arr, m.size, present, column)
    elif m.kind == "vocab":
        s = to_string_array(arr)
        idx = pc.index_in(s, value_set=pa.array(m.vocab or [], type=pa.string()).cast(s.type))
        ids = as_numpy(pc.fill_null(pc.add(idx, 1), m.unk_id)).astype(np.int64)
    else:
        raise ValueError(f"map_ids does not handle mapping kind {m.kind!r}")
    return ids, present, bad


def _dictionary_hash_ids(
    arr: pa.DictionaryArray, m: IdMapping, column: str, zch: bool
) -> tuple[np.ndarray, np.ndarray, BadRows | None]:
    """:func:`map_ids` of a ``hash`` mapping for a dictionary-encoded string column: each dictionary value hashed
    once per dictionary (:func:`dictionary_cached`), the rows' ids taken by index. The same ids, present rows and
    ``default_value`` for nulls as the plain column's."""
    table = dictionary_cached(
        arr.dictionary, column, ("hash", m.size, zch), lambda d: hash_ids(fnv1a64(d), m, zch)
    )
    indices = arr.indices
    present = present_mask(arr)
    idx = as_numpy(pc.fill_null(indices, 0) if indices.null_count else indices).astype(np.int64, copy=False)
    ids = table[idx] if len(table) else np.zeros(len(arr), np.int64)
    if m.default_value is not None and not present.all():
        ids[~present] = hash_ids(fnv1a64(pa.array([m.default_value]).cast(pa.string())), m, zch)[0]
        present = np.ones(len(arr), bool)
    return ids, present, None


def encoded_expected(size: int) -> str:
    return f"a pre-encoded id in [0, {size}) (the table's rows)"


def _encoded_ids(
    arr: pa.Array, size: int, present: np.ndarray, column: str
) -> tuple[np.ndarray, BadRows | None]:
    """Row ids of pre-encoded input (TorchEasyRec's FG_NONE): integers (or their decimal text) used as they
    are; an id outside ``[0, size)`` is a bad row (TorchEasyRec would hand it to the embedding lookup)."""
    if pa.types.is_integer(arr.type):
        ids = as_numpy(pc.fill_null(arr, 0) if arr.null_count else arr).astype(np.int64, copy=False)
        wrong = present & ((ids < 0) | (ids >= size))
    elif is_string(arr.type):
        ids, ok = parse_uint(arr)
        wrong = present & (~ok | (ids >= size))
    else:
        raise DataError(f"column {column!r}: expected an integer or string column of ids, got {arr.type}")
    bad = BadRows(np.flatnonzero(wrong), column, encoded_expected(size), arr) if wrong.any() else None
    return np.where(wrong, 0, ids), bad


ENCODED_ZCH_EXPECTED = "a pre-encoded zch id: an integer in [0, 2**63)"


def _encoded_zch_keys(arr: pa.Array, present: np.ndarray, column: str) -> tuple[np.ndarray, BadRows | None]:
    """The zch keys of pre-encoded ids (TorchEasyRec's FG_NONE column of a zch feature: the int64 id its FG
    wrote, ``hash % (2**63 - 1)``, which the managed-collision module remaps): every non-negative int64 (or its
    decimal text, 19 digits at most) keyed as an integer raw id is under FG (``zch_keys_from_ints``, a bijection,
    so distinct ids keep distinct keys); no table-range check, the module gives any id a row. A negative id,
    or text that is no such integer, is a bad row."""
    if pa.types.is_integer(arr.type):
        ids = as_numpy(pc.fill_null(arr, 0) if arr.null_count else arr).astype(np.int64, copy=False)
        wrong = present & (ids < 0)
    elif is_string(arr.type):
        byte_len = as_numpy(pc.fill_null(pc.binary_length(arr), 0))
        ok = as_numpy(pc.fill_null(pc.ascii_is_decimal(arr), False)).astype(bool) & (byte_len > 0)
        ok &= byte_len <= 19  # below 10**19 < 2**64: the uint64 cast cannot overflow
        unsigned = as_numpy(pc.cast(pc.if_else(pa.array(ok), arr, "0"), pa.uint64()))
        ok &= unsigned < np.uint64(1 << 63)
        ids, wrong = np.where(ok, unsigned, 0).astype(np.int64), present & ~ok
    else:
        raise DataError(f"column {column!r}: expected an integer or string column of ids, got {arr.type}")
    bad = BadRows(np.flatnonzero(wrong), column, ENCODED_ZCH_EXPECTED, arr) if wrong.any() else None
    return zch_keys_from_ints(np.where(wrong, 0, ids)), bad


def to_float(arr: pa.Array, default: float, column: str) -> tuple[np.ndarray, BadRows | None]:
    """Raw values as float64 with nulls → ``default``; text that is not a number and NaN/inf are bad."""
    bad_mask = np.zeros(len(arr), bool)
    original = arr
    if is_string(arr.type):
        fast = _plain_floats(arr, default, column)
        if fast is not None:
            return fast
        ok = as_numpy(pc.fill_null(pc.match_substring_regex(arr, _FLOAT_RE), True))
        bad_mask |= ~ok
        # The pattern allows spaces around a number (" 1", a CSV cell padded by hand); Arrow's cast does not.
        arr = pc.utf8_trim_whitespace(pc.if_else(pa.array(ok), arr, "0"))
    elif not (
        pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type)
    ):
        raise DataError(f"column {column!r}: expected a numeric column, got {arr.type}")
    x = as_numpy(pc.fill_null(pc.cast(arr, pa.float64()), default)).astype(np.float64, copy=False)
    bad_mask |= ~np.isfinite(x)
    bad = BadRows(np.flatnonzero(bad_mask), column, "a finite number", original) if bad_mask.any() else None
    return x, bad


def _plain_floats(arr: pa.Array, default: float, column: str) -> tuple[np.ndarray, BadRows | None] | None:
    """:func:`to_float` of a text column Arrow's cast reads whole (the common case: plain number text), without
    matching every value against the number pattern; None when the cast refuses a value (the caller's general
    path then names the bad rows). Only the values read as NaN/inf are matched: ``"inf"``/``"nan"`` text is no
    number (0, bad), ``"1e999"`` a number too large (inf, bad), as the general path reads them."""
    try:
        parsed = pc.cast(arr, pa.float64())
    except pa.ArrowInvalid:
        return None
    x = as_numpy(pc.fill_null(parsed, default)).astype(np.float64, copy=False)
    odd = np.flatnonzero(~np.isfinite(x))
    if not odd.size:
        return x, None
    x = x.copy()
    number = as_numpy(pc.fill_null(pc.match_substring_regex(arr.take(pa.array(odd)), _FLOAT_RE), True))
    x[odd[~number]] = 0.0
    bad = np.zeros(len(arr), bool)
    bad[odd] = True
    return x, BadRows(np.flatnonzero(bad), column, "a finite number", arr)
