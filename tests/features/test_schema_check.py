"""The data checked against the config's columns before any row is read: every problem at once, with
the columns the data really has."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.features.schema_check import SchemaMismatch, check_source, schema_problems, source_schema

ROOT = Path(__file__).resolve().parents[2]

CRITEO = "configs/dlrm_criteo_small.yaml"
TAOBAO = "configs/din_taobao_small.yaml"


def _spec(path: str):
    return build_feature_spec(load_config(ROOT / path))


def test_every_missing_column_and_bad_type_is_listed_once():
    spec = _spec(CRITEO)
    fields = [("label", pa.int8())] + [(f"I{i}", pa.float32()) for i in range(1, 13)]  # I13 missing
    fields += [(f"C{i}", pa.string()) for i in range(1, 26)] + [("C26", pa.list_(pa.int64()))]
    fields[1] = ("I1", pa.list_(pa.float32()))
    problems = schema_problems(spec, pa.schema(fields))
    assert problems == [
        "missing columns ['I13'] (read by feature 'I13')",
        "column 'I1' (feature 'I1'): expected a numeric (or numeric text) column, got list<item: float>",
    ]  # C26 is hashed: any column has a string form


def test_without_labels_the_label_is_not_needed():
    spec = _spec(CRITEO)
    schema = source_schema("synthetic:criteo?rows=10").remove(0)  # no 'label'
    assert schema_problems(spec, schema, with_labels=False) == []
    assert schema_problems(spec, schema) == ["missing columns ['label'] (read by the label)"]


def test_the_message_lists_all_the_columns_of_the_data_not_the_projected_ones(tmp_path):
    # Issue 17: "missing columns ['int_0', …]; the file has ['label']" when the file had 41 columns.
    cfg = load_config(ROOT / CRITEO, {})
    for f in cfg.features:
        if f.name.startswith("I"):
            f.column = f"int_{int(f.name[1:]) - 1}"
    pq.write_table(source_schema("synthetic:criteo?rows=10").empty_table(), tmp_path / "part-0.parquet")
    with pytest.raises(SchemaMismatch) as err:
        check_source(build_feature_spec(cfg), str(tmp_path))
    missing = [f"int_{i}" for i in range(13)]
    assert (
        str(err.value).splitlines()[1]
        == f"  missing columns {missing} (read by feature 'I1', feature 'I2', feature 'I3', …)"
    )
    assert "the data has 41 columns: ['label', 'I1'," in str(err.value)
    assert err.value.problems == [str(err.value).splitlines()[1].strip()]


def test_synthetic_sources_are_checked_without_generating_them():
    check_source(_spec(CRITEO), "synthetic:criteo?rows=100000000")  # 10 rows are generated, not 1e8
    with pytest.raises(SchemaMismatch, match="missing columns \\['user_id'"):
        check_source(_spec(TAOBAO), "synthetic:criteo?rows=100000000")
