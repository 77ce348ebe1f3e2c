"""Logging and loading MLflow pyfunc models; the wrapper class itself belongs to the model code.

A model is logged as MLflow "models from code" (the model class comes from a Python file, no
cloudpickle) and sealed with ``recpipe_manifest.json``: every file of the logged model with its sha256,
signed when a signing key is configured (:mod:`recpipe.integrity`). Loading downloads the model, checks
that manifest and that the model is code-based, and only then lets MLflow run a byte of it.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow
import mlflow.artifacts
import mlflow.pyfunc
import yaml

from recpipe.integrity import IntegrityError, seal_folder, verify_sealed
from recpipe.tracking.runs import _uri_for
from recpipe.tracking.uri import client, fluent_uri

MODEL_MANIFEST = "recpipe_manifest.json"
# Written into the model by the registry at each registration (YAML, read safely by MLflow): not sealed.
REGISTRY_META = "registered_model_meta"


class RegisteredModelError(IntegrityError):
    """A logged or registered model cannot be trusted: no or bad manifest, a modified file, or pickle."""


def log_pyfunc_model(
    run_id: str,
    python_model: str | Path,
    artifacts: Mapping[str, str],
    artifact_path: str,
    pip_requirements: list[str] | None = None,
    *,
    signature: Any = None,
    input_example: Any = None,
    metadata: Mapping[str, Any] | None = None,
    uri: str | None = None,
) -> str:
    """Log the model built by the code file ``python_model`` with its ``artifacts`` as a logged
    model of ``run_id``, sealed by ``recpipe_manifest.json``; returns its model URI
    (``models:/<model_id>``) for ``register_version``.

    Args:
        run_id (str): the run the model belongs to.
        python_model (str | Path): a Python file that calls ``mlflow.models.set_model(...)`` (models from
            code: the class is imported by the file, never pickled).
        artifacts (Mapping[str, str]): name → local path copied into the model.
        artifact_path (str): the model's name in the run.
        pip_requirements (list[str] | None): exact pins of a serving image.
        signature (ModelSignature | None): what MLflow validates requests against and shows.
        input_example (Any): a few request rows stored with the model (MLflow checks that they score).
        metadata (Mapping | None): free-form fields of the model's MLmodel file (``metadata``).
        uri (str | None): the tracking URI (default: the one the run was started with).

    ``pip_requirements=None`` lets MLflow infer them (a few seconds); pass the exact pins for a
    serving image (torch, torchrec, recpipe).

    The pyfunc API only logs to the active run, so the run is made active for the call and then
    left RUNNING as it was (MLflow sets its end time, which ``end_run`` overwrites later).
    """
    code = Path(python_model) if isinstance(python_model, str | Path) else None
    if code is None or not code.is_file():
        raise ValueError(
            f"python_model must be the path of a models-from-code file (got {python_model!r}): "
            "recpipe never logs a pickled model"
        )
    run_uri = _uri_for(run_id, uri)
    status = client(run_uri).get_run(run_id).info.status
    with fluent_uri(run_uri):
        active = mlflow.active_run()
        if active is not None and active.info.run_id != run_id:
            raise RuntimeError(f"another MLflow run ({active.info.run_id}) is active in this process")
        started = active is None
        if started:
            mlflow.start_run(run_id=run_id)
        try:
            info = mlflow.pyfunc.log_model(
                name=artifact_path,
                python_model=str(code),
                artifacts=dict(artifacts),
                pip_requirements=pip_requirements,
                signature=signature,
                input_example=input_example,
                metadata=dict(metadata) if metadata else None,
            )
        finally:
            if started:
                mlflow.end_run(status=status)
        _seal(run_uri, info.model_id, info.model_uri)
    return info.model_uri


def _seal(uri: str, model_id: str, model_uri: str) -> None:
    """Add ``recpipe_manifest.json`` (every file of the logged model as stored) to the logged model."""
    with tempfile.TemporaryDirectory(prefix="recpipe-seal-") as tmp, fluent_uri(uri):
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=f"{tmp}/model"))
        manifest = seal_folder(local, MODEL_MANIFEST, "registered_model", exclude={REGISTRY_META}, out=tmp)
        client(uri).log_model_artifact(model_id, str(manifest))


def verify_model_dir(local: str | Path, model_uri: str, key: bytes | None = None) -> None:
    """Check a downloaded model against its ``recpipe_manifest.json`` and that it is code-based.

    Args:
        local (str | Path): the downloaded model folder.
        model_uri (str): its URI (for the message).
        key (bytes | None): the signing key; default :func:`recpipe.integrity.signing_key`.

    Raises:
        RegisteredModelError: naming the model and what is wrong.
    """
    local = Path(local)
    try:
        verify_sealed(local, MODEL_MANIFEST, "a model logged by recpipe", key, unchecked={REGISTRY_META})
        flavor = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"]
    except (IntegrityError, OSError, KeyError, TypeError, yaml.YAMLError) as err:
        raise RegisteredModelError(f"refusing to load {model_uri}: {err}") from None
    if "model_code_path" not in flavor:
        raise RegisteredModelError(
            f"refusing to load {model_uri}: it is a pickled pyfunc; recpipe loads only models from code"
        )


def download_served_export(uri: str, model_uri: str, dst: str | Path) -> Path:
    """The export folder a registered version serves (its artifact ``exported_model``), downloaded into
    ``dst`` after :func:`verify_model_dir` of the whole model: what recpipe's own scoring server loads
    (:mod:`recpipe.export.server`, which verifies every file of the folder against its manifest again). A
    retrieval version is its export folder itself: every part verified against its manifest.

    Raises:
        RegisteredModelError: as :func:`load_pyfunc_model`; or the model has no ``exported_model`` artifact
            (not a model recpipe registered).
    """
    from recpipe.export.layout import is_retrieval_export
    from recpipe.export.retriever import verify_retrieval_export
    from recpipe.tracking.pyfunc import ARTIFACT

    with fluent_uri(uri):
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(dst)))
    if is_retrieval_export(local):  # a retrieval version is its sealed export folder (no pyfunc yet)
        verify_retrieval_export(local)
        return local
    verify_model_dir(local, model_uri)
    flavor = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"]
    entry = (flavor.get("artifacts") or {}).get(ARTIFACT)
    path = entry.get("path") if isinstance(entry, dict) else None
    if not path or not (local / path).is_dir():
        raise RegisteredModelError(f"refusing to serve {model_uri}: it has no {ARTIFACT!r} artifact folder")
    return local / path


def load_pyfunc_model(uri: str, model_uri: str) -> Any:
    """Load a pyfunc model, e.g. ``models:/<name>@champion``, from the registry at ``uri``, after
    :func:`verify_model_dir` of a local copy (the copy is what is loaded, and lives as long as the model).

    Raises:
        RegisteredModelError: the model is not sealed by recpipe, a file was modified or added, the
            signature is missing or wrong (with a signing key configured), or it is pickled.
    """
    tmp = tempfile.mkdtemp(prefix="recpipe-model-")
    try:
        with fluent_uri(uri):
            local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=tmp)
        verify_model_dir(local, model_uri)
        model = mlflow.pyfunc.load_model(local)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    weakref.finalize(model, shutil.rmtree, tmp, True)
    return model


def split_model_uri(model_uri: str) -> tuple[str, str, str] | None:
    """``models:/NAME@ALIAS`` → ``(NAME, "@", ALIAS)``, ``models:/NAME/VERSION`` → ``(NAME, "", VERSION)``; None
    for a URI of neither form (the version is not checked to be a number here)."""
    if not model_uri.startswith("models:/"):
        return None
    name, at, ref = model_uri.removeprefix("models:/").partition("@")
    if not at:
        name, _, ref = name.rpartition("/")
    return (name, at, ref) if name and ref else None


def resolve_model_uri(uri: str, model_uri: str) -> dict[str, Any]:
    """The registered version ``models:/NAME@alias`` or ``models:/NAME/VERSION`` names (as
    :func:`~recpipe.tracking.registry.get_version`).

    Raises:
        RegisteredModelError: not a ``models:/`` URI of either form, or no such version or alias.
    """
    from recpipe.tracking.registry import get_version, get_version_by_alias

    parts = split_model_uri(model_uri)
    if parts is None or (not parts[1] and not parts[2].isdigit()):
        raise RegisteredModelError(f"{model_uri!r}: expected models:/NAME@alias or models:/NAME/VERSION")
    name, at, ref = parts
    try:
        found = get_version_by_alias(uri, name, ref) if at else get_version(uri, name, ref)
    except mlflow.exceptions.MlflowException as err:
        raise RegisteredModelError(f"{model_uri}: {err.message}") from None
    if found is None:
        raise RegisteredModelError(f"{model_uri}: no registered model {name!r} with alias {ref!r}")
    return found


def check_served_pair(uri: str, retriever_uri: str, ranker_uri: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Refuse to serve a retriever and a ranker that were not promoted as a pair: each version's partner tag
    (``pair_ranker`` on the retrieval version, ``pair_retriever`` on the ranking one, ``"NAME/VERSION"``, written
    by the pair pipeline) must name the other. Returns both versions.

    Raises:
        RegisteredModelError: a URI names no version, or the tags do not make the two a pair (naming them).
    """
    from recpipe.tracking.registry import TAG_PAIR_RANKER, TAG_PAIR_RETRIEVER

    retriever, ranker = resolve_model_uri(uri, retriever_uri), resolve_model_uri(uri, ranker_uri)
    want_ranker = f"{ranker['name']}/{ranker['version']}"
    want_retriever = f"{retriever['name']}/{retriever['version']}"
    got_ranker = retriever["tags"].get(TAG_PAIR_RANKER)
    got_retriever = ranker["tags"].get(TAG_PAIR_RETRIEVER)
    if got_ranker != want_ranker or got_retriever != want_retriever:
        raise RegisteredModelError(
            f"refusing to serve {want_retriever} ({retriever_uri}) with {want_ranker} ({ranker_uri}): they were "
            f"not promoted as a pair ({want_retriever} names ranker {got_ranker or 'none'}, {want_ranker} names "
            f"retriever {got_retriever or 'none'}); serve the versions one pair run registered"
        )
    return retriever, ranker
