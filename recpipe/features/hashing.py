"""Stable 64-bit string hashing (FNV-1a), the same in every process, platform and release.

Python's ``hash()`` is salted per process and pyarrow's hashing is not a stable contract, so ids
hashed at training time would not match serving. FNV-1a over the UTF-8 bytes is simple enough to
re-implement in any serving language.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    if not pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_string())
    n = len(arr)
    out = np.full(n, FNV_OFFSET, dtype=np.uint64)
    if n == 0:
        return out
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_null()), 0, lengths)
    starts = offsets[:-1]
    prime = np.uint64(FNV_PRIME)
    max_len = int(lengths.max()) if n else 0
    # Iterate over byte positions, vectorized across rows; shorter strings drop out as they end.
    rows = np.arange(n)
    for i in range(max_len):
        if i:
            keep = lengths[rows] > i
            if not keep.all():
                rows = rows[keep]
        elif not (lengths > 0).all():
            rows = rows[lengths > 0]
        out[rows] = (out[rows] ^ data[starts[rows] + i]) * prime
    return out


def to_string_array(arr: pa.Array) -> pa.Array:
    """The canonical string form used for hashing and vocabularies (integers in decimal)."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr
    return pc.cast(arr, pa.string())
