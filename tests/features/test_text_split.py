"""recpipe.features.text's byte-scanning splits give what Arrow's ``split_pattern`` gives, on random text with
nulls, empty pieces, multi-byte characters, sliced arrays and large strings."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from recpipe.features.text import split_once, split_pieces

ALPHABET = ["a", "b", "7", "é", "猫", ":", ",", "\x1d", ""]


def _random_text(seed: int, n: int = 400) -> list[str | None]:
    rng = random.Random(seed)
    return [
        None if rng.random() < 0.1 else "".join(rng.choices(ALPHABET, k=rng.randrange(0, 9)))
        for _ in range(n)
    ]


def _arrow_pieces(arr: pa.Array, sep: str) -> tuple[list[int], list[str]]:
    parts = pc.split_pattern(pc.fill_null(arr, ""), sep)
    rows = pc.list_parent_indices(parts).to_numpy().tolist()
    items = pc.list_flatten(parts).to_pylist()
    kept = [(r, p) for r, p in zip(rows, items) if p != ""]
    return [r for r, _ in kept], [p for _, p in kept]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sep", ["\x1d", ",", ":"])
@pytest.mark.parametrize("large", [False, True])
def test_split_pieces_is_arrows_split_without_empty_pieces(seed, sep, large):
    arr = pa.array(_random_text(seed), pa.large_string() if large else pa.string())
    for view in (arr, arr.slice(37, 211)):  # a slice starts at an offset into the buffers
        rows, pieces = split_pieces(view, sep)
        want_rows, want = _arrow_pieces(view, sep)
        assert rows.tolist() == want_rows
        assert pieces.to_pylist() == want
        assert pieces.type == view.type


def test_split_pieces_reads_a_null_slot_that_spans_bytes_as_no_piece():
    # Arrow lets a null row's slot hold bytes: build ["a,b", null (holding "x,y"), "c"] from buffers.
    data = b"a,bx,yc"
    offsets = np.array([0, 3, 6, 7], np.int32)
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    arr = pa.Array.from_buffers(pa.string(), 3, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], 1)
    rows, pieces = split_pieces(arr, ",")
    assert rows.tolist() == [0, 0, 2] and pieces.to_pylist() == ["a", "b", "c"]


def test_split_pieces_declines_a_separator_of_more_than_one_byte_or_a_non_text_column():
    assert split_pieces(pa.array(["a||b"]), "||") is None
    assert split_pieces(pa.array(["a猫b"]), "猫") is None
    assert split_pieces(pa.array([1, 2]), ",") is None


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("last", [False, True])
def test_split_once_is_arrows_split_at_the_first_or_last_separator(seed, last):
    values = [t for t in _random_text(seed) if t is not None]
    arr = pa.array(values).slice(5)
    before, after, has = split_once(arr, ":", last=last)
    parts = pc.split_pattern(arr, ":", max_splits=1, reverse=last).to_pylist()
    assert has.tolist() == [len(p) == 2 for p in parts]
    assert before.to_pylist() == [p[0] for p in parts]
    assert after.to_pylist() == [p[1] if len(p) == 2 else "" for p in parts]


def test_split_once_declines_nulls():
    assert split_once(pa.array(["a:b", None]), ":") is None
