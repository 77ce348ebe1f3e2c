"""recpipe.features.columns: ``to_float`` of text reads plain number text by Arrow's cast and everything else
by the number pattern; both paths give the same values and bad rows."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from recpipe.features import columns
from recpipe.features.columns import to_float


def _general(arr: pa.Array, default: float) -> tuple[np.ndarray, np.ndarray | None] | type:
    with mock.patch.object(columns, "_plain_floats", return_value=None):
        return _result(arr, default)


def _result(arr: pa.Array, default: float) -> tuple[np.ndarray, np.ndarray | None] | type:
    try:
        x, bad = to_float(arr, default, "c")
    except pa.ArrowInvalid:
        return pa.ArrowInvalid
    return x, None if bad is None else bad.rows


def _same(a, b) -> bool:
    if a is pa.ArrowInvalid or b is pa.ArrowInvalid:
        return a is b
    (xa, ra), (xb, rb) = a, b
    return np.array_equal(xa, xb, equal_nan=True) and (
        (ra is None and rb is None) or (ra is not None and rb is not None and np.array_equal(ra, rb))
    )


def test_plain_number_text_takes_the_cast_and_odd_text_is_bad() -> None:
    arr = pa.array(["1.5", None, "-2e3", "inf", "nan", "1e999", "abc", "+.5"])
    x, bad = to_float(arr, 7.0, "c")
    assert x.tolist() == [1.5, 7.0, -2000.0, 0.0, 0.0, np.inf, 0.0, 0.5]
    assert bad is not None and bad.rows.tolist() == [3, 4, 5, 6] and bad.column == "c"
    for value in (["1.5", "2"], ["inf"], ["x", "1"], [None, "3"]):
        assert _same(_result(pa.array(value), 0.0), _general(pa.array(value), 0.0)), value
    x, bad = to_float(pa.array(["1", None]), np.nan, "c")  # a NaN default makes a null a bad row
    assert np.isnan(x[1]) and bad is not None and bad.rows.tolist() == [1]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.none() | st.text(alphabet="0123456789.eE+-infaINFAy ", max_size=7), max_size=12),
    st.sampled_from([0.0, 2.5, np.nan]),
)
def test_both_paths_agree(values: list[str | None], default: float) -> None:
    for t in (pa.string(), pa.large_string()):
        arr = pa.array(values, t)
        assert _same(_result(arr, default), _general(arr, default)), values


def test_numbers_padded_with_spaces_are_numbers() -> None:
    """A CSV cell padded by hand (``" 1"``, ``"2 "``) is the number, as the pattern says; Arrow's cast alone
    refused it with a bare ArrowInvalid naming no column."""
    x, bad = to_float(pa.array([" 1", "2 ", "\t3.5 ", "x", None]), -1.0, "c")
    assert x.tolist() == [1.0, 2.0, 3.5, 0.0, -1.0]
    assert bad is not None and bad.rows.tolist() == [3]


def test_a_dictionary_is_computed_on_once_per_column_and_thread_and_only_the_latest_kept():
    import threading

    from recpipe.features.columns import dictionary_cached

    calls: list[int] = []

    def count(d: pa.Array) -> int:
        calls.append(len(d))
        return len(d)

    one, two = pa.array(["a", "b"]), pa.array(["a", "b", "c"])
    assert [dictionary_cached(one, "x", "n", count) for _ in range(3)] == [2, 2, 2] and calls == [2]
    assert dictionary_cached(two, "x", "n", count) == 3 and calls == [2, 3]  # a new window's dictionary
    assert dictionary_cached(one, "x", "n", count) == 2 and calls == [2, 3, 2]  # only the latest was kept
    assert dictionary_cached(one, "y", "n", count) == 2 and calls == [2, 3, 2, 2]  # another column
    assert dictionary_cached(one.slice(1), "x", "n", count) == 1  # a slice is another dictionary
    other = threading.Thread(target=dictionary_cached, args=(one, "x", "n", count))
    other.start()
    other.join()
    assert calls[-1] == 2 and len(calls) == 6  # a thread has its own entries
