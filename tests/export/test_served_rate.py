"""The registered pyfunc recalibrates probabilities with the negative sampling rate its export records."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from recpipe.eval.metrics import recalibrate, sigmoid
from recpipe.export.api import export
from recpipe.export.layout import backend_folder
from recpipe.tracking.pyfunc import ARTIFACT, RawRowsModel


def test_pyfunc_probabilities_use_the_exports_negative_sampling_rate(din, tmp_path):
    """A model trained on 1-in-4 down-sampled negatives: the served probability is p / (p + (1 - p) / 0.25),
    the rate read from the export's manifest (the model keeps no copy of its own)."""
    cfg = din.cfg.model_copy(deep=True)
    cfg.data.neg_sample_rate = 0.25
    export(din.model, din.spec, cfg, ["rtp"], tmp_path, din.held_out)
    model = RawRowsModel()
    model.load_context(SimpleNamespace(artifacts={ARTIFACT: str(backend_folder(tmp_path / "rtp"))}))
    rows = din.held_out.slice(0, 32).to_pandas()
    logits = model.predict(None, rows, {"output": "logit"})
    probability = model.predict(None, rows)
    np.testing.assert_allclose(logits, din.eager_logits(din.held_out.slice(0, 32)), atol=1e-5)
    np.testing.assert_allclose(probability, recalibrate(sigmoid(logits), 0.25), rtol=1e-12)
    assert (probability < sigmoid(logits)).all()  # down-sampled negatives: the true rate is lower
