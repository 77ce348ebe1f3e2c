"""``Scorer.predict_raw``'s request check: rows none of whose columns is the model's are refused, naming the
expected columns and the ones received; some known columns with the rest absent score as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recpipe.data.types import DataError
from recpipe.export.loaders import load_backend
from recpipe.export.scorer import check_known_columns


def test_rows_without_any_model_column_are_refused(dlrm_export):
    trained, result = dlrm_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    rows = trained.held_out.slice(0, 8).drop_columns(["label"])
    renamed = rows.rename_columns([c.lower() + "_v2" for c in rows.column_names])
    with pytest.raises(DataError) as err:
        scorer.predict_raw(renamed)
    msg = str(err.value)
    assert "none of its columns is an input column" in msg
    assert (
        "expected some of ['C1', 'C2'" in msg and "(and " in msg
    )  # the first 10 expected columns, then how many more
    assert "got ['i1_v2', 'i2_v2'" in msg and "(and 30 more)" in msg
    with pytest.raises(DataError):
        scorer.predict_raw([{"label": 1, "other": 3}])  # a label alone is not a feature
    # Some known: the others are missing values, the documented raw contract (same as nulls).
    some = scorer.predict_raw(rows.select(["I1", "C1"]))
    nulls = rows.select(["I1", "C1"]).to_pandas().assign(I2=None)
    np.testing.assert_allclose(some, scorer.predict_raw(nulls), rtol=0, atol=1e-6)


def test_check_known_columns_passes_one_known_column(dlrm_export):
    trained, _ = dlrm_export
    check_known_columns(trained.spec, ["C1", "unrelated"])
    with pytest.raises(DataError, match=r"scores.csv: none of its columns.*got \['a', 'b'\]"):
        check_known_columns(trained.spec, ["a", "b"], where="scores.csv")
