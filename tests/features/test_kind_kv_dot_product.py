"""Kind ``kv_dot_product`` (TorchEasyRec's kv_dot_product): the documented examples of feature.md (KvDotProduct,
written here from its table of inputs and outputs), the choices recpipe makes where the docs are silent,
bad rows, the raw-value contract, fg.json and a hypothesis check against a dict dot product."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, dense, every_representation, fg, ids, round_trip, spec_of

from recpipe.config import ConfigError
from recpipe.features.fg import BadRowError, FeatureGenerator


def kv(**kw) -> dict:
    return {"kind": "kv_dot_product", "name": "query_doc_sim", "query": "query", "document": "title", **kw}


_MAP = pa.map_(pa.string(), pa.float64())


@pytest.mark.parametrize(
    ("query", "document", "want"),
    [
        # feature.md, KvDotProduct (separator "|"): query, document → output
        (pa.array(["a:0.5|b:0.5"]), pa.array(["d:0.5|b:0.5"]), 0.25),
        (pa.array([["a:0.5", "b:0.5"]]), pa.array([["d:0.5", "b:0.5"]]), 0.25),
        (pa.array([{"a": 0.5, "b": 0.5}], _MAP), pa.array([{"d": 0.5, "b": 0.5}], _MAP), 0.25),
        (pa.array([["a:0.5", "b:0.5"]]), pa.array([{"d": 0.5, "b": 0.5}], _MAP), 0.25),
        (pa.array([["a", "b", "c"]]), pa.array([["a", "b", "d"]]), 2.0),
        (pa.array([["a", "b", "c"]]), pa.array(["a|b|d"]), 2.0),
        (pa.array([["a", "b", "c"]]), pa.array([{"a": 0.5, "b": 0.5}], _MAP), 1.0),
    ],
)
def test_the_documented_examples(query: pa.Array, document: pa.Array, want: float) -> None:
    spec = spec_of(kv(separator="|"))
    assert dense(spec, {"query": query, "title": document}) == [want]


def test_many_rows_ids_and_a_kv_delimiter() -> None:
    rows = {"query": ["a=2\x1db=3", "a=1", "c=1", None], "title": ["a=0.5\x1db=1", "b=4", "c=-2", "c=1"]}
    assert dense(spec_of(kv(kv_delimiter="=")), rows) == [4.0, 0.0, -2.0, 0.0]
    # Integer key sets (a list of ids, one id per row): keys compared as text.
    rows = {"query": pa.array([[1, 2, 3], [7]]), "title": pa.array([["1", "3"], ["7:2.5"]])}
    assert dense(spec_of(kv()), rows) == [2.0, 2.5]
    rows = {"query": pa.array([7, 8]), "title": pa.array(["7\x1d8", "9"])}
    assert dense(spec_of(kv()), rows) == [1.0, 0.0]


def test_recpipes_choices_where_the_docs_are_silent() -> None:
    # A key written twice on one side takes its first value.
    assert dense(spec_of(kv()), {"query": ["a:1\x1da:5"], "title": ["a:2"]}) == [2.0]
    # A missing side takes default_value; no common key is 0.
    rows = {"query": ["a:1", "", None, "a:1"], "title": [None, "a:1", "a:1", "b:1"]}
    assert dense(spec_of(kv(default_value="-1")), rows) == [-1, -1, -1, 0]
    assert dense(spec_of(kv()), rows) == [0, 0, 0, 0]  # TorchEasyRec's default "0"


def test_boundaries_and_a_normalizer() -> None:
    rows = {"query": ["a:1\x1db:1", "a:1", None], "title": ["a:1\x1db:1", "b:1", "a:1"]}
    spec = spec_of(kv(boundaries=[0.5, 1.5], embedding_dim=4))
    assert ids(spec, rows) == [[2], [0], [0]]  # 2.0, 0.0 and the default 0
    assert ids(spec_of(kv(boundaries=[0.5, 1.5], default_value=None)), rows) == [[2], [0], []]
    assert dense(spec_of(kv(normalizer="log(x+1)")), rows) == [round(float(np.log(3.0)), 6), 0.0, 0.0]


def test_bad_rows_name_the_column_and_what_was_expected() -> None:
    spec = spec_of(kv())
    with pytest.raises(BadRowError, match=r"row 1, column 'title': expected a finite number as the value"):
        fg(spec, {"query": ["a:1", "a:1"], "title": ["a:1", "a:x"]})
    gen = FeatureGenerator(spec, on_bad_row="skip", with_labels=False)
    out = gen(pa.table({"query": ["a:1", "a:x", "a:2"], "title": ["a:1", "a:1", "a:1"]}))
    assert out.dense[:, 0].tolist() == [1.0, 2.0] and gen.stats.skipped_by_column == {"query": 1}


def test_configs_that_are_probably_mistakes_are_refused() -> None:
    with pytest.raises(ConfigError, match="kv_delimiter"):
        config(kv(kv_delimiter="::"))
    with pytest.raises(ConfigError, match="default_value 'x' is not a number"):
        config(kv(default_value="x"))
    with pytest.raises(ConfigError, match="names its input columns itself; column is not used"):
        config(kv(column="query"))
    with pytest.raises(ConfigError, match="query"):
        config({"kind": "kv_dot_product", "name": "s", "document": "title"})


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(kv(), {**kv(boundaries=[0.5, 1.5], default_value=None), "name": "sim_id"})
    rows = [
        {"query": "a:1\x1db:2", "title": "b:2"},
        {"query": None, "title": "b:2"},
        {"query": "", "title": "b:2"},
        {"query": "7:1", "title": None},
        {"query": 7, "title": "7:3"},
        {"query": 7.0, "title": "7"},
    ]
    out = every_representation(cfg, rows, tmp_path)
    assert out.dense[:, 0].tolist() == [4, 0, 0, 0, 3, 1]
    assert out.lengths[0].tolist() == [1, 0, 0, 0, 1, 1]
    # A column a request does not carry is all missing at serving: the default.
    spec = spec_of(kv(default_value="-1"))
    assert dense(spec, {"query": ["a:1"]}) == [-1] and dense(spec, {"title": ["a:1"]}) == [-1]


def test_fg_json_round_trip() -> None:
    rows = pa.table({"query": ["a:1\x1db:2", "a=3"], "title": ["b:2", "a=1"]})
    for kw in ({}, {"boundaries": [0.5, 1.5]}, {"kv_delimiter": "="}):
        spec = spec_of(kv(**kw))
        entry = (spec.dense or spec.sparse)[0]
        assert entry.kind == "kv_dot_product" and entry.column == "query" and entry.inputs == ["title"]
        round_trip(spec, rows)


_KEY = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.dictionaries(_KEY, st.integers(-5, 5), max_size=4),
            st.dictionaries(_KEY, st.integers(-5, 5), max_size=4),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_matches_a_dict_dot_product_row_by_row(rows) -> None:
    query = ["\x1d".join(f"{k}:{v}" for k, v in q.items()) for q, _ in rows]
    title = ["\x1d".join(f"{k}:{v}" for k, v in d.items()) for _, d in rows]
    want = [float(sum(v * d[k] for k, v in q.items() if k in d)) if q and d else 0.0 for q, d in rows]
    got = dense(spec_of(kv()), {"query": query, "title": title})
    np.testing.assert_allclose(got, want, atol=1e-6)
