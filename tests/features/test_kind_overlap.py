"""Kind ``overlap`` (TorchEasyRec's overlap_feature): TorchEasyRec's examples (tzrec/features/overlap_feature_test.py
inputs and outputs, written here), every documented method, the raw-value contract, fg.json and a hypothesis
check of every method against a per-row Python reference."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, dense, every_representation, ids, round_trip, spec_of

from recpipe.config import ConfigError
from recpipe.config.features import OVERLAP_METHODS

Q = ["abc\x1defg", "abc\x1defg", "", None]


def overlap(method: str, **kw) -> dict:
    return {"kind": "overlap", "name": "ov", "query": "q", "title": "t", "method": method, **kw}


@pytest.mark.parametrize(
    ("method", "title", "want"),
    [
        ("query_common_ratio", ["abc\x1dqwe\x1drty\x1duio", "abc\x1defg\x1drty", "", None], [0.5, 1, 0, 0]),
        ("title_common_ratio", ["abc\x1dqwe\x1drty\x1duio", "abc", "", None], [0.25, 1, 0, 0]),
        ("is_contain", ["abc\x1dqwe\x1drty\x1duio", "abc\x1defg\x1drty", "", None], [0, 1, 0, 0]),
        ("is_equal", ["abc\x1defg\x1drty", "abc\x1defg", "", None], [0, 1, 0, 0]),
    ],
)
def test_torcheasyrec_examples(method: str, title: list, want: list[float]) -> None:
    assert dense(spec_of(overlap(method)), {"q": Q, "t": title}) == want


def test_list_columns_and_boundaries() -> None:
    q = pa.array([["abc", "defg"], ["abc", "efg"], [], None])
    t = pa.array([["abc", "qwe", "rty", "uio"], ["abc", "efg", "rty"], [], None])
    assert dense(spec_of(overlap("query_common_ratio")), {"q": q, "t": t}) == [0.5, 1, 0, 0]
    spec = spec_of(overlap("query_common_ratio", boundaries=[0.25, 0.75]))
    title = ["abc\x1dqwe\x1drty\x1duio", "abc\x1defg\x1drty", "", None]
    assert ids(spec, {"q": Q, "t": title}) == [[1], [2], [0], [0]]


def test_position_and_proximity_methods() -> None:
    rows = {
        "q": ["a b", "a b", "a b c", "x", "a b", ""],
        "t": ["c a d d b a", "b x a", "a b", "x x", "b c", "a"],
    }

    def run(method: str) -> list[float]:
        return dense(spec_of(overlap(method, separator=" ")), rows)

    assert run("index_of") == [-1, -1, -1, 0, -1, -1]
    assert run("proximity_min_cover") == [2, 3, 0, 1, 0, 0]
    assert run("proximity_min_dist") == [1, 2, 1, 3, 3, 2]
    assert run("proximity_max_dist") == [1, 2, 1, 3, 3, 2]
    assert dense(spec_of(overlap("index_of", separator=" ")), {"q": ["b a"], "t": ["x b a b a"]}) == [1]
    three = {"q": ["a b c"], "t": ["a x b x x c"]}
    for method, want in (("min", 2), ("max", 5), ("avg", (2 + 5 + 3) / 3)):
        got = dense(spec_of(overlap(f"proximity_{method}_dist", separator=" ")), three)
        assert got == [round(want, 6)], method


def test_a_default_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="default_value"):
        config(overlap("is_equal", default_value="1"))
    with pytest.raises(ConfigError, match="method"):
        config(overlap("edit_distance"))


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(overlap("query_common_ratio"), overlap("is_contain", boundaries=[0.5]) | {"name": "c"})
    rows = [
        {"q": "a\x1db", "t": "b\x1da\x1dc"},
        {"q": None, "t": "a"},
        {"q": "", "t": "a"},
        {"q": "a", "t": None},
        {"q": 7, "t": "7\x1d8"},
    ]
    out = every_representation(cfg, rows, tmp_path)
    assert out.dense[:, 0].tolist() == [1, 0, 0, 0, 1]
    assert out.values[0].tolist() == [0, 0, 0, 0, 1]
    assert dense(spec_of(overlap("index_of")), {"q": ["a"]}) == [-1]  # title absent at serving


def test_fg_json_round_trip() -> None:
    for method in OVERLAP_METHODS:
        spec = spec_of(overlap(method, separator=" "))
        assert spec.dense[0].params == {"method": method, "separator": " ", "default_value": None}
        round_trip(spec, pa.table({"q": ["a b", ""], "t": ["b a c", "x"]}))


def _reference(q: list[str], t: list[str], method: str) -> float:
    """The method row by row, as the kind's docstring reads TorchEasyRec's table."""
    none = {"index_of": -1.0, "proximity_min_cover": 0.0}.get(method, 0.0)
    if method.endswith("_dist"):
        none = len(t) + 1.0
    if not q or not t:
        return none
    if method == "query_common_ratio":
        return sum(x in t for x in q) / len(q)
    if method == "title_common_ratio":
        return sum(x in q for x in t) / len(t)
    if method == "is_equal":
        return float(q == t)
    at = next((p for p in range(len(t) - len(q) + 1) if t[p : p + len(q)] == q), -1)
    if method == "index_of":
        return float(at)
    if method == "is_contain":
        return float(at >= 0)
    terms = sorted(set(q))
    pos = {x: [i for i, y in enumerate(t) if y == x] for x in terms}
    if method == "proximity_min_cover":
        if any(not pos[x] for x in terms):
            return 0.0
        return float(
            min(
                max(min(p for p in pos[x] if p >= s) for x in terms) - s + 1
                for s in range(len(t))
                if all(any(p >= s for p in pos[x]) for x in terms)
            )
        )
    found = [x for x in terms if pos[x]]
    d = [min(abs(i - j) for i in pos[a] for j in pos[b]) for a, b in combinations(found, 2)]
    if not d:
        return none
    return float({"min": min(d), "max": max(d), "avg": sum(d) / len(d)}[method.split("_")[1]])


_TERMS = st.lists(st.sampled_from("abcde"), max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_TERMS, _TERMS), min_size=1, max_size=8), st.sampled_from(OVERLAP_METHODS))
def test_every_method_matches_the_reference(rows, method: str) -> None:
    q = [" ".join(a) for a, _ in rows]
    t = [" ".join(b) for _, b in rows]
    want = [_reference(a, b, method) for a, b in rows]
    got = dense(spec_of(overlap(method, separator=" ")), {"q": q, "t": t})
    np.testing.assert_allclose(got, want, atol=1e-5)
