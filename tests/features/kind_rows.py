"""Helpers of the per-kind tests (test_kind_*.py): a one-group config of the given features, FG over a table,
and the raw-value contract's check that every representation of the same rows (a typed Arrow table, a Parquet
file and a CSV file read by the trainer's reader, a pandas DataFrame of many rows or of one, JSON records)
gives the same FG output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from raw_rows import json_records

from recpipe.config import RecpipeConfig, parse_config
from recpipe.data.sharding import Shard
from recpipe.data.sources import open_source
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.raw import to_arrow
from recpipe.features.spec import FeatureSpec


def config(features: list[dict], group: list[str] | None = None) -> RecpipeConfig:
    """A DLRM config reading ``features``, all of them (or ``group``) in one deep group."""
    return parse_config(
        {
            "name": "kinds",
            "data": {"label": "label"},
            "features": features,
            "feature_groups": [
                {"name": "all", "type": "deep", "features": group or [f["name"] for f in features]}
            ],
            "model": {
                "type": "dlrm",
                "dense_mlp": {"hidden_units": [8, 16]},
                "over_mlp": {"hidden_units": [8]},
                "sparse_group": "all",
            },
        }
    )


def spec_of(features: list[dict]) -> FeatureSpec:
    return build_feature_spec(config(features))


def fg(spec: FeatureSpec, rows: pa.Table | pa.RecordBatch | dict, labels: bool = False) -> FGOutput:
    table = pa.table(rows) if isinstance(rows, dict) else rows
    return FeatureGenerator(spec, with_labels=labels)(table)


def key(out: FGOutput, spec: FeatureSpec, name: str) -> tuple[list[int], list[int]]:
    """``(values, lengths)`` of one pooled key as lists."""
    j = spec.sparse_keys().index(name)
    return out.values[j].tolist(), out.lengths[j].tolist()


def same(a: FGOutput, b: FGOutput, what: str) -> None:
    assert a.num_rows == b.num_rows, what
    np.testing.assert_array_equal(a.dense, b.dense, err_msg=f"dense of {what}")
    for k, (va, vb, la, lb) in enumerate(zip(a.values, b.values, a.lengths, b.lengths)):
        np.testing.assert_array_equal(la, lb, err_msg=f"lengths of key {k} of {what}")
        np.testing.assert_array_equal(va, vb, err_msg=f"values of key {k} of {what}")


def _read(path: Path, cfg: RecpipeConfig) -> pa.Table:
    source = open_source(str(path), csv=cfg.csv_options())
    return pa.Table.from_batches([sb.batch for sb in source.iter_batches(Shard(0, 1))])


def every_representation(
    cfg: RecpipeConfig, rows: list[dict], types: dict[str, pa.DataType], tmp: Path, csv: bool = True
) -> FGOutput:
    """FG of ``rows`` typed by ``types``, checked equal over Parquet, CSV (``csv``: no list columns), a
    DataFrame, one-row DataFrames and JSON records; returns it."""
    spec = build_feature_spec(cfg)
    rows = [{**r, "label": i % 2} for i, r in enumerate(rows)]  # a CSV line of only empty fields is no row
    table = pa.Table.from_pylist(rows, schema=pa.schema([*types.items(), ("label", pa.int64())]))
    want = fg(spec, table)
    pq.write_table(table, tmp / "rows.parquet")
    same(want, fg(spec, _read(tmp / "rows.parquet", cfg)), "the Parquet reader")
    if csv:
        pacsv.write_csv(table, tmp / "rows.csv")
        same(want, fg(spec, _read(tmp / "rows.csv", cfg)), "the CSV reader")
    same(want, fg(spec, to_arrow(pd.DataFrame.from_records(rows))), "a DataFrame")
    for i, row in enumerate(rows):
        same(
            want.slice(i, i + 1), fg(spec, to_arrow(pd.DataFrame([row]))), f"the one-row DataFrame of row {i}"
        )
    same(want, fg(spec, to_arrow(json_records(rows))), "JSON records")
    return want
