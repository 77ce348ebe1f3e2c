"""Fuzzing the readers and FG (hypothesis, bounded): random bytes as data files and random strings in every
column raise nothing but the project's DataError / BadRowError, and always with the file's name."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recpipe.config import load_config
from recpipe.data.sources import open_source
from recpipe.data.types import DataError
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator

ROOT = Path(__file__).resolve().parents[2]
BOUNDED = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
SPEC = build_feature_spec(load_config(ROOT / "configs" / "din_taobao_small.yaml"))


def _read_everything(path: Path) -> None:
    source = open_source(str(path))
    source.schema()
    source.num_rows()
    for sb in source.iter_batches(batch_rows=64):
        assert sb.file.endswith(path.name)


@BOUNDED
@given(
    data=st.one_of(
        st.binary(max_size=3000),
        st.text(alphabet=st.sampled_from(list("0123456789,;\t\n\"' abc-.e\x03|")), max_size=800).map(
            str.encode
        ),
    ),
    suffix=st.sampled_from([".csv", ".tsv", ".csv.gz", ".parquet"]),
    gz=st.booleans(),
)
def test_random_files_raise_only_data_errors_naming_the_file(tmp_path, data, suffix, gz):
    path = tmp_path / f"fuzz-{len(data)}{suffix}"
    path.write_bytes(gzip.compress(data)[: len(data) + 20] if gz and suffix.endswith(".gz") else data)
    try:
        _read_everything(path)
    except DataError as err:
        assert path.name in str(err), f"the error does not name the file: {err}"


_COLUMNS = SPEC.input_columns()


@BOUNDED
@given(
    values=st.lists(
        st.one_of(
            st.none(), st.text(max_size=12), st.sampled_from(["1", "0", "-1", "1e18", "nan", "\x03", "|"])
        ),
        min_size=len(_COLUMNS) * 3,
        max_size=len(_COLUMNS) * 3,
    )
)
def test_random_strings_in_every_column_raise_only_bad_row_errors_naming_the_file(values):
    rows = 3
    table = pa.table(
        {c: pa.array(values[i * rows : (i + 1) * rows], pa.string()) for i, c in enumerate(_COLUMNS)}
    )
    for policy in ("error", "skip"):
        try:
            out = FeatureGenerator(SPEC, on_bad_row=policy)(table, file="fuzz-part.csv", first_row=10)
        except (BadRowError, DataError) as err:
            assert policy == "error" or not isinstance(err, BadRowError), "skip must not raise for a bad row"
            assert "fuzz-part.csv" in str(err), f"the error does not name the file: {err}"
        else:
            assert out.num_rows <= rows


def test_the_fuzz_is_not_vacuous(tmp_path):
    """The same checks see a real error: a bad file is refused, naming it."""
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="bad.parquet"):
        _read_everything(path)


@BOUNDED
@given(
    cells=st.lists(
        st.text(alphabet=st.sampled_from(list('0123456789-.eE abc\x03|"')), max_size=10),
        min_size=len(_COLUMNS) * 4,
        max_size=len(_COLUMNS) * 4,
    )
)
def test_random_csv_cells_through_the_reader_and_fg(tmp_path, cells):
    """A CSV with the config's columns and random cells: read and FG'd, every error names the file."""
    import csv

    path = tmp_path / "fuzz-cells.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_COLUMNS)
        for r in range(4):
            w.writerow(cells[r * len(_COLUMNS) : (r + 1) * len(_COLUMNS)])
    fg = FeatureGenerator(SPEC, on_bad_row="skip")
    try:
        for sb in open_source(str(path)).iter_batches(batch_rows=2, columns=_COLUMNS):
            fg(sb.batch, sb.file, sb.first_row)
    except DataError as err:
        assert not isinstance(err, BadRowError), "skip must not raise for a bad row"
        assert path.name in str(err), f"the error does not name the file: {err}"
    st_ = fg.stats
    assert st_.rows_read == st_.rows_emitted + st_.rows_skipped
