"""Helpers of the tests of kinds lookup, match, expr and overlap: a config of given features, FG over rows,
a key's ids row by row, every raw representation of the same rows (Parquet, CSV, a DataFrame, one-row
DataFrames, JSON records) and the fg.json round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from recpipe.config import RecpipeConfig, parse_config
from recpipe.data.sharding import Shard
from recpipe.data.sources import open_source
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.raw import to_arrow
from recpipe.features.spec import FeatureSpec


def config(*features: dict[str, Any]) -> RecpipeConfig:
    return parse_config(
        {
            "name": "kinds",
            "data": {"label": "label"},
            "features": list(features),
            "feature_groups": [{"name": "all", "type": "deep", "features": [f["name"] for f in features]}],
            "model": {
                "type": "dlrm",
                "dense_mlp": {"hidden_units": [8]},
                "over_mlp": {"hidden_units": [8]},
                "sparse_group": "all",
            },
        }
    )


def spec_of(*features: dict[str, Any]) -> FeatureSpec:
    return build_feature_spec(config(*features))


def fg(spec: FeatureSpec, rows: Any, serving: bool = True) -> FGOutput:
    table = rows if isinstance(rows, (pa.Table, pa.RecordBatch)) else pa.table(rows)
    return FeatureGenerator(spec, with_labels=not serving)(table)


def dense(spec: FeatureSpec, rows: Any) -> list[float]:
    return [round(float(x), 6) for x in fg(spec, rows).dense[:, 0]]


def ids(spec: FeatureSpec, rows: Any, key: int = 0) -> list[list[int]]:
    """The ids of sparse key ``key`` row by row."""
    out = fg(spec, rows)
    cuts = np.cumsum(out.lengths[key])[:-1]
    return [v.tolist() for v in np.split(out.values[key], cuts)]


def same(a: FGOutput, b: FGOutput, what: str) -> None:
    assert a.num_rows == b.num_rows, what
    np.testing.assert_array_equal(a.dense, b.dense, err_msg=f"dense of {what}")
    for k, (va, vb, la, lb) in enumerate(zip(a.values, b.values, a.lengths, b.lengths)):
        np.testing.assert_array_equal(la, lb, err_msg=f"lengths of key {k} of {what}")
        np.testing.assert_array_equal(va, vb, err_msg=f"values of key {k} of {what}")


def every_representation(cfg: RecpipeConfig, rows: list[dict[str, Any]], tmp: Path) -> FGOutput:
    """FG of ``rows`` as an Arrow table; the same from Parquet, CSV (the trainer's reader, with the config's
    text columns), a DataFrame, one-row DataFrames and JSON records."""
    spec = build_feature_spec(cfg)
    table = to_arrow(rows)  # JSON-like records: a column mixing 7 and "7" is text
    want = fg(spec, table)

    def read(path: Path) -> pa.Table:
        source = open_source(str(path), csv=cfg.csv_options())
        return pa.Table.from_batches([sb.batch for sb in source.iter_batches(Shard(0, 1))])

    pq.write_table(table, tmp / "rows.parquet")
    same(want, fg(spec, read(tmp / "rows.parquet")), "the Parquet reader")
    pacsv.write_csv(table, tmp / "rows.csv")
    same(want, fg(spec, read(tmp / "rows.csv")), "the CSV reader")
    same(want, fg(spec, to_arrow(pd.DataFrame.from_records(rows))), "a DataFrame")
    for i, row in enumerate(rows):
        same(
            want.slice(i, i + 1), fg(spec, to_arrow(pd.DataFrame([row]))), f"the one-row DataFrame of row {i}"
        )
    same(want, fg(spec, to_arrow(json.loads(json.dumps(rows)))), "JSON records")
    return want


def round_trip(spec: FeatureSpec, rows: Any) -> None:
    """fg.json keeps every entry (its kind, inputs and params) and FG from the read-back spec is the same."""
    back = FeatureSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    same(fg(spec, rows), fg(back, rows), "the fg.json round trip")
