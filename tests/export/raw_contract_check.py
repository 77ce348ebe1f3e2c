"""The raw-value contract check shared by the export tests: the same raw rows, as a typed Arrow table, a pandas
DataFrame (many rows, one row) and JSON records, give identical probabilities through a backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, settings
from raw_rows import json_records, typed

from recpipe.eval.metrics import sigmoid
from recpipe.export.layout import backend_folder
from recpipe.export.loaders import load_backend
from recpipe.features.raw import to_arrow
from recpipe.tracking.pyfunc import RawRowsModel

SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# The export's parity bound on logits is 1e-4; a probability moves at most a quarter of that.
EAGER_ATOL = 2.5e-5
# Each backend folder loaded once per test process and reused by every example (a served scorer answers request
# after request too): a load verifies the manifest, opens an ONNX session, maps a compiled library, and was most
# of each example's time (the DIN property test: 18.6 s for 15 examples, four loads each).
_SCORERS: dict[Path, object] = {}


def scorer_of(folder: str | Path):
    """The scorer of a backend folder, loaded the first time its current version is asked for (a re-export
    into the same folder is a new version folder: loaded again)."""
    current = backend_folder(Path(folder)).resolve()
    if current not in _SCORERS:
        _SCORERS[current] = load_backend(current)
    return _SCORERS[current]


def probabilities_agree(
    trained,
    export_dir: str | Path,
    rows: list[dict],
    types: dict,
    backends: tuple[str, ...] = ("jit", "onnx", "rtp"),
    pyfunc: bool = True,
) -> None:
    """Every representation, every backend (and, with ``pyfunc``, the registered pyfunc class over rtp):
    the same probabilities."""
    table = typed(rows, types)
    eager = sigmoid(trained.eager_logits(to_arrow(table)).astype(np.float64))
    representations = {
        "arrow": table,
        "dataframe": pd.DataFrame.from_records(rows),
        "records": json_records(rows),
    }
    for name in backends:
        scorer = scorer_of(Path(export_dir) / name)
        got = {k: scorer.predict(v) for k, v in representations.items()}
        for k, p in got.items():
            np.testing.assert_allclose(p, got["arrow"], rtol=0, atol=1e-6, err_msg=f"{name}: {k} vs arrow")
        np.testing.assert_allclose(got["arrow"], eager, rtol=0, atol=EAGER_ATOL, err_msg=f"{name} vs eager")
        one = [scorer.predict(pd.DataFrame([r]))[0] for r in rows]
        np.testing.assert_allclose(one, got["arrow"], rtol=0, atol=1e-6, err_msg=f"{name}: one-row frames")
    if not pyfunc:
        return
    model = RawRowsModel()
    model._scorer = scorer_of(Path(export_dir) / "rtp")  # what load_context sets from the artifact
    for k, v in representations.items():
        if k != "arrow":
            p = np.asarray(model.predict(None, pd.DataFrame(v) if k == "records" else v))
            np.testing.assert_allclose(p, eager, rtol=0, atol=EAGER_ATOL, err_msg=f"pyfunc: {k}")
