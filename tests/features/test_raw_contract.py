"""The raw-value contract (recpipe.features.raw): the same raw rows give the same FG output whether they come
as a typed Arrow table, a Parquet file or a CSV file read by the trainer's readers, a pandas DataFrame (one row
or many) or JSON records as a serving client sends them.

Rows are generated (hypothesis) for both shipped schemas: Criteo (DeepCTR's sample: empty integer fields,
negative I2, empty categoricals, ids as text or numbers) and Taobao (ids, a bucketized price, the
``|``/``\\x03`` history: empty, long, null).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from raw_rows import criteo_rows, json_records, taobao_rows, typed

from recpipe.config import load_config
from recpipe.data.sharding import Shard
from recpipe.data.sources import open_source
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.raw import normalize_column, to_arrow

ROOT = Path(__file__).resolve().parents[2]
CRITEO_CFG = load_config(ROOT / "configs" / "dlrm_criteo_small.yaml")
TAOBAO_CFG = load_config(ROOT / "configs" / "din_taobao_small.yaml")
CRITEO, TAOBAO = build_feature_spec(CRITEO_CFG), build_feature_spec(TAOBAO_CFG)
CSV = {id(CRITEO): CRITEO_CFG.csv_options(), id(TAOBAO): TAOBAO_CFG.csv_options()}


def _fg(spec, table: pa.Table) -> FGOutput:
    return FeatureGenerator(spec, with_labels=False)(table)


def _read(path: Path, spec) -> pa.Table:
    """The trainer's reader, with the config's CSV options (id and history columns read as text)."""
    source = open_source(str(path), csv=CSV[id(spec)])
    return pa.Table.from_batches([sb.batch for sb in source.iter_batches(Shard(0, 1))])


def _same(a: FGOutput, b: FGOutput, what: str) -> None:
    assert a.num_rows == b.num_rows, what
    np.testing.assert_array_equal(a.dense, b.dense, err_msg=f"dense of {what}")
    for k, (va, vb, la, lb) in enumerate(zip(a.values, b.values, a.lengths, b.lengths)):
        np.testing.assert_array_equal(la, lb, err_msg=f"lengths of key {k} of {what}")
        np.testing.assert_array_equal(va, vb, err_msg=f"values of key {k} of {what}")


def _check_every_representation(spec, rows: list[dict], types: dict, tmp: Path) -> None:
    want = _fg(spec, typed(rows, types))
    pq.write_table(typed(rows, types), tmp / "rows.parquet")
    _same(want, _fg(spec, _read(tmp / "rows.parquet", spec)), "the Parquet reader")
    pacsv.write_csv(typed(rows, types), tmp / "rows.csv")
    _same(want, _fg(spec, _read(tmp / "rows.csv", spec)), "the CSV reader")
    _same(want, _fg(spec, to_arrow(pd.DataFrame.from_records(rows))), "a DataFrame")
    for i, row in enumerate(rows):
        one = _fg(spec, to_arrow(pd.DataFrame([row])))
        _same(want.slice(i, i + 1), one, f"the one-row DataFrame of row {i}")
    _same(want, _fg(spec, to_arrow(json_records(rows))), "JSON records")


SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(criteo_rows())
def test_criteo_rows_mean_the_same_in_every_representation(tmp_path: Path, data) -> None:
    _check_every_representation(CRITEO, *data, tmp_path)


@SETTINGS
@given(taobao_rows())
def test_taobao_rows_mean_the_same_in_every_representation(tmp_path: Path, data) -> None:
    _check_every_representation(TAOBAO, *data, tmp_path)


def test_the_deepctr_one_row_request_with_a_null_scores() -> None:
    """DeepCTR's Criteo sample: I1 empty in 45% of rows, I2 negative, empty categoricals; the request a
    client builds with pd.DataFrame([row]) and I1 = None (an all-null, object column) used to fail."""
    row = {f"I{i}": i for i in range(1, 14)} | {f"C{i}": f"{i:08x}" for i in range(1, 27)}
    row |= {"I1": None, "I2": -1, "C3": "", "C7": None}
    out = _fg(CRITEO, to_arrow(pd.DataFrame([row])))
    as_missing = _fg(CRITEO, to_arrow(pd.DataFrame([row | {"I1": 0.0, "C3": None}])))
    _same(as_missing, out, "I1=None as its default 0.0, C3='' as null")
    keys = CRITEO.sparse_keys()
    assert out.lengths[keys.index("C3")][0] == 0 and out.lengths[keys.index("C7")][0] == 0


def test_an_integer_id_beyond_64_bits_is_its_digits() -> None:
    """A JSON id of 2**70 (no 64-bit type holds it) reads as its digits, the same id as that text: the request
    used to fail with OverflowError instead of scoring or naming a bad row."""
    row = {f"I{i}": i for i in range(1, 14)} | {f"C{i}": f"{i:08x}" for i in range(1, 27)}
    big = 2**70
    assert to_arrow([{"C1": big}, {"C1": 7}]).column("C1").to_pylist() == [str(big), "7"]
    _same(
        _fg(CRITEO, to_arrow(pd.DataFrame([row | {"C1": str(big)}]))),
        _fg(CRITEO, to_arrow([row | {"C1": big}])),
        "C1 = 2**70 as JSON number and as text",
    )


def test_an_absent_optional_column_is_missing_at_serving_but_an_error_at_training() -> None:
    row = {f"I{i}": 1 for i in range(1, 14)} | {f"C{i}": "a" for i in range(1, 27)}
    without = {k: v for k, v in row.items() if k not in ("I5", "C9")}
    _same(_fg(CRITEO, to_arrow([row | {"I5": None, "C9": None}])), _fg(CRITEO, to_arrow([without])), "absent")
    with pytest.raises(ValueError, match=r"missing columns \['C9', 'I5'\]"):
        FeatureGenerator(CRITEO)(to_arrow([without | {"label": 1}]))


@pytest.mark.parametrize(
    ("values", "kind", "want"),
    [
        (pa.array([None, None]), "id", pa.array([None, None], pa.int64())),
        (pa.array([1.0, None, float("nan"), 7.0]), "id", pa.array([1, None, None, 7], pa.int64())),
        (pa.array([1.5, 2.0]), "id", pa.array(["1.5", "2"])),
        (pa.array(["", "x", None]), "id", pa.array([None, "x", None])),
        (pa.array(["", "3.5"]), "float", pa.array([None, "3.5"])),
        (pa.array([float("nan"), 2.0]), "float", pa.array([None, 2.0])),
        (pa.array(["a", "b"]).dictionary_encode(), "id", pa.array(["a", "b"])),
        (pa.array([None], pa.null()), "sequence", pa.array([None], pa.string())),
    ],
)
def test_each_rule(values: pa.Array, kind: str, want: pa.Array) -> None:
    assert normalize_column(values, kind).equals(want)


def test_pandas_dtypes_clients_send() -> None:
    df = pd.DataFrame(
        {
            "nullable": pd.array([1, None, 3], dtype="Int64"),
            "mixed": pd.Series([None, 5, "x"], dtype=object),
            "category": pd.Categorical(["a", None, "a"]),
        }
    )
    t = to_arrow(df)
    assert t.column("nullable").to_pylist() == [1, None, 3]
    assert t.column("mixed").to_pylist() == [None, "5", "x"]
    assert normalize_column(t.column("category").chunk(0), "id").to_pylist() == ["a", None, "a"]


def test_an_all_digit_id_in_a_csv_stays_text(tmp_path: Path) -> None:
    """Type inference alone reads the categorical "00000000" as the integer 0 (hashed as "0"): the config's
    CSV options read every id and history column as text, so the CSV, the Parquet file and a request agree."""
    row = {f"I{i}": 1 for i in range(1, 14)} | {f"C{i}": "00000000" for i in range(1, 27)}
    pacsv.write_csv(pa.Table.from_pylist([row]), tmp_path / "r.csv")
    inferred = open_source(str(tmp_path / "r.csv")).schema().field("C1").type
    assert inferred == pa.int64()  # what the options guard against
    _same(_fg(CRITEO, to_arrow([row])), _fg(CRITEO, _read(tmp_path / "r.csv", CRITEO)), "the CSV")


def test_a_column_read_as_ids_and_as_a_number_takes_a_dataframes_float_ids() -> None:
    """The rich config's age_level: an id feature and an expr read it. Sent as a DataFrame with a null, pandas
    makes it float64; it is read as ids (the id reader refused a double column when the expr, listed later,
    made it a number column) and the expr reads the same numbers."""
    from recpipe.config import parse_config

    cfg = parse_config(
        {
            "name": "id_and_expr",
            "data": {"label": "label"},
            "features": [
                {"kind": "id", "name": "age", "num_buckets": 8},
                {"kind": "expr", "name": "half_age", "expression": "age / 2"},
            ],
            "feature_groups": [{"name": "deep", "type": "deep", "features": ["age", "half_age"]}],
            "model": {
                "type": "dlrm",
                "dense_mlp": {"hidden_units": [4]},
                "over_mlp": {"hidden_units": [4]},
                "sparse_group": "deep",
            },  # fmt: skip
        }
    )
    fg = FeatureGenerator(build_feature_spec(cfg), on_bad_row="error", with_labels=False)
    frame = pd.DataFrame({"age": [3, None, 6]})
    assert frame["age"].dtype == np.float64
    got = fg(to_arrow(frame))
    want = fg(pa.table({"age": pa.array([3, None, 6], pa.int64())}))
    assert got.values[0].tolist() == want.values[0].tolist() == [3, 6]
    np.testing.assert_array_equal(np.asarray(got.dense), np.asarray(want.dense))
