"""The models-from-code file of the tracking tests: the smallest real pyfunc, a dot product with weights
loaded from a ``.npy`` artifact. MLflow runs this file to build the model (no pickle)."""

import mlflow.models
import mlflow.pyfunc
import numpy as np


class LinearScorer(mlflow.pyfunc.PythonModel):
    """``model_input @ w`` with ``w`` from the ``weights`` artifact."""

    def load_context(self, context):
        self.w = np.load(context.artifacts["weights"])

    def predict(self, context, model_input, params=None):
        return np.asarray(model_input, dtype=np.float64) @ self.w


mlflow.models.set_model(LinearScorer())
