"""Lineage: which data, config, code and image produced a run.

Datasets are logged as MLflow dataset inputs (metadata only: source, digest, schema; the data is
never copied) and mirrored as run tags, which are what searches and the gate's audit trail read.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag
from mlflow.exceptions import MlflowException
from mlflow.types import ColSpec, DataType, Schema
from mlflow.types.schema import Array

from recpipe.tracking.runs import _uri_for, set_tags
from recpipe.tracking.uri import client

# Run tag keys (lineage). Environment variables are read only when an argument is not given.
TAG_CONFIG_DIGEST = "config_digest"
TAG_GIT_COMMIT = "git_commit"
TAG_IMAGE = "image"
TAG_KFP_RUN_ID = "kfp_run_id"
TAG_KFP_POD_NAME = "kfp_pod_name"
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"

ENV_IMAGE = "RECPIPE_IMAGE"
# kfp 2.17 sets no run-id variable itself: the pipeline passes dsl.PIPELINE_JOB_ID_PLACEHOLDER as
# KFP_RUN_ID (task.set_env_variable). The KFP v2 backend injects KFP_POD_NAME via the downward API.
ENV_KFP_RUN_ID = "KFP_RUN_ID"
ENV_KFP_POD_NAME = "KFP_POD_NAME"

CONTEXTS = ("training", "evaluation")
_DIGEST_LIMIT = 36  # MLflow's dataset digest column

_SCALAR_TYPES = {
    "bool": DataType.boolean,
    "boolean": DataType.boolean,
    "int8": DataType.integer,
    "int16": DataType.integer,
    "int32": DataType.integer,
    "uint8": DataType.integer,
    "uint16": DataType.integer,
    "int64": DataType.long,
    "uint32": DataType.long,
    "uint64": DataType.long,
    "float": DataType.float,
    "float16": DataType.float,
    "halffloat": DataType.float,
    "float32": DataType.float,
    "double": DataType.double,
    "float64": DataType.double,
    "string": DataType.string,
    "large_string": DataType.string,
    "utf8": DataType.string,
    "large_utf8": DataType.string,
    "binary": DataType.binary,
    "large_binary": DataType.binary,
}


def _mlflow_type(type_name: str) -> DataType | Array:
    """An MLflow column type for an Arrow type name (``int64``, ``list<item: int64>``); unknown
    types are recorded as strings."""
    t = type_name.strip().lower()
    m = re.fullmatch(r"(?:large_)?list<(?:\w+:\s*)?(.+)>", t)
    if m:
        inner = _mlflow_type(m.group(1))
        return Array(inner) if isinstance(inner, DataType) else Array(DataType.string)
    if t.startswith("timestamp") or t.startswith("date"):
        return DataType.datetime
    return _SCALAR_TYPES.get(t, DataType.string)


def dataset_schema(columns: Mapping[str, str]) -> Schema:
    """An MLflow ``Schema`` from ``{column: arrow type name}``."""
    return Schema([ColSpec(type=_mlflow_type(str(t)), name=str(name)) for name, t in columns.items()])


class UriDatasetSource(DatasetSource):
    """A dataset source MLflow has no resolver for (``odps://project/tables/t``): the URI, recorded."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    @staticmethod
    def _get_source_type() -> str:
        return "uri"

    def load(self, **kwargs: Any) -> str:
        raise NotImplementedError(f"recpipe does not download {self.uri} through MLflow")

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        return False

    @classmethod
    def _resolve(cls, raw_source: Any) -> UriDatasetSource:
        return cls(str(raw_source))

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri}

    @classmethod
    def from_dict(cls, source_dict: dict[str, Any]) -> UriDatasetSource:
        return cls(source_dict["uri"])


def _source(path: str) -> DatasetSource:
    if "://" not in path:
        path = str(Path(path).resolve())
    try:
        return resolve_dataset_source(path)
    except MlflowException:
        return UriDatasetSource(path)


def log_dataset_input(
    run_id: str,
    path: str | Path,
    rows: int,
    schema: Mapping[str, str],
    digest: str,
    context: str = "training",
    name: str | None = None,
    *,
    uri: str | None = None,
) -> None:
    """Record a dataset the run read: an MLflow dataset input plus run tags ``data.<context>.*``.

    Args:
        run_id (str): the pipeline's run.
        path (str | Path): where the data lives (a local folder, ``s3://``, ``odps://``...).
        rows (int): number of rows.
        schema (Mapping[str, str]): ``{column: arrow type name}``.
        digest (str): content digest of the dataset (e.g. sha256 of its files); MLflow keeps the
            first 36 characters, the run tag keeps it whole.
        context (str): ``"training"`` or ``"evaluation"``.
        name (str, optional): dataset name; defaults to the last path component.
    """
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    if rows < 0:
        raise ValueError(f"rows must be non-negative, got {rows}")
    from recpipe.redact import redact

    path = redact(str(path))  # the dataset's source is shown in the MLflow UI
    source = _source(path)
    ds_name = name or Path(path.rstrip("/")).name or context
    meta = MetaDataset(
        source=source, name=ds_name, digest=digest[:_DIGEST_LIMIT], schema=dataset_schema(schema)
    )
    d = meta.to_dict()
    entity = DatasetEntity(
        name=d["name"],
        digest=d["digest"],
        source_type=d["source_type"],
        source=d["source"],
        schema=d.get("schema"),
        profile=d.get("profile"),
    )
    tags = [InputTag(key="mlflow.data.context", value=context)]
    c = client(_uri_for(run_id, uri))
    c.log_inputs(run_id, datasets=[DatasetInput(dataset=entity, tags=tags)])
    set_tags(
        run_id,
        {
            f"data.{context}.path": path,
            f"data.{context}.rows": int(rows),
            f"data.{context}.digest": digest,
            f"data.{context}.columns": len(schema),
        },
        uri=uri,
    )


def head_commit(repo_dir: str | Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of ``repo_dir`` (default: the recpipe source checkout), or None."""
    cwd = Path(repo_dir) if repo_dir is not None else Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", sha) else None


def lineage_tags(
    config_digest: str,
    git_commit: str | None = None,
    image: str | None = None,
    kfp_run_id: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Run tags that tie a run to its config, code, image and pipeline run.

    Missing arguments are looked up: the commit with ``git rev-parse HEAD``, the image in
    ``RECPIPE_IMAGE``, the pipeline run id in ``KFP_RUN_ID`` (and the pod in ``KFP_POD_NAME``).
    Unknown values are left out rather than written as placeholders.
    """
    env = os.environ if environ is None else environ
    sha = git_commit or head_commit()
    tags = {
        TAG_CONFIG_DIGEST: config_digest,
        TAG_GIT_COMMIT: sha,
        MLFLOW_GIT_COMMIT: sha,
        TAG_IMAGE: image or env.get(ENV_IMAGE),
        TAG_KFP_RUN_ID: kfp_run_id or env.get(ENV_KFP_RUN_ID),
        TAG_KFP_POD_NAME: env.get(ENV_KFP_POD_NAME),
    }
    return {k: v for k, v in tags.items() if v}
