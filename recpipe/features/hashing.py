"""Stable 64-bit string hashing (FNV-1a), the same in every process, platform and release.

Python's ``hash()`` is salted per process and pyarrow's hashing is not a stable contract, so ids
hashed at training time would not match serving. FNV-1a over the UTF-8 bytes is simple enough to
re-implement in any serving language.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.features.text import text_ranges

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a64_py(s: str) -> int:
    """Reference FNV-1a 64 of one string (per-row code paths and tests)."""
    h = FNV_OFFSET
    for byte in s.encode("utf-8"):
        h = ((h ^ byte) * FNV_PRIME) & _MASK
    return h


def fnv1a64(arr: pa.Array) -> np.ndarray:
    """Vectorized FNV-1a 64 of a string array; nulls hash like the empty string.

    Args:
        arr (pa.Array): ``(N,)`` string or large_string array.

    Returns:
        np.ndarray: ``(N,)`` uint64 hashes.

    Example::

        >>> fnv1a64(pa.array(["430548_1007"]))[0] == fnv1a64_py("430548_1007")
        True
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())
    return fnv1a64_ranges(*text_ranges(arr))


def fnv1a64_ranges(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """FNV-1a 64 of the byte ranges ``data[starts[i]:ends[i]]``, no range copied into a string first.

    One pass per byte position, vectorized across the ranges: sorted by length (a counting sort, the lengths
    being small), the ranges still going at position ``k`` are a suffix, so each pass is a slice.

    Args:
        data (np.ndarray): uint8 bytes.
        starts (np.ndarray), ends (np.ndarray): ``(N,)`` int64 range bounds.

    Returns:
        np.ndarray: ``(N,)`` uint64 hashes (an empty range hashes like the empty string).
    """
    n = starts.size
    lengths = ends - starts
    longest = int(lengths.max()) if n else 0
    if not longest:
        return np.full(n, FNV_OFFSET, dtype=np.uint64)
    # numpy's stable sort of 16-bit integers is a radix sort.
    order = np.argsort(lengths.astype(np.uint16) if longest < 2**16 else lengths, kind="stable")
    at = starts[order]
    going = np.searchsorted(lengths[order], np.arange(longest), side="right")  # first range longer than k
    h = np.full(n, FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV_PRIME)
    for k in range(longest):
        tail = h[going[k] :]
        np.bitwise_xor(tail, data[at[going[k] :] + k], out=tail)
        np.multiply(tail, prime, out=tail)
    out = np.empty_like(h)
    out[order] = h
    return out


def to_string_array(arr: pa.Array) -> pa.Array:
    """The canonical string form used for hashing and vocabularies (integers in decimal)."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr
    return pc.cast(arr, pa.string())


# Zero-collision (managed-collision) features keep the whole id space: ids become 63-bit keys, spread
# evenly because TorchRec's row-wise managed-collision sharding routes a key to the rank owning its
# value range (key // ceil(2**63 / ranks)), and below int64 max, TorchRec's marker of an empty slot.
ZCH_KEY_SPACE = (1 << 63) - 1
_MASK63 = np.uint64((1 << 63) - 1)
_MAX_KEY = np.uint64(ZCH_KEY_SPACE - 1)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def zch_keys_from_ints(ids: np.ndarray) -> np.ndarray:
    """63-bit keys of non-negative integer ids: splitmix64's finalizer computed modulo 2**63.

    Every step (``x ^ x >> k``, multiplication by an odd constant mod 2**63) is a bijection of
    [0, 2**63), so distinct ids keep distinct keys; the one id whose key would be int64 max (TorchRec's
    empty-slot marker) shares the key below it.

    Args:
        ids (np.ndarray): ``(N,)`` int64 ids, all ``>= 0``.

    Returns:
        np.ndarray: ``(N,)`` int64 keys in ``[0, 2**63 - 1)``.

    Example::

        >>> keys = zch_keys_from_ints(np.arange(4))
        >>> len(set(keys.tolist())), bool((keys >= 0).all())
        (4, True)
    """
    x = np.asarray(ids, dtype=np.int64).view(np.uint64) & _MASK63
    x = x ^ (x >> np.uint64(31))
    x = (x * _MIX1) & _MASK63
    x = x ^ (x >> np.uint64(29))
    x = (x * _MIX2) & _MASK63
    x = x ^ (x >> np.uint64(32))
    return np.minimum(x, _MAX_KEY).view(np.int64)


def zch_keys_from_hashes(hashes: np.ndarray) -> np.ndarray:
    """63-bit keys of FNV-1a 64 string hashes (the top bit dropped): distinct strings collide only
    when their hashes do (about ``n² / 2**64`` pairs among ``n`` strings).

    Args:
        hashes (np.ndarray): ``(N,)`` uint64 from :func:`fnv1a64`.

    Returns:
        np.ndarray: ``(N,)`` int64 keys in ``[0, 2**63 - 1)``.
    """
    return np.minimum(np.asarray(hashes, dtype=np.uint64) & _MASK63, _MAX_KEY).view(np.int64)


def zch_key_py(value: int | str) -> int:
    """Reference 63-bit key of one id (per-row code paths and tests): an int is mixed like
    :func:`zch_keys_from_ints`, a string is its FNV-1a 64 hash with the top bit dropped."""
    if isinstance(value, str):
        x = fnv1a64_py(value) & int(_MASK63)
    else:
        m = int(_MASK63)
        x = value & m
        x ^= x >> 31
        x = (x * int(_MIX1)) & m
        x ^= x >> 29
        x = (x * int(_MIX2)) & m
        x ^= x >> 32
    return min(x, ZCH_KEY_SPACE - 1)
