"""The training checkpoint behind a registered version: what ``train.init_from: models:/NAME@alias`` reads.

A registered version names the MLflow run that logged it (the pipeline's one run); the train stage
records on that run where its final checkpoint was written and the sha256 of its manifest (run tags
:data:`TAG_CHECKPOINT` and :data:`TAG_CHECKPOINT_MANIFEST`), so the folder found there later is checked
to be that very checkpoint before a byte of it is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from recpipe.tracking.registry import get_version, get_version_by_alias
from recpipe.tracking.runs import run_summary
from recpipe.tracking.uri import ENV_TRACKING_URI
from recpipe.train.checkpoint_files import CheckpointError, resolve_checkpoint
from recpipe.train.warm import WarmStartError, check_recorded, is_registered, warm_checkpoint

TAG_CHECKPOINT = "train.checkpoint"
TAG_CHECKPOINT_MANIFEST = "train.checkpoint_manifest_sha256"
_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<version>\d+))$")


@dataclass(frozen=True)
class RecordedCheckpoint:
    """Where a registered version's training checkpoint is, as its run recorded it.

    Args:
        model_uri (str): the URI asked for.
        version (int): the registered version it resolved to.
        run_id (str): the run that trained and registered it.
        path (str): the final checkpoint folder (``…/checkpoints/ckpt-<step>``).
        manifest_sha256 (str): sha256 of that folder's ``manifest.json``.
    """

    model_uri: str
    version: int
    run_id: str
    path: str
    manifest_sha256: str


def recorded_checkpoint(uri: str, model_uri: str) -> RecordedCheckpoint:
    """The checkpoint ``models:/NAME@alias`` or ``models:/NAME/<version>`` was exported from.

    Args:
        uri (str): the tracking / registry URI.
        model_uri (str): the registry URI.

    Raises:
        ValueError: a malformed URI, an unknown model, alias or version, or a version whose run recorded
            no checkpoint (registered outside a tracked pipeline run), each named.
    """
    m = _URI.match(model_uri)
    if m is None:
        raise ValueError(f"{model_uri!r} is not models:/NAME@alias or models:/NAME/<version>")
    name = m.group("name")
    if m.group("alias"):
        found = get_version_by_alias(uri, name, m.group("alias"))
        if found is None:
            raise ValueError(f"{model_uri}: model {name!r} has no alias {m.group('alias')!r} in {uri}")
    else:
        try:
            found = get_version(uri, name, m.group("version"))
        except Exception as err:  # MlflowException: not found; named without its traceback
            raise ValueError(f"{model_uri}: no version {m.group('version')} of {name!r} in {uri}") from err
    run_id = found["run_id"]
    if not run_id:
        raise ValueError(
            f"{model_uri} (version {found['version']}) names no run: no checkpoint to start from"
        )
    tags = run_summary(run_id, uri=uri)["tags"]
    path, digest = tags.get(TAG_CHECKPOINT), tags.get(TAG_CHECKPOINT_MANIFEST)
    if not path or not digest:
        raise ValueError(
            f"{model_uri} (version {found['version']}, run {run_id}) recorded no training checkpoint (run tags "
            f"{TAG_CHECKPOINT}, {TAG_CHECKPOINT_MANIFEST}: set by the train stage of a tracked run); "
            "pass the checkpoint folder as train.init_from instead"
        )
    return RecordedCheckpoint(model_uri, int(found["version"]), run_id, path, digest)


@dataclass(frozen=True)
class WarmSource:
    """What ``train.init_from`` resolved to.

    Args:
        init_from (str): as given.
        checkpoint (Path): the verified ``ckpt-<step>`` folder.
        version (int | None), run_id (str | None): the registered version and its run (``models:/`` only).
    """

    init_from: str
    checkpoint: Path
    version: int | None = None
    run_id: str | None = None

    def tags(self) -> dict[str, str]:
        """Run tags ``init_from``, ``init_from_version``, ``init_from_run_id`` (those known)."""
        tags = {"init_from": self.init_from}
        if self.version is not None:
            tags["init_from_version"] = str(self.version)
        if self.run_id:
            tags["init_from_run_id"] = self.run_id
        return tags


def resolve_init_from(init_from: str, uri: str | None, cfg_uri: str | None = None) -> WarmSource:
    """The verified checkpoint ``init_from`` names: ``models:/NAME@alias``, ``models:/NAME/<version>`` (the
    checkpoint its run recorded, checked to be unchanged) or a checkpoint / training output folder.

    Args:
        init_from (str): ``train.init_from``.
        uri (str | None): the tracking / registry URI (needed for ``models:/``); None: env
            ``MLFLOW_TRACKING_URI``, else ``cfg_uri``.
        cfg_uri (str | None): the config's ``tracking.uri``.

    Raises:
        WarmStartError: nothing usable there (named), or a ``models:/`` URI without a registry.
    """
    if not is_registered(init_from):
        return WarmSource(init_from, warm_checkpoint(init_from))
    uri = uri or os.environ.get(ENV_TRACKING_URI) or cfg_uri
    if not uri:
        raise WarmStartError(f"train.init_from {init_from!r} needs a tracking URI (the registry to read)")
    try:
        rec = recorded_checkpoint(uri, init_from)
    except ValueError as err:
        raise WarmStartError(f"train.init_from: {err}") from None
    where = f"{init_from} (version {rec.version}, run {rec.run_id})"
    try:
        ckpt = resolve_checkpoint(rec.path)
    except CheckpointError as err:
        raise WarmStartError(f"{where}: {err}") from None
    check_recorded(ckpt, rec.manifest_sha256, where)
    return WarmSource(init_from, warm_checkpoint(ckpt), rec.version, rec.run_id)
