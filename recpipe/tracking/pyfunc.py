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

    Probabilities are mapped back to the original click distribution (``p / (p + (1 - p) / rate)``) with
    the negative sampling rate the export's manifest records (one place: the model has no setting of its
    own).
    """

    def __init__(self) -> None:
        self._batcher: Any = None

    @property
    def _scorer(self) -> Any:
        """The loaded backend (None before :meth:`load_context`)."""
        return None if self._batcher is None else self._batcher.scorer

    @_scorer.setter
    def _scorer(self, scorer: Any) -> None:
        # The scoring server calls predict from a thread per request: concurrent requests without a context are
        # scored in shared batches (recpipe.export.batching).
        from recpipe.export.batching import MicroBatcher

        self._batcher = None if scorer is None else MicroBatcher(scorer)

    def load_context(self, context: Any) -> None:
        import os

        from recpipe.export.loaders import load_backend
        from recpipe.export.server import GC_FREEZE_ENV, freeze_loaded

        self._scorer = load_backend(context.artifacts[ARTIFACT])  # verifies every file's sha256
        if os.environ.get(GC_FREEZE_ENV) == "1":  # a `recpipe serve` worker (MLflow's scoring server)
            freeze_loaded()

    # No type hints on predict: MLflow 3 reads them as an input schema and would validate rows against it
    # (the model's signature, derived from the FeatureSpec, declares the columns instead).
    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201
        """Click probabilities of raw rows (the raw-value contract), or logits with
        ``params={"output": "logit"}``. One user × N candidates: ``params={"context": "<JSON object>"}`` holds
        the columns every row shares, sent once; the rows hold the candidates' columns (the same scores as
        the full rows). A bad row or a refused context is an MlflowException with BAD_REQUEST (HTTP 400 from
        the scoring server) naming its row and column."""
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import BAD_REQUEST, INVALID_PARAMETER_VALUE

        from recpipe.data.types import DataError

        if self._scorer is None:
            self.load_context(context)
        output = (params or {}).get("output") or "probability"
        if output not in ("probability", "logit"):
            raise MlflowException(
                f"params.output must be 'probability' or 'logit', got {output!r}", INVALID_PARAMETER_VALUE
            )
        try:
            shared = (params or {}).get("context")
            logits = self._batcher.logits(model_input, shared)
        except DataError as err:
            raise MlflowException(f"bad request: {err}", BAD_REQUEST) from None
        scores = self._scorer.to_output(logits, output)
        if scores.ndim == 1:
            return scores
        import pandas as pd  # a multi-task model: one named column per task (probability_clk, ...)

        return pd.DataFrame(self._scorer.output_by_column(scores, output))


def model_signature(outputs: list[str] | None = None) -> Any:
    """The registered model's MLflow signature: the output (one probability, or logit, per row; a
    multi-task model's named ``outputs`` columns, ``probability_<label>``), the parameters ``output``
    (``probability`` or ``logit``) and ``context`` (a JSON object's text: the columns shared by every row,
    sent once; a string, the one type MLflow's param check lets carry it) — no input schema.

    The input columns are the raw-value contract (:func:`raw_columns`, stored as the model's metadata):
    every feature column optional, ids and raw values of any type (``123``, ``"123"`` and ``123.0`` are one
    id), histories as text. The scorer reads and checks them itself, naming the row and column of a bad
    value. An MLflow input schema could only say "any type, optional" for them, which checks nothing, yet
    MLflow enforces it on every call (a pandas Series per column, then the scoring server's cast): about
    2 ms of a one-row request's 10 (``benchmarks/serving.py``). Without it, MLflow passes the request's
    DataFrame as it is; an extra column is ignored, an absent one is all missing, as before.
    """
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema, TensorSpec

    if outputs and len(outputs) > 1:
        schema = Schema([ColSpec("double", name) for name in outputs])
    else:
        schema = Schema([TensorSpec(np.dtype(np.float64), (-1,), "prediction")])
    return ModelSignature(
        outputs=schema,
        params=ParamSchema(
            [ParamSpec("output", "string", "probability"), ParamSpec("context", "string", None)]
        ),
    )


def raw_columns(spec: Any) -> dict[str, str]:
    """The registered model's input columns (its ``metadata["raw_columns"]``): column → how its raw values
    are read (``id``, ``float`` or ``sequence``, :func:`recpipe.features.raw.column_kinds`); each optional."""
    from recpipe.features.raw import column_kinds

    return dict(column_kinds(spec, with_labels=False))
