"""Kind ``match`` (TorchEasyRec's match_feature): TorchEasyRec's examples (tzrec/features/match_feature_test.py
inputs and outputs, written here), the ALL wildcard, show_pkey / show_skey, Arrow maps, bad rows, the
raw-value contract, fg.json and a hypothesis check against a nested-dict lookup."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, dense, every_representation, fg, ids, round_trip, spec_of

from recpipe.config import ConfigError
from recpipe.features.fg import BadRowError
from recpipe.features.hashing import fnv1a64_py

NESTED = ["ca^ba:1,bb:2|cb^ba:3,bb:4"] * 3 + ["", ""]
ROWS = {"m": NESTED, "cate": ["ca", "ca", "", "ca", None], "brand": ["ba", "", "", "ba", None]}
BOUNDS = [-0.5, 0.5, 1.5, 2.5]


def match(**kw) -> dict:
    return {"kind": "match", "name": "mt", "nested_map": "m", "pkey": "cate", "skey": "brand", **kw}


def test_dense_value_of_the_pair() -> None:
    assert dense(spec_of(match()), ROWS) == [1, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("default", "want"), [("0", [[2], [1], [1], [1], [1]]), (None, [[2], [], [], [], []])]
)
def test_boundaries(default, want) -> None:
    spec = spec_of(match(boundaries=BOUNDS, default_value=default))
    assert spec.feature("mt").mapping.size == 5 and ids(spec, ROWS) == want


@pytest.mark.parametrize(
    ("default", "want"), [(None, [[1], [], [], [], []]), ("0", [[1], [0], [0], [0], [0]])]
)
def test_num_buckets(default, want) -> None:
    assert ids(spec_of(match(num_buckets=10, default_value=default)), ROWS) == want


def test_the_all_wildcard_and_the_combiner() -> None:
    assert dense(spec_of(match(pkey="ALL")), ROWS) == [4, 0, 0, 0, 0]  # ba under ca and cb
    assert dense(spec_of(match(skey="ALL")), ROWS) == [3, 3, 0, 0, 0]  # everything under ca
    assert dense(spec_of(match(skey="ALL", combiner="max")), ROWS) == [2, 2, 0, 0, 0]
    assert dense(spec_of(match(skey="ALL", combiner="mean")), ROWS) == [1.5, 1.5, 0, 0, 0]
    assert dense(spec_of(match(pkey="ALL", skey="ALL", combiner="min")), ROWS) == [1, 1, 1, 0, 0]
    spec = spec_of(match(pkey="ALL"))
    assert spec.dense[0].inputs == ["brand"]


def test_ids_prefixed_with_the_matched_keys() -> None:
    spec = spec_of(
        match(pkey="ALL", hash_bucket_size=1000, show_pkey=True, show_skey=True, default_value=None)
    )
    want = [fnv1a64_py(s) % 1000 for s in ("ca_ba_1", "cb_ba_3")]
    assert ids(spec, ROWS)[0] == want
    only = spec_of(match(hash_bucket_size=1000, show_skey=True, default_value=None))
    assert ids(only, ROWS)[0] == [fnv1a64_py("ba_1") % 1000]


def test_an_arrow_map_of_primary_keys() -> None:
    m = pa.array([{"ca": "ba:1,bb:2", "cb": "ba:3"}, None], type=pa.map_(pa.string(), pa.string()))
    assert dense(spec_of(match(pkey="ALL")), {"m": m, "cate": ["ca", "ca"], "brand": ["ba", "ba"]}) == [4, 0]


def test_bad_rows_and_refusals() -> None:
    with pytest.raises(BadRowError, match=r"row 0, column 'm': expected key\^value pairs separated by '\|'"):
        fg(spec_of(match()), {"m": ["ca:1"], "cate": ["ca"], "brand": ["ba"]})
    with pytest.raises(BadRowError, match="row 1, column 'm': expected secondary key:value pairs"):
        fg(spec_of(match()), {"m": ["ca^ba:1", "ca^ba"], "cate": ["ca", "ca"], "brand": ["ba", "ba"]})
    with pytest.raises(ConfigError, match="a key prefix makes the value an id"):
        config(match(show_pkey=True))
    with pytest.raises(ConfigError, match="combiner"):
        config(match(combiner="count"))


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(match(), match(num_buckets=10, default_value=None) | {"name": "mt_id"})
    rows = [
        {"m": "1^2:5|3^4:6", "cate": 1, "brand": 2},
        {"m": "1^2:5|3^4:6", "cate": 3.0, "brand": "4"},
        {"m": None, "cate": 1, "brand": 2},
        {"m": "", "cate": 1, "brand": 2},
        {"m": "1^2:5", "cate": None, "brand": 2},
    ]
    out = every_representation(cfg, rows, tmp_path)
    assert out.dense[:, 0].tolist() == [5, 6, 0, 0, 0] and out.values[0].tolist() == [5, 6]
    assert dense(spec_of(match()), {"m": ["ca^ba:1"], "cate": ["ca"]}) == [0]  # skey absent at serving


def test_fg_json_round_trip() -> None:
    for kw in ({}, {"pkey": "ALL", "boundaries": BOUNDS}, {"hash_bucket_size": 9, "show_pkey": True}):
        round_trip(spec_of(match(**kw)), pa.table(ROWS))


_K = st.sampled_from(["p", "q", "r"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.dictionaries(_K, st.dictionaries(_K, st.integers(0, 9), max_size=3), max_size=3), _K, _K
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["cate", "ALL"]),
    st.sampled_from(["brand", "ALL"]),
)
def test_matches_a_nested_dict_lookup(rows, pkey: str, skey: str) -> None:
    text = [
        "|".join(f"{p}^" + ",".join(f"{s}:{v}" for s, v in inner.items()) for p, inner in m.items() if inner)
        for m, _, _ in rows
    ]
    want = []
    for m, p, s in rows:
        found = [
            v
            for pk, inner in m.items()
            for sk, v in inner.items()
            if (pkey == "ALL" or pk == p) and (skey == "ALL" or sk == s)
        ]
        want.append(float(sum(found)))
    data = {"m": text, "cate": [p for _, p, _ in rows], "brand": [s for _, _, s in rows]}
    np.testing.assert_allclose(dense(spec_of(match(pkey=pkey, skey=skey)), data), want)
