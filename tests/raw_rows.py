"""Raw rows as producers and clients write them (hypothesis strategies), for the raw-value contract tests:
Criteo (DeepCTR's sample: empty integer fields, negative I2, empty categoricals, ids as text or numbers) and
Taobao (ids, a bucketized price, the ``|``/``\\x03`` history: empty, long, null)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
from hypothesis import strategies as st

TAOBAO_IDS = ("user_id", "cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level",
              "shopping_level", "occupation", "new_user_class_level", "adgroup_id", "cate_id", "campaign_id",
              "customer", "brand", "pid")  # fmt: skip

# How a column is typed in the files a producer writes: ints with nulls, floats with NaN, or text.
INT, FLOAT, TEXT = pa.int64(), pa.float64(), pa.string()


def missing(t: pa.DataType) -> st.SearchStrategy:
    return st.sampled_from([None, float("nan")] if t == FLOAT else [None, ""] if t == TEXT else [None])


def count(t: pa.DataType, lo: int, hi: int) -> st.SearchStrategy:
    n = st.integers(lo, hi)
    value = n.map(float) if t == FLOAT else n.map(str) if t == TEXT else n
    return st.one_of(missing(t), value)


def category(t: pa.DataType, hexadecimal: bool = True) -> st.SearchStrategy:
    """Criteo's categoricals are hashed 8-digit hex text (some all digits); Taobao's ids are numbers
    (``num_buckets``: text must be decimal)."""
    if t == TEXT:
        text = st.integers(0, 10**6).map(str)
        if hexadecimal:
            text = st.one_of(st.text("0123456789abcdef", min_size=8, max_size=8), text)
        return st.one_of(missing(t), text)
    return st.one_of(missing(t), st.integers(0, 10**6).map(float if t == FLOAT else int))


def history() -> st.SearchStrategy:
    item = st.tuples(st.integers(0, 10**6), st.integers(0, 5000), st.integers(0, 10**5)).map(
        lambda t: "\x03".join(map(str, t))
    )
    return st.one_of(st.sampled_from([None, ""]), st.lists(item, min_size=1, max_size=120).map("|".join))


@st.composite
def criteo_rows(draw: st.DrawFn) -> tuple[list[dict], dict[str, pa.DataType]]:
    types = {f"I{i}": draw(st.sampled_from([INT, FLOAT, TEXT])) for i in range(1, 14)}
    types |= {f"C{i}": draw(st.sampled_from([TEXT, INT])) for i in range(1, 27)}
    n = draw(st.integers(1, 6))
    rows = []
    for _ in range(n):
        row = {c: draw(count(t, -2, 5000) if c.startswith("I") else category(t)) for c, t in types.items()}
        rows.append(row)
    return rows, types


@st.composite
def taobao_rows(draw: st.DrawFn) -> tuple[list[dict], dict[str, pa.DataType]]:
    types = {c: draw(st.sampled_from([INT, TEXT])) for c in TAOBAO_IDS}
    types["price"] = draw(st.sampled_from([FLOAT, TEXT]))
    types["click_50_seq"] = TEXT
    n = draw(st.integers(1, 6))
    rows = []
    for _ in range(n):
        row = {c: draw(category(t, False) if c != "price" else count(t, 0, 10**5)) for c, t in types.items()}
        row["click_50_seq"] = draw(history())
        rows.append(row)
    return rows, types


def typed(rows: list[dict], types: dict[str, pa.DataType]) -> pa.Table:
    """What a producer's typed file holds (a float NaN stays NaN, an empty text stays "")."""
    return pa.Table.from_pylist(rows, schema=pa.schema([(c, t) for c, t in types.items()]))


def json_records(rows: list[dict]) -> list[dict]:
    """The rows as a JSON client sends them (JSON has no NaN: it sends null)."""
    clean = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]
    return json.loads(json.dumps(clean))
