"""The MLflow pyfunc a registered version serves: raw feature columns in, click probabilities out.

FG runs inside (``fg.json`` of the exported folder), then the exported backend (the RTP export by default:
safetensors tables + dense program, no torchrec needed). Kept in its own module because it is the one
class outside ``recpipe.tracking`` that must subclass an MLflow type; loading a model imports it by name.

Example::

    model = recpipe.tracking.load_pyfunc_model(uri, "models:/taobao-multi_tower_din@champion")
    model.predict(df)   # df: one row per impression, raw columns (user_id, adgroup_id, click_50_seq, ...)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np

ARTIFACT = "exported_model"
# The models-from-code file MLflow runs to build a RawRowsModel (no pickle in a registered version).
CODE_PATH = Path(__file__).with_name("served_model.py")


class RawRowsModel(mlflow.pyfunc.PythonModel):
    """Scores a pandas DataFrame of raw feature columns with an exported backend folder.

    Args:
        neg_sample_rate (float): the negative sampling rate of the training data; probabilities are mapped
            back to the original click distribution (``p / (p + (1 - p) / rate)``). A logged model's
            ``model_config["neg_sample_rate"]`` replaces it at load.
    """

    def __init__(self, neg_sample_rate: float = 1.0) -> None:
        self.neg_sample_rate = float(neg_sample_rate)
        self._scorer: Any = None

    def load_context(self, context: Any) -> None:
        from recpipe.export import load_backend

        config = getattr(context, "model_config", None) or {}
        if "neg_sample_rate" in config:
            self.neg_sample_rate = float(config["neg_sample_rate"])
        self._scorer = load_backend(context.artifacts[ARTIFACT])  # verifies every file's sha256

    # No type hints on predict: MLflow 3 reads them as an input schema and would validate rows against it.
    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201
        from recpipe.eval.metrics import recalibrate, sigmoid

        if self._scorer is None:
            self.load_context(context)
        logits = self._scorer.predict_raw(restore_id_columns(model_input, self._scorer.spec))
        p = sigmoid(np.asarray(logits, dtype=np.float64))
        return recalibrate(p, self.neg_sample_rate) if self.neg_sample_rate < 1.0 else p


def restore_id_columns(df: Any, spec: Any) -> Any:
    """pandas turns an integer column with missing values into float64 (``123`` → ``123.0``, null →
    ``NaN``); FG maps ids from integers or strings, and ``"123.0"`` would hash differently from ``123``.
    Such id columns are turned back into nullable integers; every other column is left as it is."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        return df
    id_columns = {
        f.column
        for f in spec.sparse
        if f.sequence is None and f.boundaries is None and f.mapping.kind in ("mod", "hash", "vocab")
    }
    fixed = {}
    for col in id_columns & set(df.columns):
        values = df[col]
        if pd.api.types.is_float_dtype(values.dtype):
            finite = values.dropna()
            if bool((finite == np.floor(finite)).all()):
                fixed[col] = values.astype("Int64")
    return df.assign(**fixed) if fixed else df
