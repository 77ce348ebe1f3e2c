"""The model registry: versions with evaluation tags, and the aliases ``challenger`` / ``champion``.

Stages are never used (deprecated in MLflow); a version's standing is its aliases and tags.
Version numbers are ints here whatever the store returns (a server sends strings, sqlite ints).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.store.artifact.runs_artifact_repo import RunsArtifactRepository

from recpipe.tracking.runs import truncate
from recpipe.tracking.uri import _ALREADY_EXISTS, _NOT_FOUND, client, error_code, fluent_uri

ALIAS_CHALLENGER = "challenger"
ALIAS_CHAMPION = "champion"

# Version tags written at registration (values are strings in MLflow).
TAG_AUC = "auc"
TAG_GAUC = "gauc"
TAG_LOGLOSS = "logloss"
TAG_GATE_PASSED = "gate_passed"
TAG_GATE_REASONS = "gate_reasons"
TAG_DATA_DIGEST = "data_digest"
# A retrieve-then-rank pair's partner as "<name>/<version>" (recpipe.pipeline.pair writes them; a server refuses
# a pair the tags do not make)
TAG_PAIR_RANKER = "pair_ranker"  # on the retrieval version
TAG_PAIR_RETRIEVER = "pair_retriever"  # on the ranking version
METRIC_TAGS = (TAG_AUC, TAG_GAUC, TAG_LOGLOSS)

# Registered-model tags hold at most 5000 characters on Postgres/MySQL; version tags more.
MAX_VERSION_TAG_VALUE = 5000

_URI = re.compile(r"^[A-Za-z][\w+.-]*:")


def normalize_version(version: int | str) -> int:
    """``3``, ``"3"`` -> ``3``; anything else raises ``ValueError``."""
    try:
        v = int(str(version).strip())
    except ValueError:
        raise ValueError(f"model version must be an integer, got {version!r}") from None
    if v < 1:
        raise ValueError(f"model versions start at 1, got {v}")
    return v


def _fmt(value: float | None) -> str:
    if value is None:
        return "nan"
    return repr(float(value)) if math.isfinite(float(value)) else "nan"


def eval_version_tags(
    auc: float,
    gauc: float | None,
    logloss: float,
    gate_passed: bool,
    gate_reasons: Sequence[str],
    data_digest: str,
    tasks: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """The version tags recorded for every registered candidate (``gate_reasons`` as a JSON list); a
    multi-task model's every task's metrics too, as ``<label>.auc`` / ``<label>.gauc`` / ``<label>.logloss``."""
    tags = {
        TAG_AUC: _fmt(auc),
        TAG_GAUC: _fmt(gauc),
        TAG_LOGLOSS: _fmt(logloss),
        TAG_GATE_PASSED: "true" if gate_passed else "false",
        TAG_GATE_REASONS: truncate(json.dumps(list(gate_reasons)), MAX_VERSION_TAG_VALUE),
        TAG_DATA_DIGEST: data_digest,
    }
    for label, metrics in (tasks or {}).items():
        tags.update({f"{label}.{k}": _fmt(metrics.get(k)) for k in METRIC_TAGS})
    return tags


def ensure_registered_model(uri: str, name: str) -> None:
    """Create the registered model ``name`` unless it exists (safe when processes race)."""
    c = client(uri)
    try:
        c.create_registered_model(name)
    except MlflowException as err:
        if error_code(err) not in _ALREADY_EXISTS:
            raise


def _resolve_source(uri: str, run_id: str, artifact_path_or_model_uri: str) -> tuple[str, str | None]:
    """(source, model_id) for ``create_model_version``."""
    target = artifact_path_or_model_uri
    if target.startswith("models:/"):
        model_id = target[len("models:/") :]
        # models:/<model_id> names a logged model; models:/<name>/<version> or @alias a registry entry.
        return target, (model_id if "/" not in model_id and "@" not in model_id else None)
    if _URI.match(target) and not target.startswith("runs:/"):
        return target, None
    runs_uri = target if target.startswith("runs:/") else f"runs:/{run_id}/{target.strip('/')}"
    src_run, path = RunsArtifactRepository.parse_runs_uri(runs_uri)
    c = client(uri)
    # MLflow 3 keeps a logged model (e.g. a pyfunc) in its own location, found by name and run.
    run = c.get_run(src_run)
    found = c.search_logged_models(
        experiment_ids=[run.info.experiment_id],
        filter_string=f"source_run_id = '{src_run}' AND name = '{path}'",
    )
    if len(found) >= 1:
        model_id = max(found, key=lambda m: m.creation_timestamp).model_id
        return f"models:/{model_id}", model_id
    artifacts = c.list_artifacts(src_run, path)
    if not artifacts:
        raise FileNotFoundError(f"run {src_run} has no artifacts at {path!r} and no logged model named so")
    return f"{run.info.artifact_uri.rstrip('/')}/{path}", None


def register_version(
    uri: str,
    model_name: str,
    run_id: str,
    artifact_path_or_model_uri: str,
    tags: Mapping[str, Any] | None = None,
    description: str | None = None,
) -> int:
    """Register a new version of ``model_name`` (created if missing); returns its number.

    Args:
        uri (str): tracking/registry URI.
        model_name (str): registered model name.
        run_id (str): the run that produced the model.
        artifact_path_or_model_uri (str): an artifact path of ``run_id`` (a folder from
            ``log_model_dir`` or the name of a logged pyfunc), or a model URI (``models:/<id>``,
            ``runs:/<id>/<path>``, ``s3://...``).
        tags (Mapping[str, Any], optional): version tags, e.g. ``eval_version_tags(...)``.
    """
    ensure_registered_model(uri, model_name)
    source, model_id = _resolve_source(uri, run_id, artifact_path_or_model_uri)
    str_tags = {k: truncate(str(v), MAX_VERSION_TAG_VALUE) for k, v in (tags or {}).items() if v is not None}
    # A local registry store looks the logged model up through the global tracking URI.
    with fluent_uri(uri):
        mv = client(uri).create_model_version(
            name=model_name,
            source=source,
            run_id=run_id,
            tags=str_tags,
            description=description,
            model_id=model_id,
        )
    return normalize_version(mv.version)


def set_version_tags(uri: str, model_name: str, version: int | str, tags: Mapping[str, Any]) -> None:
    c = client(uri)
    v = str(normalize_version(version))
    for k, val in tags.items():
        c.set_model_version_tag(model_name, v, k, truncate(str(val), MAX_VERSION_TAG_VALUE))


def set_alias(uri: str, model_name: str, alias: str, version: int | str) -> None:
    """Point ``alias`` (``challenger``, ``champion``, ...) at ``version``."""
    client(uri).set_registered_model_alias(model_name, alias, str(normalize_version(version)))


def delete_alias(uri: str, model_name: str, alias: str) -> None:
    try:
        client(uri).delete_registered_model_alias(model_name, alias)
    except MlflowException as err:
        if error_code(err) not in _NOT_FOUND:
            raise


def _float_tag(tags: Mapping[str, str], key: str) -> float | None:
    try:
        return float(tags[key])
    except (KeyError, ValueError):
        return None


def _version_dict(mv: Any, aliases: Mapping[str, int]) -> dict[str, Any]:
    v = normalize_version(mv.version)
    tags = dict(mv.tags or {})
    gate = tags.get(TAG_GATE_PASSED)
    return {
        "name": mv.name,
        "version": v,
        "aliases": sorted(a for a, av in aliases.items() if av == v),
        "run_id": mv.run_id,
        "source": mv.source,
        "status": mv.status,
        "created_at": mv.creation_timestamp,
        "metrics": {k: _float_tag(tags, k) for k in tags if k.rpartition(".")[2] in METRIC_TAGS},
        "gate_passed": None if gate is None else gate == "true",
        "tags": tags,
    }


def _aliases(uri: str, model_name: str) -> dict[str, int]:
    rm = client(uri).get_registered_model(model_name)
    return {a: normalize_version(v) for a, v in (rm.aliases or {}).items()}


def get_version(uri: str, model_name: str, version: int | str) -> dict[str, Any]:
    """One version as a dict: version, aliases, run_id, source, status, metrics, gate_passed, tags."""
    mv = client(uri).get_model_version(model_name, str(normalize_version(version)))
    return _version_dict(mv, _aliases(uri, model_name))


def get_version_by_alias(uri: str, model_name: str, alias: str) -> dict[str, Any] | None:
    """The version ``alias`` points at (as ``get_version``), or None when the alias or model is unset."""
    try:
        aliases = _aliases(uri, model_name)
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            return None
        raise
    if alias not in aliases:
        return None
    mv = client(uri).get_model_version(model_name, str(aliases[alias]))
    return _version_dict(mv, aliases)


def list_models(uri: str, model_name: str) -> list[dict[str, Any]]:
    """Every version of ``model_name`` (oldest first) with aliases, metrics and gate result; [] when
    the model is not registered."""
    try:
        aliases = _aliases(uri, model_name)
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            return []
        raise
    escaped = model_name.replace("'", "\\'")
    versions = client(uri).search_model_versions(f"name = '{escaped}'")
    return sorted((_version_dict(mv, aliases) for mv in versions), key=lambda d: d["version"])
