"""The chain of registered versions: the version each one was warm-started from, the partitions its chain
has trained on (cumulative) with their digests, and the walk from a version back to its root.

At registration (``chain_tags``) the pipeline run's tags — ``data_partitions``, ``data_partition_digests``
and ``eval_partitions`` (written by ingest), ``init_from``, ``init_from_version`` and ``init_from_run_id``
(written by train) — become version tags. A value longer than ``MAX_VERSION_TAG_VALUE`` (5000 characters:
MLflow 3 itself accepts 100,000 for a version tag, but 5000 is what this registry keeps every tag within,
as Postgres/MySQL registries hold for registered-model tags) is kept whole in the run's artifact
``lineage/partitions.json`` and its tag says ``artifact:lineage/partitions.json``; ``partitions_count`` and
``partitions_digest`` (sha256 of the cumulative partitions and digests) are always tags.

Example::

    tags = chain_tags(uri, "ctr", run_tags={"data_partitions": "dt=20260102", "init_from_version": "1",
                                            "init_from": "models:/ctr@champion"}, run_id=run_id)
    # {"parent_model": "ctr", "parent_version": "1", "partitions": "dt=20260101,dt=20260102",
    #  "partitions_added": "dt=20260102", "partitions_count": "2", "partitions_digest": "sha256:…", …}
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException

from recpipe.tracking.registry import (
    ALIAS_CHAMPION,
    MAX_VERSION_TAG_VALUE,
    TAG_AUC,
    TAG_GATE_PASSED,
    _aliases,
    _float_tag,
    normalize_version,
)
from recpipe.tracking.runs import log_artifact
from recpipe.tracking.uri import _NOT_FOUND, client, error_code

# Run tags read (written by the ingest and train stages).
RUN_DATA_PARTITIONS = "data_partitions"
RUN_DATA_PARTITION_DIGESTS = "data_partition_digests"
RUN_EVAL_PARTITIONS = "eval_partitions"
RUN_INIT_FROM = "init_from"
RUN_INIT_FROM_VERSION = "init_from_version"
RUN_INIT_FROM_RUN_ID = "init_from_run_id"

# Version tags written.
TAG_PARENT_MODEL = "parent_model"
TAG_PARENT_VERSION = "parent_version"
TAG_PARENT_RUN_ID = "parent_run_id"
TAG_INIT_FROM = "init_from"
TAG_PARTITIONS = "partitions"
TAG_PARTITION_DIGESTS = "partition_digests"
TAG_PARTITIONS_ADDED = "partitions_added"
TAG_EVAL_PARTITIONS = "eval_partitions"
TAG_PARTITIONS_COUNT = "partitions_count"
TAG_PARTITIONS_DIGEST = "partitions_digest"
TAG_PARTITIONS_REWRITTEN = "partitions_rewritten"
TAG_CHAIN_INCOMPLETE = "chain_incomplete"

CHAIN_ARTIFACT = "lineage/partitions.json"
IN_ARTIFACT = f"artifact:{CHAIN_ARTIFACT}"
_LONG_TAGS = (TAG_PARTITIONS, TAG_PARTITION_DIGESTS, TAG_PARTITIONS_ADDED, TAG_EVAL_PARTITIONS)
_TRUNCATED = re.compile(r"\.\.\.\[truncated \d+ chars, sha256 [0-9a-f]+\]$")  # runs.truncate's marker
_MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/\d+|@[\w.-]+)$")


@dataclass(frozen=True)
class ChainRecord:
    """What one version's chain tags hold: cumulative partitions and digests, those it added, its eval."""

    partitions: list[str] = field(default_factory=list)
    partition_digests: dict[str, str] = field(default_factory=dict)
    partitions_added: list[str] = field(default_factory=list)
    eval_partitions: list[str] = field(default_factory=list)

    def values(self) -> dict[str, str]:
        """The four tag values, whole (lists comma-joined, digests as a JSON object)."""
        return {
            TAG_PARTITIONS: ",".join(self.partitions),
            TAG_PARTITION_DIGESTS: json.dumps(self.partition_digests, sort_keys=True),
            TAG_PARTITIONS_ADDED: ",".join(self.partitions_added),
            TAG_EVAL_PARTITIONS: ",".join(self.eval_partitions),
        }

    def digest(self) -> str:
        """sha256 of the cumulative partitions and their digests: equal for equal training histories."""
        doc = json.dumps({"partitions": self.partitions, "partition_digests": self.partition_digests},
                         sort_keys=True, separators=(",", ":"))  # fmt: skip
        return "sha256:" + hashlib.sha256(doc.encode()).hexdigest()


def _names(text: str | None) -> list[str]:
    return sorted({p.strip() for p in (text or "").split(",") if p.strip()})


def _untruncated(tags: Mapping[str, str], key: str, where: str) -> str | None:
    value = tags.get(key)
    if value is not None and _TRUNCATED.search(value):
        raise ValueError(
            f"{where} tag {key!r} was truncated when it was written (over MLflow's 8000 characters); "
            "the partitions it names cannot be recovered from it"
        )
    return value


def _run_record(run_tags: Mapping[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(training partitions, their digests, eval partitions) from the run's tags, checked."""
    train = _names(_untruncated(run_tags, RUN_DATA_PARTITIONS, "run"))
    evals = _names(_untruncated(run_tags, RUN_EVAL_PARTITIONS, "run"))
    raw = _untruncated(run_tags, RUN_DATA_PARTITION_DIGESTS, "run")
    try:
        digests = json.loads(raw) if raw else {}
    except ValueError:
        raise ValueError(f"run tag {RUN_DATA_PARTITION_DIGESTS!r} is not JSON: {raw[:200]!r}") from None
    if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
        raise ValueError(
            f"run tag {RUN_DATA_PARTITION_DIGESTS!r} must be a JSON object partition -> digest, got {raw[:200]!r}"
        )
    stray = sorted(set(digests) - set(train))
    if stray:
        raise ValueError(
            f"run tag {RUN_DATA_PARTITION_DIGESTS!r} names partitions the run did not train on "
            f"(not in {RUN_DATA_PARTITIONS!r}): {stray[:5]}"
        )
    return train, {k: digests[k] for k in sorted(digests)}, evals


def _parent(run_tags: Mapping[str, str], model: str) -> tuple[str, int] | None:
    """(model, version) the run was warm-started from, when it started from a registered version."""
    version = run_tags.get(RUN_INIT_FROM_VERSION)
    if not version:
        return None
    m = _MODEL_URI.match(run_tags.get(RUN_INIT_FROM, ""))
    return (m.group("name") if m else model), normalize_version(version)


def _get_version(uri: str, model: str, version: int) -> Any | None:
    """The ``ModelVersion``, or None when it does not exist (never registered, or deleted)."""
    try:
        return client(uri).get_model_version(model, str(version))
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            return None
        raise


def read_record(uri: str, tags: Mapping[str, str], run_id: str | None) -> ChainRecord | None:
    """A version's ``ChainRecord`` from its tags (and its run's artifact for the long values); None for a
    version registered without chain tags.

    Args:
        uri (str): tracking/registry URI.
        tags (Mapping[str, str]): the version's tags.
        run_id (str | None): the version's run, which holds ``lineage/partitions.json`` when it is used.
    """
    if TAG_PARTITIONS_COUNT not in tags:
        return None
    values = {k: tags.get(k, "") for k in _LONG_TAGS}
    if IN_ARTIFACT in values.values():
        with tempfile.TemporaryDirectory() as tmp:
            path = client(uri).download_artifacts(run_id, CHAIN_ARTIFACT, tmp)
            whole = json.loads(Path(path).read_text())
        values.update({k: whole[k] for k, v in values.items() if v == IN_ARTIFACT})
    record = ChainRecord(
        _names(values[TAG_PARTITIONS]),
        json.loads(values[TAG_PARTITION_DIGESTS] or "{}"),
        _names(values[TAG_PARTITIONS_ADDED]),
        _names(values[TAG_EVAL_PARTITIONS]),
    )
    if TAG_PARTITIONS_DIGEST in tags and record.digest() != tags[TAG_PARTITIONS_DIGEST]:
        raise ValueError(
            f"the partitions recorded for run {run_id} do not match the version's {TAG_PARTITIONS_DIGEST} "
            f"{tags[TAG_PARTITIONS_DIGEST]} (the artifact {CHAIN_ARTIFACT} was rewritten?)"
        )
    return record


def chain_tags(uri: str, model: str, run_tags: Mapping[str, str], run_id: str) -> dict[str, str]:
    """The chain's version tags for a new version of ``model`` registered from run ``run_id``.

    The parent is the version the run was warm-started from (run tag ``init_from_version``; ``init_from``
    names its model); none makes the version a root. Cumulative partitions are the parent's plus the run's
    ``data_partitions``; digests are the parent's updated by the run's (a partition read again with a new
    digest is listed in ``partitions_rewritten``). A parent that cannot be read (deleted, or registered
    without chain tags) is recorded in ``chain_incomplete`` rather than guessed at.

    Args:
        uri (str): tracking/registry URI.
        model (str): the registered model the new version belongs to.
        run_tags (Mapping[str, str]): the run's tags.
        run_id (str): the run (values too long for a tag go to its artifact ``lineage/partitions.json``).
    """
    train, run_digests, evals = _run_record(run_tags)
    tags: dict[str, str] = {}
    if run_tags.get(RUN_INIT_FROM):
        tags[TAG_INIT_FROM] = run_tags[RUN_INIT_FROM]
    parent_record = ChainRecord()
    parent = _parent(run_tags, model)
    if parent is None and run_tags.get(RUN_INIT_FROM, "").startswith("models:/"):
        tags[TAG_CHAIN_INCOMPLETE] = (
            f"warm-started from {run_tags[RUN_INIT_FROM]} with no {RUN_INIT_FROM_VERSION} tag"
        )
    if parent is not None:
        pm, pv = parent
        tags.update({TAG_PARENT_MODEL: pm, TAG_PARENT_VERSION: str(pv)})
        if run_tags.get(RUN_INIT_FROM_RUN_ID):
            tags[TAG_PARENT_RUN_ID] = run_tags[RUN_INIT_FROM_RUN_ID]
        found = _get_version(uri, pm, pv)
        record = None if found is None else read_record(uri, dict(found.tags or {}), found.run_id)
        if record is not None:
            parent_record = record
        else:
            why = "not found (deleted?)" if found is None else "registered without chain tags"
            tags[TAG_CHAIN_INCOMPLETE] = f"parent {pm} v{pv} {why}: its partitions are not counted"
    rewritten = sorted(p for p, d in run_digests.items() if parent_record.partition_digests.get(p, d) != d)
    record = ChainRecord(
        sorted(set(parent_record.partitions) | set(train)),
        dict(sorted({**parent_record.partition_digests, **run_digests}.items())),
        sorted(set(train) - set(parent_record.partitions)),
        evals,
    )
    values = record.values()
    if any(len(v) > MAX_VERSION_TAG_VALUE for v in values.values()):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(CHAIN_ARTIFACT).name
            path.write_text(json.dumps(values, indent=1, sort_keys=True))
            log_artifact(run_id, path, str(Path(CHAIN_ARTIFACT).parent), uri=uri)
        values = {k: IN_ARTIFACT if len(v) > MAX_VERSION_TAG_VALUE else v for k, v in values.items()}
    tags.update({k: v for k, v in values.items() if v and v != "{}"})
    tags[TAG_PARTITIONS_COUNT] = str(len(record.partitions))
    tags[TAG_PARTITIONS_DIGEST] = record.digest()
    if rewritten:
        tags[TAG_PARTITIONS_REWRITTEN] = ",".join(rewritten)[:MAX_VERSION_TAG_VALUE]
    return tags


def _start_version(uri: str, model: str, version: int | str | None) -> int:
    try:
        aliases = _aliases(uri, model)
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            raise ValueError(f"no registered model {model!r} in {uri}") from None
        raise
    if version is not None:
        return normalize_version(version)
    if ALIAS_CHAMPION in aliases:
        return aliases[ALIAS_CHAMPION]
    escaped = model.replace("'", "\\'")
    versions = [
        normalize_version(mv.version) for mv in client(uri).search_model_versions(f"name = '{escaped}'")
    ]
    if not versions:
        raise ValueError(f"registered model {model!r} has no versions")
    return max(versions)


def lineage(uri: str, model: str, version: int | str | None = None) -> dict[str, Any]:
    """The chain from ``version`` (default: the champion, else the latest version) back to its root.

    Returns ``{"model", "version", "entries": [...], "end", "problem"}``: one entry per version, newest
    first (``model``, ``version``, ``aliases``, ``run_id``, ``created_at``, ``parent`` (``{"model",
    "version"}`` or None), ``partitions_added``, ``partitions_count``, ``eval_partitions``, ``auc``,
    ``gate_passed``, ``incomplete``, ``deleted``); ``end`` is ``"root"``, ``"deleted"`` (the last entry is a
    parent that no longer exists) or ``"cycle"`` (a parent already in the chain: tampered tags), with
    ``problem`` saying which.

    Args:
        uri (str): tracking/registry URI.
        model (str): registered model name.
        version (int | str | None): where to start.
    """
    start = _start_version(uri, model, version)
    aliases: dict[str, dict[str, int]] = {}
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    at: tuple[str, int] | None = (model, start)
    parent_run: str | None = None
    end, problem = "root", None
    while at is not None:
        m, v = at
        if at in seen:
            chain = " -> ".join(f"{e['model']} v{e['version']}" for e in entries)
            end, problem = "cycle", f"cycle: {chain} -> {m} v{v} again (parent tags tampered with?)"
            break
        seen.add(at)
        mv = _get_version(uri, m, v)
        if mv is None:
            if not entries:
                raise ValueError(f"registered model {m!r} has no version {v}")
            entries.append({"model": m, "version": v, "run_id": parent_run, "deleted": True})
            end, problem = "deleted", f"{m} v{v} no longer exists (deleted); the chain above it is cut there"
            break
        tags, run_id = dict(mv.tags or {}), mv.run_id
        if m not in aliases:
            aliases[m] = _aliases(uri, m)
        record = read_record(uri, tags, run_id)
        parent = (
            (tags.get(TAG_PARENT_MODEL, m), normalize_version(tags[TAG_PARENT_VERSION]))
            if tags.get(TAG_PARENT_VERSION)
            else None
        )
        entries.append(
            {
                "model": m,
                "version": v,
                "aliases": sorted(a for a, av in aliases[m].items() if av == v),
                "run_id": run_id,
                "created_at": mv.creation_timestamp,
                "parent": None if parent is None else {"model": parent[0], "version": parent[1]},
                "partitions_added": None if record is None else record.partitions_added,
                "partitions_count": None if record is None else len(record.partitions),
                "eval_partitions": None if record is None else record.eval_partitions,
                "auc": _float_tag(tags, TAG_AUC),
                "gate_passed": None if TAG_GATE_PASSED not in tags else tags[TAG_GATE_PASSED] == "true",
                "incomplete": tags.get(TAG_CHAIN_INCOMPLETE),
                "deleted": False,
            }
        )
        parent_run = tags.get(TAG_PARENT_RUN_ID)
        at = parent
    return {"model": model, "version": start, "entries": entries, "end": end, "problem": problem}
