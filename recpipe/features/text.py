"""Splitting text columns at a one-byte separator by scanning their bytes with numpy: the pieces of every row
(:func:`split_pieces`) and each piece cut at its first or last separator (:func:`split_once`), with the
results of ``pc.split_pattern`` + ``list_flatten`` (+ ``list_element``) but without Arrow's list arrays, one
small string per piece, in a few numpy passes over the batch's bytes. Below them the same cuts on byte
ranges of one buffer, copying no text (:func:`text_ranges`, :func:`split_ranges`, :func:`cut_ranges`,
:func:`equal_ranges`, :func:`gather`): nested text (``"pk^sk:v,sk:v|..."``) is cut level by level and only the
pieces a kind keeps become strings. An ASCII separator byte never occurs
inside a multi-byte UTF-8 character, so cutting bytes cuts characters. Any other separator: None (callers
keep Arrow's split). numpy and pyarrow only.

Example::

    rows, pieces = split_pieces(pa.array(["a,b", None, ",c"]), ",")   # [0, 0, 2], ["a", "b", "c"]
    keys, values, has = split_once(pa.array(["k:1", "x"]), ":")        # ["k", "x"], ["1", ""], [True, False]
    data, starts, ends = text_ranges(pa.array(["a,b"]))                 # bytes b"a,b", [0], [3]
    row, s, e = split_ranges(byte_positions(data, starts, ends, ","), starts, ends)  # [0, 0], [0, 2], [1, 3]
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def one_byte(sep: str) -> int | None:
    """The separator's byte when it is one ASCII byte (one that never occurs inside a multi-byte UTF-8
    character), else None."""
    b = sep.encode()
    return b[0] if len(b) == 1 and b[0] < 0x80 else None


def _byte(sep: str, t: pa.DataType) -> int | None:
    """The separator's byte, or None when it is not one ASCII byte or ``t`` is not (large) string."""
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return None
    return one_byte(sep)


def text_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (len + 1,) int64, data uint8) of a (large) string array, offsets into ``data``."""
    bufs = arr.buffers()
    if bufs[1] is None:  # an empty array may have no offsets buffer
        return np.zeros(1, np.int64), np.zeros(0, np.uint8)
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def string_array(t: pa.DataType, offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    width = np.int64 if pa.types.is_large_string(t) else np.int32
    return pa.Array.from_buffers(
        t, offsets.size - 1, [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(data)]
    )


def gather(t: pa.DataType, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte ranges ``[starts, ends)`` of ``data`` as a string array of type ``t``."""
    lengths = ends - starts
    offsets = np.zeros(starts.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Byte i of the result is data[i + shift of its piece]: the shift is constant over a piece.
    shift = np.repeat(starts - offsets[:-1], lengths)
    return string_array(t, offsets, data[np.arange(offsets[-1]) + shift])


def split_pieces(arr: pa.Array, sep: str) -> tuple[np.ndarray, pa.Array] | None:
    """(row of each piece int64, pieces) of text split at ``sep``, rows in order and pieces in text order;
    empty pieces and null rows give none. None when ``sep`` is not one ASCII byte or ``arr`` not text.

    Example::

        split_pieces(pa.array(["a\\x1d\\x1db", ""]), "\\x1d")   # ([0, 0], ["a", "b"])
    """
    byte = _byte(sep, arr.type)
    if byte is None:
        return None
    offsets, data = text_buffers(arr)
    if arr.null_count and np.diff(offsets)[~arr.is_valid().to_numpy(zero_copy_only=False)].any():
        # A null row's slot may still span bytes (Arrow allows it): read it as "", so none of them is a piece.
        arr = pc.fill_null(arr, "")
        offsets, data = text_buffers(arr)
    lo, hi = int(offsets[0]), int(offsets[-1])
    starts, ends = offsets[:-1], offsets[1:]
    seps = byte_positions(data, starts, ends, sep)
    rows, ps, pe = split_ranges(seps, starts, ends)
    # The pieces' bytes, one after another, are the text's bytes without its separators.
    piece_offsets = np.zeros(rows.size + 1, np.int64)
    np.cumsum(pe - ps, out=piece_offsets[1:])
    pieces = data[lo:hi]
    return rows, string_array(
        arr.type, piece_offsets, np.compress(pieces != byte, pieces) if seps.pos.size else pieces
    )


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
    offsets, data = text_buffers(arr)
    starts, ends = offsets[:-1], offsets[1:]
    cut, has = cut_ranges(byte_positions(data, starts, ends, sep), starts, ends, last)
    before = gather(arr.type, data, starts, cut)
    after = gather(arr.type, data, cut + has, ends)
    return before, after, has


# --------------------------------------------------------------------------------------------- byte ranges
def text_ranges(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data uint8, starts, ends) of every value of a (large) string array: value ``i`` is
    ``data[starts[i]:ends[i]]``, a null value an empty range (whatever bytes its slot spans)."""
    offsets, data = text_buffers(arr)
    starts, ends = offsets[:-1], offsets[1:]
    if arr.null_count:
        ends = np.where(arr.is_valid().to_numpy(zero_copy_only=False), ends, starts)
    return data, starts, ends


def text_has(arr: pa.Array, sep: str) -> bool:
    """Whether any value of a (large) string array holds ``sep`` (the bytes of its slots searched once)."""
    offsets, data = text_buffers(arr)
    return sep.encode() in data[int(offsets[0]) : int(offsets[-1])].tobytes()


class Separators(NamedTuple):
    """The positions of one separator byte in ``data[lo:hi]`` (sorted), with ``before[p - lo]`` the number of
    them before position ``p`` for every ``p`` in ``[lo, hi]``: :meth:`index` is ``np.searchsorted(pos, p)``
    by one look-up (a binary search a piece costs more than one pass over the bytes)."""

    pos: np.ndarray
    lo: int
    before: np.ndarray

    def index(self, p: np.ndarray) -> np.ndarray:
        return self.before[p - self.lo]


def byte_positions(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: str) -> Separators:
    """The one ASCII byte ``sep`` in ``data`` between the least start and the greatest end of the ranges
    (those outside every range included: :func:`split_ranges` skips them); the ranges :func:`split_ranges`
    and :func:`cut_ranges` get with it must lie between the same bounds."""
    byte = one_byte(sep)
    if byte is None:
        raise ValueError(f"byte_positions: {sep!r} is not one ASCII byte")
    if not starts.size:
        return Separators(np.zeros(0, np.int64), 0, np.zeros(1, np.int64))
    lo, hi = int(starts.min()), int(ends.max())
    hit = data[lo:hi] == byte
    # np.empty, not np.zeros: a large calloc maps fresh pages every call, a malloc reuses freed ones.
    before = np.empty(hi - lo + 1, np.int32 if hi - lo < 2**31 else np.int64)
    before[0] = 0
    np.cumsum(hit, dtype=before.dtype, out=before[1:])
    return Separators(lo + np.flatnonzero(hit), lo, before)


def split_ranges(
    seps: Separators, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty pieces of byte ranges cut at the separators ``seps``: (range of each
    piece, piece starts, piece ends), ranges in order and pieces in byte order, as :func:`split_pieces` cuts
    text. The ranges need not touch; separators outside every range are no cut."""
    n = starts.size
    first_sep = seps.index(starts).astype(np.int64)
    per = seps.index(ends) - first_sep  # separators inside each range
    total = int(per.sum())
    count = per + 1
    first = np.cumsum(count) - count
    # The separators inside the ranges, range by range, and the piece each one ends.
    inside = seps.pos[np.repeat(first_sep - (np.cumsum(per) - per), per) + np.arange(total)]
    at = np.arange(total) + np.repeat(np.arange(n), per)
    ps = np.empty(n + total, np.int64)
    pe = np.empty_like(ps)
    ps[first], ps[at + 1] = starts, inside + 1
    pe[first + per], pe[at] = ends, inside
    keep = pe > ps
    return np.repeat(np.arange(n, dtype=np.int64), count)[keep], ps[keep], pe[keep]


def cut_ranges(
    seps: Separators, starts: np.ndarray, ends: np.ndarray, last: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(cut, has) of each byte range at its first (``last``: its last) separator of ``seps`` (sorted): the
    separator's position, or the range's end where it holds none (``has`` False). Before the cut is
    ``[start, cut)``, after it ``[cut + has, end)``, as :func:`split_once` cuts text."""
    pos = seps.pos
    if not pos.size:
        return ends.copy(), np.zeros(starts.size, bool)
    if last:
        i = seps.index(ends) - 1
        found = pos[np.maximum(i, 0)]
        has = (i >= 0) & (found >= starts)
    else:
        i = seps.index(starts)
        found = pos[np.minimum(i, pos.size - 1)]
        has = (i < pos.size) & (found < ends)
    return np.where(has, found, ends), has


def equal_ranges(
    a: np.ndarray,
    a_starts: np.ndarray,
    a_ends: np.ndarray,
    b: np.ndarray,
    b_starts: np.ndarray,
    b_ends: np.ndarray,
) -> np.ndarray:
    """Whether byte range ``i`` of ``a`` holds the same bytes as range ``i`` of ``b``, for every ``i``: the
    lengths compared, then the ranges of equal length byte by byte (one pass per byte position)."""
    length = a_ends - a_starts
    same = length == b_ends - b_starts
    idx = np.flatnonzero(same & (length > 0))
    for k in range(int(length[idx].max(initial=0))):
        idx = idx[length[idx] > k]
        differ = a[a_starts[idx] + k] != b[b_starts[idx] + k]
        if differ.any():
            same[idx[differ]] = False
            idx = idx[~differ]
        if not idx.size:
            break
    return same


def decimal_ranges(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value int64, ok) of byte ranges read as an integer's canonical decimal text, as Arrow casts an integer
    to text: an optional ``-``, 1 to 18 digits, no leading zero (``"0"`` itself, never ``"-0"``); ``ok`` False
    (value 0) for any other text, so a range equals ``str(k)`` of an integer ``|k| < 10**18`` exactly when
    ``ok`` and its value is ``k``."""
    n = starts.size
    value = np.zeros(n, np.int64)
    if not n or not data.size:
        return value, np.zeros(n, bool)
    last = data.size - 1
    neg = (ends > starts) & (data[np.minimum(starts, last)] == ord("-"))
    ds = starts + neg
    digits = ends - ds
    first = data[np.minimum(ds, last)]
    ok = (digits >= 1) & (digits <= 18) & ~((first == ord("0")) & (neg | (digits > 1)))
    idx = np.flatnonzero(ok)
    for k in range(int(digits[idx].max(initial=0))):
        idx = idx[digits[idx] > k]
        d = data[ds[idx] + k].astype(np.int64) - ord("0")
        bad = (d < 0) | (d > 9)
        if bad.any():
            ok[idx[bad]] = False
            idx, d = idx[~bad], d[~bad]
        value[idx] = value[idx] * 10 + d
    value = np.where(neg, -value, value)
    return np.where(ok, value, 0), ok
