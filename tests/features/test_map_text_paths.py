"""The byte-range paths of kinds match, lookup and weighted ids (recpipe.features.text's ranges) give what
their Arrow paths give: the same entries, values and bad rows, on random nested text with empty and missing
keys, separators in odd places, multi-byte characters, nulls, sliced arrays and large strings."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from recpipe.config.features import MATCH_ALL
from recpipe.features.kinds import lookup, match
from recpipe.features.kinds import values as vals
from recpipe.features.kinds.id import split_values, weighted_pairs
from recpipe.features.spec import DenseFeature
from recpipe.features.text import (
    byte_positions,
    cut_ranges,
    decimal_ranges,
    equal_ranges,
    split_once,
    split_ranges,
    text_ranges,
)

KEYS = ["a", "b", "猫", "", "ab", "7", "07", "-7", "-0", "0", "123456789012345678901"]
INT_KEYS = [7, -7, 0, 70, None]


def _nested(rng: random.Random) -> str | None:
    """A nested map, now and then malformed (a piece without '^' or ':', stray separators)."""
    if rng.random() < 0.1:
        return None
    outer = []
    for _ in range(rng.randrange(0, 4)):
        inner = ",".join(
            rng.choice(KEYS) + (":" if rng.random() < 0.93 else "") + rng.choice(["1", "2.5", "", "x:y", "^"])
            for _ in range(rng.randrange(0, 4))
        )
        outer.append(rng.choice(KEYS) + ("^" if rng.random() < 0.93 else "") + inner)
    return "|".join(outer) + rng.choice(["", "", "|", ","])


def _batch(seed: int, n: int, large: bool) -> pa.RecordBatch:
    rng = random.Random(seed)
    t = pa.large_string() if large else pa.string()
    key = lambda: None if rng.random() < 0.1 else rng.choice(KEYS)  # noqa: E731
    cols = {
        "m": pa.array([_nested(rng) for _ in range(n)], t),
        "p": pa.array([key() for _ in range(n)], pa.string()),
        "i": pa.array([rng.choice(INT_KEYS) for _ in range(n)], pa.int32()),
        "s": pa.array([key() for _ in range(n)], t),
    }
    return pa.record_batch(cols)


def _entry(pkey: str, skey: str) -> DenseFeature:
    return DenseFeature(
        name="mt", column="m", kind="match", inputs=[], params={"pkey": pkey, "skey": skey, "combiner": "sum"}
    )


def _same_bad(a, b) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        assert a.rows.tolist() == b.rows.tolist() and (a.column, a.expected) == (b.column, b.expected)
        pos_a = a.rows if a.arr_rows is None else a.arr_rows
        pos_b = b.rows if b.arr_rows is None else b.arr_rows
        assert [a.arr[int(i)].as_py() for i in pos_a] == [b.arr[int(i)].as_py() for i in pos_b]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    ("pkey", "skey"),
    [("p", "s"), ("i", "s"), ("s", "i"), ("p", MATCH_ALL), (MATCH_ALL, "s"), (MATCH_ALL, MATCH_ALL)],
)
@pytest.mark.parametrize("large", [False, True])
def test_match_on_byte_ranges_is_the_arrow_path(seed, pkey, skey, large):
    batch = _batch(seed, 300, large)
    e = _entry(pkey, skey)
    for view in (batch, batch.slice(23, 201)):
        text = match._matched_text(e, view)
        arrow = match._matched_arrow(e, view)
        assert text is not None
        assert text[0].tolist() == arrow[0].tolist()
        for got, want in zip(text[1:4], arrow[1:4]):
            assert got.to_pylist() == want.to_pylist() and got.type == want.type
        _same_bad(text[4], arrow[4])


def _kv(rng: random.Random) -> str | None:
    """A ``k:v\x1dk:v`` map, now and then with a piece without ':', empty pieces or a repeated key."""
    if rng.random() < 0.1:
        return None
    keys = ["1", "7", "12", "猫", "", "x"]
    pieces = [
        rng.choice(keys) + (":" if rng.random() < 0.93 else "") + rng.choice(["3", "0.5", "", "a:b"])
        for _ in range(rng.randrange(0, 5))
    ]
    return "\x1d".join(pieces) + rng.choice(["", "\x1d"])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("key_type", ["int", "string", "large_string"])
def test_lookup_on_byte_ranges_is_the_arrow_path(seed, key_type):
    rng = random.Random(seed)
    n = 300
    m = pa.array(
        [_kv(rng) for _ in range(n)], pa.large_string() if key_type == "large_string" else pa.string()
    )
    if key_type == "int":
        key = pa.array(
            [None if rng.random() < 0.1 else rng.choice([1, 7, 12, 99]) for _ in range(n)], pa.int64()
        )
    else:
        choices = ["1", "7", "12", "猫", "", "x", None]
        key = pa.array([rng.choice(choices) for _ in range(n)], m.type)
    batch = pa.record_batch({"m": m, "k": key})
    e = DenseFeature(
        name="lk", column="m", kind="lookup", inputs=["k"], params={"separator": "\x1d", "combiner": "sum"}
    )
    for view in (batch, batch.slice(31, 190)):
        text = lookup._found_text(e, view)
        arrow = lookup._found_arrow(e, view)
        assert text is not None
        assert text[0].tolist() == arrow[0].tolist()
        for got, want in zip(text[1:3], arrow[1:3]):
            assert got.to_pylist() == want.to_pylist() and got.type == want.type
        _same_bad(text[3], arrow[3])


def test_lookup_of_several_keys_a_row_keeps_the_arrow_path():
    batch = pa.record_batch({"m": pa.array(["a:1\x1db:2"]), "k": pa.array(["a\x1db"])})
    e = DenseFeature(name="lk", column="m", kind="lookup", inputs=["k"], params={"separator": "\x1d"})
    assert lookup._found_text(e, batch) is None
    assert lookup.found(e, batch)[2].to_pylist() == ["1", "2"]


def test_split_and_cut_ranges_skip_separators_outside_the_ranges():
    data, starts, ends = text_ranges(pa.array(["x,y^a,b", None, "c,"]))
    # The part after '^' of the first row, and the third row: the ',' in "x,y" is outside them.
    caret, has = cut_ranges(byte_positions(data, starts, ends, "^"), starts, ends)
    assert has.tolist() == [True, False, False]
    s, e = np.where(has, caret + 1, starts), ends
    rows, ps, pe = split_ranges(byte_positions(data, s, e, ","), s, e)
    assert rows.tolist() == [0, 0, 2]
    assert [bytes(data[a:b]).decode() for a, b in zip(ps, pe)] == ["a", "b", "c"]


def test_equal_ranges_compares_lengths_then_bytes():
    a, sa, ea = text_ranges(pa.array(["ab", "ab", "", "猫", "abc", None]))
    b, sb, eb = text_ranges(pa.array(["ab", "ac", "", "猫", "ab", ""]))
    assert equal_ranges(a, sa, ea, b, sb, eb).tolist() == [True, False, True, True, False, True]


def test_decimal_ranges_read_an_integers_text_only():
    texts = [
        "0",
        "7",
        "-7",
        "07",
        "-0",
        "",
        "-",
        "+7",
        "7a",
        "猫",
        "123456789012345678",
        "1234567890123456789",
    ]
    data, starts, ends = text_ranges(pa.array(texts))
    value, ok = decimal_ranges(data, starts, ends)
    want = [t.lstrip("-").isdigit() and str(int(t)) == t and len(t.lstrip("-")) <= 18 for t in texts]
    assert ok.tolist() == want
    assert value[ok].tolist() == [int(t) for t, w in zip(texts, want) if w]


@pytest.mark.parametrize("seed", range(5))
def test_found_in_is_find_first_found(seed):
    rng = np.random.default_rng(seed)
    table, queries = rng.integers(0, 50, rng.integers(0, 60)), rng.integers(0, 60, 200)
    assert vals.found_in(table, queries).tolist() == (vals.find_first(table, queries) >= 0).tolist()


def test_joint_codes_give_equal_text_equal_codes_on_every_side():
    a = pa.array(["x", None, "猫", "y"])
    b = pa.array(["猫", "x", "z"], pa.large_string())
    ca, cb = vals.joint_codes([a, b, pa.array([], pa.string())])[:2]
    assert ca[1] == -1 and ca[0] == cb[1] and ca[2] == cb[0]
    assert len({ca[0], ca[2], ca[3], cb[2]}) == 4


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("large", [False, True])
def test_weighted_pairs_on_byte_ranges_are_the_pieces_cut_at_their_last_colon(seed, large):
    rng = random.Random(seed)
    texts = [
        None
        if rng.random() < 0.1
        else "\x1d".join(
            rng.choice(["12", "猫", "", "a:b"]) + rng.choice([":0.5", ":x", "", ":", ":1e3"])
            for _ in range(rng.randrange(0, 4))
        )
        for _ in range(200)
    ]
    arr = pa.array(texts, pa.large_string() if large else pa.string()).slice(7)
    keys, weights, rows, counts, bad = weighted_pairs(arr, "\x1d", "w")
    # The reference: the pieces as text (split_values), then each cut at its last ':' (split_once).
    flat, want_rows, want_counts = split_values(arr, "\x1d")
    want_keys, want_w, pair = split_once(flat, ":", last=True)
    assert rows.tolist() == want_rows.tolist() and counts.tolist() == want_counts.tolist()
    assert keys.to_pylist() == want_keys.to_pylist() and keys.type == arr.type
    wrong = ~pair | np.array([k == "" for k in want_keys.to_pylist()], bool)
    for i, w in enumerate(want_w.to_pylist()):
        try:
            x = float(w)
        except ValueError:
            x = float("nan")
        wrong[i] |= not np.isfinite(x)
        if not wrong[i]:
            assert weights[i] == x
    assert bad is None if not wrong.any() else bad.rows.tolist() == want_rows[wrong].tolist()
    if bad is not None:
        assert [bad.arr[int(i)].as_py() for i in bad.arr_rows] == [
            flat[int(i)].as_py() for i in np.flatnonzero(wrong)
        ]
