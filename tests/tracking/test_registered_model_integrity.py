"""A registered model is code, not pickle, and is refused when any of its files was changed or added:
the check runs on a downloaded copy before MLflow executes a byte of it."""

from __future__ import annotations

from pathlib import Path

import mlflow
import mlflow.pyfunc
import numpy as np
import pytest

from recpipe.tracking import load_pyfunc_model, log_pyfunc_model, register_version, start_or_resume_run
from recpipe.tracking.models import MODEL_MANIFEST, RegisteredModelError
from recpipe.tracking.uri import client

LINEAR_MODEL = Path(__file__).with_name("linear_model.py")


@pytest.fixture
def registered(sqlite_uri, tmp_path) -> tuple[str, Path]:
    """``(uri, stored model folder)`` of ``models:/lin/1``, logged from code with 3 weights of 2.0."""
    run_id = start_or_resume_run(sqlite_uri, "integrity")
    np.save(tmp_path / "w.npy", np.full(3, 2.0))
    model_uri = log_pyfunc_model(run_id, LINEAR_MODEL, {"weights": str(tmp_path / "w.npy")}, "model")
    register_version(sqlite_uri, "lin", run_id, model_uri, {})
    stored = client(sqlite_uri).get_logged_model(model_uri.split("/")[-1]).artifact_location
    return sqlite_uri, Path(stored.removeprefix("file://"))


def test_a_sealed_model_from_code_loads(registered):
    uri, stored = registered
    assert (stored / MODEL_MANIFEST).is_file() and not list(stored.rglob("*.pkl"))
    assert float(load_pyfunc_model(uri, "models:/lin/1").predict(np.ones((1, 3)))[0]) == 6.0


def test_a_modified_model_code_file_is_refused(registered, payload):
    uri, stored = registered
    code = stored / "linear_model.py"
    code.write_text(f"from pathlib import Path\nPath({str(payload.marker)!r}).touch()\n" + code.read_text())
    with pytest.raises(
        RegisteredModelError, match=r"refusing to load models:/lin/1: .*sha256 of 'linear_model.py'"
    ):
        load_pyfunc_model(uri, "models:/lin/1")
    assert not payload.marker.exists()


def test_an_added_file_is_refused(registered, payload):
    uri, stored = registered
    (stored / "python_model.pkl").write_bytes(payload.pickle_bytes())
    with pytest.raises(
        RegisteredModelError, match=r"'python_model.pkl' is not listed in recpipe_manifest.json"
    ):
        load_pyfunc_model(uri, "models:/lin/1")
    assert not payload.marker.exists()


def test_a_manifest_rewritten_without_the_key_is_refused(sqlite_uri, tmp_path, payload, monkeypatch):
    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "the-cluster-secret")
    run_id = start_or_resume_run(sqlite_uri, "integrity")
    np.save(tmp_path / "w.npy", np.full(3, 2.0))
    model_uri = log_pyfunc_model(run_id, LINEAR_MODEL, {"weights": str(tmp_path / "w.npy")}, "model")
    assert load_pyfunc_model(sqlite_uri, model_uri) is not None  # signed with the key: loads
    stored = Path(client(sqlite_uri).get_logged_model(model_uri.split("/")[-1]).artifact_location[7:])
    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "a-guessed-key")
    from recpipe.tracking.models import _seal

    code = stored / "linear_model.py"
    code.write_text(f"from pathlib import Path\nPath({str(payload.marker)!r}).touch()\n" + code.read_text())
    (stored / MODEL_MANIFEST).unlink()
    _seal(sqlite_uri, model_uri.split("/")[-1], model_uri)  # a forger's manifest, under the wrong key
    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "the-cluster-secret")
    with pytest.raises(RegisteredModelError, match="the signature does not match its content"):
        load_pyfunc_model(sqlite_uri, model_uri)
    assert not payload.marker.exists()


def test_a_pickled_model_is_refused_before_unpickling(sqlite_uri, payload):
    """A model logged around recpipe (cloudpickle, no manifest): its pickle is never read."""
    run_id = start_or_resume_run(sqlite_uri, "integrity")
    with _active(sqlite_uri, run_id):
        info = mlflow.pyfunc.log_model(name="pickled", python_model=_Echo())
    stored = Path(client(sqlite_uri).get_logged_model(info.model_id).artifact_location[7:])
    (stored / "python_model.pkl").write_bytes(payload.pickle_bytes())
    with pytest.raises(RegisteredModelError, match=r"recpipe_manifest.json is missing"):
        load_pyfunc_model(sqlite_uri, info.model_uri)
    assert not payload.marker.exists()
    with pytest.raises(ValueError, match="must be the path of a models-from-code file"):
        log_pyfunc_model(run_id, _Echo(), {}, "model")


class _Echo(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return model_input


def _active(uri: str, run_id: str):
    from contextlib import contextmanager

    from recpipe.tracking.uri import fluent_uri

    @contextmanager
    def ctx():
        with fluent_uri(uri), mlflow.start_run(run_id=run_id):
            yield

    return ctx()
