"""``Scorer.predict_raw``'s request check: rows none of whose columns is the model's are refused, naming the
expected columns and the ones received; some known columns with the rest absent score as before. One user × N
candidates (a context sent once) scores as the full rows on every backend and through the pyfunc."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from one_user import USER_COLUMNS, one_user

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


def test_one_user_times_candidates_scores_as_the_full_rows_on_every_backend(din_export):
    trained, result = din_export
    context, candidates, full = one_user(trained, 48)
    assert len(context) == len(USER_COLUMNS) and "|" in context["click_50_seq"]  # a real history
    served = [n for n, b in result.backends.items() if b.status == "ok"]
    assert {"rtp", "jit", "onnx"} <= set(served)
    for name in served:
        scorer = load_backend(Path(result.out_dir) / name)
        want = scorer.predict(full)
        np.testing.assert_allclose(scorer.predict(candidates, context=context), want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(
            scorer.predict(candidates.to_pandas(), context=json.dumps(context)), want, rtol=0, atol=1e-6
        )
    assert len(set(np.round(want, 6))) > 1  # the candidates differ: not one score broadcast


def test_the_pyfunc_scores_the_context_form_and_refuses_a_mistaken_context(din_export):
    from mlflow.exceptions import MlflowException

    from recpipe.tracking.pyfunc import RawRowsModel, model_signature

    trained, result = din_export
    context, candidates, full = one_user(trained, 16)
    model = RawRowsModel()
    model._scorer = load_backend(Path(result.out_dir) / "rtp")  # what load_context sets from the artifact
    want = model.predict(None, full.to_pandas())
    got = model.predict(None, candidates.to_pandas(), params={"context": json.dumps(context)})
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    logits = model.predict(
        None, candidates.to_pandas(), params={"context": json.dumps(context), "output": "logit"}
    )
    np.testing.assert_allclose(logits, model.predict(None, full.to_pandas(), {"output": "logit"}), atol=1e-6)
    bad = {
        json.dumps({**context, "user": 1}): "['user'] is no input column of the model",
        json.dumps({"user_id": 1, "adgroup_id": 2}): "['adgroup_id'] also in the rows",
        "[1, 2]": "expected a JSON object",
        json.dumps({"user_id": [1, 2]}): "column 'user_id' holds list",
    }
    for text, message in bad.items():
        with pytest.raises(MlflowException) as err:
            model.predict(None, candidates.to_pandas(), params={"context": text})
        assert err.value.error_code == "BAD_REQUEST" and message in err.value.message
    params = {p.name: (p.dtype.name, p.default) for p in model_signature().params.params}
    assert params == {"output": ("string", "probability"), "context": ("string", None)}
