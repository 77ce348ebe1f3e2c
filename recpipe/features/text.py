"""Splitting text columns at a one-byte separator by scanning their bytes with numpy: the pieces of every row
(:func:`split_pieces`) and each piece cut at its first or last separator (:func:`split_once`), with the
results of ``pc.split_pattern`` + ``list_flatten`` (+ ``list_element``) but without Arrow's list arrays, one
small string per piece, in a few numpy passes over the batch's bytes. An ASCII separator byte never occurs
inside a multi-byte UTF-8 character, so cutting bytes cuts characters. Any other separator: None (callers
keep Arrow's split). numpy and pyarrow only.

Example::

    rows, pieces = split_pieces(pa.array(["a,b", None, ",c"]), ",")   # [0, 0, 2], ["a", "b", "c"]
    keys, values, has = split_once(pa.array(["k:1", "x"]), ":")        # ["k", "x"], ["1", ""], [True, False]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _byte(sep: str, t: pa.DataType) -> int | None:
    """The separator's byte, or None when it is not one ASCII byte or ``t`` is not (large) string."""
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return None
    b = sep.encode()
    return b[0] if len(b) == 1 and b[0] < 0x80 else None


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (len + 1,) int64, data uint8) of a (large) string array, offsets into ``data``."""
    bufs = arr.buffers()
    if bufs[1] is None:  # an empty array may have no offsets buffer
        return np.zeros(1, np.int64), np.zeros(0, np.uint8)
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _string_array(t: pa.DataType, offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    width = np.int64 if pa.types.is_large_string(t) else np.int32
    return pa.Array.from_buffers(
        t, offsets.size - 1, [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(data)]
    )


def _gather(t: pa.DataType, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte ranges ``[starts, ends)`` of ``data`` (sorted, not overlapping) as a string array of type ``t``."""
    lengths = ends - starts
    offsets = np.zeros(starts.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Byte i of the result is data[i + shift of its piece]: the shift is constant over a piece.
    shift = np.repeat(starts - offsets[:-1], lengths)
    return _string_array(t, offsets, data[np.arange(offsets[-1]) + shift])


def split_pieces(arr: pa.Array, sep: str) -> tuple[np.ndarray, pa.Array] | None:
    """(row of each piece int64, pieces) of text split at ``sep``, rows in order and pieces in text order;
    empty pieces and null rows give none. None when ``sep`` is not one ASCII byte or ``arr`` not text.

    Example::

        split_pieces(pa.array(["a\\x1d\\x1db", ""]), "\\x1d")   # ([0, 0], ["a", "b"])
    """
    byte = _byte(sep, arr.type)
    if byte is None:
        return None
    n = len(arr)
    offsets, data = _buffers(arr)
    if arr.null_count and np.diff(offsets)[~arr.is_valid().to_numpy(zero_copy_only=False)].any():
        # A null row's slot may still span bytes (Arrow allows it): read it as "", so none of them is a piece.
        arr = pc.fill_null(arr, "")
        offsets, data = _buffers(arr)
    lo, hi = int(offsets[0]), int(offsets[-1])
    seps = lo + np.flatnonzero(data[lo:hi] == byte)
    # Row r holds k_r separators and k_r + 1 pieces; sorted, the pieces' starts are the row starts and the
    # bytes after each separator, their ends the separators and the row ends.
    per_row = np.diff(np.searchsorted(seps, offsets))
    count = per_row + 1
    first = np.cumsum(count) - count
    at = np.arange(seps.size) + np.repeat(np.arange(n), per_row)
    starts = np.empty(int(count.sum()), np.int64)
    ends = np.empty_like(starts)
    starts[first], starts[at + 1] = offsets[:-1], seps + 1
    ends[first + per_row], ends[at] = offsets[1:], seps
    rows = np.repeat(np.arange(n, dtype=np.int64), count)
    keep = ends > starts
    # The pieces' bytes, one after another, are the text's bytes without its separators.
    offsets = np.zeros(int(keep.sum()) + 1, np.int64)
    np.cumsum((ends - starts)[keep], out=offsets[1:])
    pieces = data[lo:hi]
    return rows[keep], _string_array(arr.type, offsets, pieces[pieces != byte] if seps.size else pieces)


def split_once(arr: pa.Array, sep: str, last: bool = False) -> tuple[pa.Array, pa.Array, np.ndarray] | None:
    """Each value of a text array cut at its first (``last``: its last) ``sep``: ``(before, after, has)``; a
    value without ``sep`` is all ``before``, ``after`` is ``""`` and ``has`` False. None when ``sep`` is not
    one ASCII byte, ``arr`` not text or it has nulls.

    Example::

        split_once(pa.array(["a:b:c", "d"]), ":", last=True)   # (["a:b", "d"], ["c", ""], [True, False])
    """
    byte = _byte(sep, arr.type)
    if byte is None:
        return None
    if arr.null_count:  # callers keep Arrow's split, which carries the nulls through
        return None
    offsets, data = _buffers(arr)
    lo, hi = int(offsets[0]), int(offsets[-1])
    seps = lo + np.flatnonzero(data[lo:hi] == byte)
    starts, ends = offsets[:-1], offsets[1:]
    if last:
        i = np.searchsorted(seps, ends) - 1
        found = seps[np.maximum(i, 0)] if seps.size else ends
        has = (i >= 0) & (found >= starts)
    else:
        i = np.searchsorted(seps, starts)
        found = seps[np.minimum(i, seps.size - 1)] if seps.size else ends
        has = (i < seps.size) & (found < ends)
    cut = np.where(has, found, ends)
    before = _gather(arr.type, data, starts, cut)
    after = _gather(arr.type, data, cut + has, ends)
    return before, after, has
