"""TorchEasyRec's ``text_normalizer`` options that recpipe reproduces, over a whole text column at once
(pyarrow.compute, and numpy over the column's UTF-8 bytes; no loop over rows).

recpipe's reading of feature.md's table (TorchEasyRec's FG library is not published as source), applied in
this order (:data:`recpipe.config.tokenize.NORM_ORDER`) whatever order the config lists them in:

- ``TEXT_SBC2DBC`` full-width → half-width: U+FF01..U+FF5E → U+0021..U+007E, the ideographic space U+3000 →
  U+0020 (so a full-width letter is an ASCII one before the case options);
- ``TEXT_LOWER2UPPER`` / ``TEXT_UPPER2LOWER``: ASCII letters ``a-z`` ↔ ``A-Z``;
- ``TEXT_FILTER``: every character of ``stop_chars`` removed (the ``stop_char_file``: each character of each
  line);
- ``TEXT_SPLITCHRS``: a space between a Chinese character (Unicode script Han) and any character next to it
  that is not whitespace (``"我爱ab"`` → ``"我 爱 ab"``);
- ``TEXT_REMOVE_SPACE``: every space U+0020 removed.

Example::

    normalize_text(pa.array(["ＡＢＣ efg", None]), ["TEXT_SBC2DBC", "TEXT_UPPER2LOWER"], "")   # ["abc efg", None]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.tokenize import NORM_ORDER
from recpipe.features.text import string_array, text_buffers


def normalize_text(arr: pa.Array, options: list[str], stop_chars: str = "") -> pa.Array:
    """``arr`` (a string column) with ``options`` applied; nulls stay null.

    Raises:
        ValueError: an option recpipe does not reproduce (the config refuses them first).
    """
    unknown = sorted(set(options) - set(NORM_ORDER))
    if unknown:
        raise ValueError(f"text normalizer options {unknown} are not reproduced by recpipe")
    for option in NORM_ORDER:
        if option not in options:
            continue
        if option == "TEXT_SBC2DBC":
            arr = full_to_half_width(arr)
        elif option == "TEXT_LOWER2UPPER":
            arr = pc.ascii_upper(arr)
        elif option == "TEXT_UPPER2LOWER":
            arr = pc.ascii_lower(arr)
        elif option == "TEXT_FILTER" and stop_chars:
            arr = pc.replace_substring_regex(arr, pattern=_char_class(stop_chars), replacement="")
        elif option == "TEXT_SPLITCHRS":
            # Matches do not overlap, so a run of Han characters needs a second pass ("我爱你" → "我 爱你" →
            # "我 爱 你"); after both, a Han character is followed by whitespace or the end, so the pass over
            # what precedes one never chains.
            for _ in range(2):
                arr = pc.replace_substring_regex(arr, pattern=r"(\p{Han})(\S)", replacement=r"\1 \2")
            arr = pc.replace_substring_regex(arr, pattern=r"(\S)(\p{Han})", replacement=r"\1 \2")
        elif option == "TEXT_REMOVE_SPACE":
            arr = pc.replace_substring(arr, pattern=" ", replacement="")
    return arr


def _char_class(chars: str) -> str:
    """An RE2 class of exactly ``chars`` (``\\``, ``]``, ``[``, ``^`` and ``-`` escaped)."""
    return "[" + "".join("\\" + c if c in "\\][^-" else c for c in dict.fromkeys(chars)) + "]"


def stop_chars_of(text: str) -> str:
    """The stop characters of a ``stop_char_file``'s text: every character of every line, line ends aside."""
    return "".join(dict.fromkeys("".join(text.splitlines())))


def full_to_half_width(arr: pa.Array) -> pa.Array:
    """U+FF01..U+FF5E → U+0021..U+007E and U+3000 → U+0020, by rewriting the column's UTF-8 bytes: the
    full-width forms are ``EF BC 81..EF BD 9E`` and U+3000 ``E3 80 80``, 3 bytes each becoming one (a lead
    byte ``EF`` / ``E3`` never occurs inside another character, so a match is a character)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets, data = text_buffers(arr)
    lo, hi = int(offsets[0]), int(offsets[-1])
    b = data[lo:hi]
    if b.size < 3:
        return arr
    b0, b1, b2 = b[:-2], b[1:-1], b[2:]
    cp = ((b0.astype(np.int64) & 0x0F) << 12) | ((b1.astype(np.int64) & 0x3F) << 6) | (b2 & 0x3F)
    three = (b0 & 0xF0) == 0xE0
    wide = three & (b0 == 0xEF) & (cp >= 0xFF01) & (cp <= 0xFF5E)
    ideo = three & (cp == 0x3000)
    at = np.flatnonzero(wide | ideo)
    if not at.size:
        return arr
    out = b.copy()
    out[at] = np.where(wide[at], cp[at] - 0xFEE0, 0x20).astype(np.uint8)
    drop = np.zeros(b.size, bool)
    drop[at + 1] = drop[at + 2] = True
    dropped = np.concatenate([[0], np.cumsum(drop)])
    new_offsets = (offsets - lo) - dropped[offsets - lo]
    normalized = string_array(arr.type, new_offsets, out[~drop])
    if arr.null_count:
        normalized = pc.if_else(arr.is_null(), pa.scalar(None, arr.type), normalized)
    return normalized
