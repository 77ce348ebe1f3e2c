"""Hash-mapped multi-value and weighted ids of text hashed on byte ranges (kind ``id``: no piece becomes a
string, recpipe.features.hashing.fnv1a64_ranges) give what the string path gives (split_values or
weighted_pairs, then with_default, first_values and map_ids): the same ids, lengths, weights and bad rows, on
random text with empty pieces, multi-byte characters, nulls, sliced arrays and large strings, with and without
``default_value``, ``value_dim`` and zch."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from recpipe.features.hashing import fnv1a64_py, fnv1a64_ranges
from recpipe.features.kinds import id as id_kind
from recpipe.features.spec import IdMapping, SparseFeature

WORDS = ["a", "tag7", "猫", "x" * 40, "12", "a:b", "0.5", "价格标签"]


def _feature(sep: str, default: str | None, value_dim: int, zch: bool, weighted: bool) -> SparseFeature:
    params: dict = {"separator": sep} if sep != "\x1d" else {}
    if value_dim:
        params["value_dim"] = value_dim
    if weighted:
        params["weights"] = "t__weights"
    return SparseFeature(
        name="t",
        column="t",
        mapping=IdMapping("hash", 997, default_value=default),
        table="t",
        embedding_dim=4,
        zch=zch,
        params=params,
    )


def _text(rng: random.Random, sep: str, weighted: bool) -> str | None:
    if rng.random() < 0.1:
        return None
    pieces = []
    for _ in range(rng.randrange(0, 5)):
        word = rng.choice(WORDS + [""])
        if weighted:
            word += rng.choice([":0.5", ":2", ":-1.25", ":1e3", ":x", "", ":"]) if rng.random() < 0.97 else ""
        pieces.append(word)
    return sep.join(pieces) + rng.choice(["", "", sep])


def _same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.tolist() == w.tolist()
        elif w is None:
            assert g is None
        else:  # BadRows
            assert (g.rows.tolist(), g.column, g.expected) == (w.rows.tolist(), w.column, w.expected)
            pos_g = g.rows if g.arr_rows is None else g.arr_rows
            pos_w = w.rows if w.arr_rows is None else w.arr_rows
            assert [g.arr[int(i)].as_py() for i in pos_g] == [w.arr[int(i)].as_py() for i in pos_w]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sep", [",", "\x1d"])
@pytest.mark.parametrize(("default", "value_dim", "zch"), [(None, 0, False), ("d", 0, False), ("d", 2, True)])
@pytest.mark.parametrize("weighted", [False, True])
def test_hashed_on_byte_ranges_is_the_string_path(seed, sep, default, value_dim, zch, weighted, monkeypatch):
    rng = random.Random(seed)
    f = _feature(sep, default, value_dim, zch, weighted)
    large = seed % 2 == 1
    texts = [_text(rng, sep, weighted) for _ in range(300)]
    arr = pa.array(texts, pa.large_string() if large else pa.string()).slice(5)
    batch = pa.record_batch({"t": arr})
    got = id_kind.ids(f, batch)
    with monkeypatch.context() as m:  # the string path: pieces as text, each mapped by map_ids
        m.setattr(id_kind, "one_byte", lambda sep: None)
        want = id_kind.ids(f, batch)
    _same(got, want)


def test_fnv1a64_ranges_is_the_reference_on_every_range():
    rng = np.random.default_rng(0)
    text = "".join(rng.choice(list("ab猫 \x1d0")) for _ in range(3000)).encode()
    data = np.frombuffer(text, np.uint8)
    starts = rng.integers(0, len(text), 500)
    ends = np.minimum(starts + rng.integers(0, 300, 500), len(text))
    got = fnv1a64_ranges(data, starts, ends)
    assert got.tolist() == [fnv1a64_py_bytes(text[s:e]) for s, e in zip(starts, ends)]
    assert fnv1a64_ranges(data, starts[:0], ends[:0]).size == 0
    assert fnv1a64_ranges(data, starts[:3], starts[:3]).tolist() == [fnv1a64_py("")] * 3


def fnv1a64_py_bytes(b: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in b:
        h = ((h ^ byte) * 0x100000001B3) & ((1 << 64) - 1)
    return h
