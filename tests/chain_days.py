"""Daily versions registered the way the daily loop registers them, for the lineage tests: one MLflow run per
day whose tags are set as the ingest stage (``data_partitions``, ``data_partition_digests``,
``eval_partitions``) and the train stage (``init_from``, ``init_from_version``, ``init_from_run_id``) set
them, then the register stage's tags (evaluation + :func:`recpipe.tracking.chain_tags`) on a new version
(imported as a bare module, as ``chain_days``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from recpipe.tracking import (
    ALIAS_CHALLENGER,
    MlflowRunLog,
    chain_tags,
    eval_version_tags,
    get_version,
    log_model_dir,
    register_version,
    set_alias,
    start_or_resume_run,
)


def digest_of(partition: str, content: str = "") -> str:
    """A stand-in partition digest (what ingest computes from the partition's files)."""
    import hashlib

    return "sha256:" + hashlib.sha256(f"{partition}/{content}".encode()).hexdigest()


def register_day(
    uri: str,
    model: str,
    tmp_path: Path,
    partitions: Sequence[str],
    eval_partitions: Sequence[str],
    parent: int | None = None,
    parent_model: str | None = None,
    auc: float = 0.7,
    digests: dict[str, str] | None = None,
) -> int:
    """One day: a run trained on ``partitions`` (warm-started from ``parent`` of ``parent_model`` when
    given), evaluated on ``eval_partitions``, registered as a new version of ``model`` with alias
    challenger; returns the version."""
    run_id = start_or_resume_run(uri, "daily")
    log = MlflowRunLog(run_id, uri)
    log.set_tags(
        {
            "data_partitions": ",".join(sorted(partitions)),
            "data_partition_digests": json.dumps(digests or {p: digest_of(p) for p in partitions}),
            "eval_partitions": ",".join(eval_partitions),
        }
    )
    if parent is not None:
        source = parent_model or model
        log.set_tags(
            {
                "init_from": f"models:/{source}@champion",
                "init_from_version": str(parent),
                "init_from_run_id": get_version(uri, source, parent)["run_id"],
            }
        )
    folder = tmp_path / f"export-{run_id}"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"backend": "jit"}')
    log_model_dir(run_id, folder, "model")
    tags = eval_version_tags(auc, None, 0.4, True, ["PASS min_auc"], "sha256:eval")
    tags.update(chain_tags(uri, model, log.tags(), run_id))
    version = register_version(uri, model, run_id, "model", tags)
    set_alias(uri, model, ALIAS_CHALLENGER, version)
    return version


def three_days(uri: str, model: str, tmp_path: Path) -> list[int]:
    """v1 on a 3-day window (dt=20260101..03), v2 from v1 on dt=20260104, v3 from v2 on dt=20260105."""
    v1 = register_day(uri, model, tmp_path, ["dt=20260101", "dt=20260102", "dt=20260103"], ["dt=20260104"])
    v2 = register_day(uri, model, tmp_path, ["dt=20260104"], ["dt=20260105"], parent=v1, auc=0.71)
    v3 = register_day(uri, model, tmp_path, ["dt=20260105"], ["dt=20260106"], parent=v2, auc=0.72)
    return [v1, v2, v3]
