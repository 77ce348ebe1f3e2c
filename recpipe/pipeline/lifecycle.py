"""The pipeline run's first and last steps: ``start`` checks every parameter, writes the resolved config
and creates the run log (one MLflow run per pipeline run) that the later steps resume by id; ``reject``
records a failed gate (a normal outcome); ``finish`` ends the run with the outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recpipe.config import ParameterError, flatten
from recpipe.launch.command import LAUNCHERS
from recpipe.pipeline.params import (
    check_data_fits,
    check_data_source,
    check_placement,
    expand_partition_template,
    is_partition_template,
    parse_schedule_time,
    resolve_config,
    resolve_init_from,
    resolve_tracking_uri,
    run_overrides,
    write_config,
)
from recpipe.runlog import RunLog, failing

# Outcomes a pipeline run ends with (pipeline output ``outcome`` starts with one of them).
OUTCOME_REGISTERED = "registered"
OUTCOME_PROMOTED = "promoted"
OUTCOME_REJECTED = "rejected"
TAG_OUTCOME = "pipeline.outcome"
TAG_GATE_DECISION = "gate.decision"
TAG_GATE_REASONS = "gate.reasons"
# What a scheduled run was given and what it made of it (data.partitions and train.init_from, the resolved
# values, are the run's params).
TAG_SCHEDULE_TIME = "pipeline.schedule_time"
TAG_PARTITIONS_TEMPLATE = "pipeline.partitions_template"
TAG_INIT_FROM = "pipeline.init_from"
TAG_INIT_FROM_RESOLVED = "pipeline.init_from_resolved"
FROM_SCRATCH = "scratch"


@dataclass
class TrainPod:
    """What the train step's own pod asks for: everything for single-pod training, nothing when it only
    launches a PyTorchJob (``workers > 1``), whose pods get the GPUs and placement instead."""

    gpus: int
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]


@dataclass
class StartResult:
    run_id: str
    tracking_uri: str
    experiment: str
    model_name: str
    config_digest: str
    backends: str
    train_pod: TrainPod
    partitions: str | None = None
    init_from: str | None = None


def train_pod(
    workers: int, gpus_per_worker: int, node_selector: dict[str, str], tolerations: list[dict[str, Any]]
) -> TrainPod:
    if int(workers) > 1:
        return TrainPod(0, {}, [])
    return TrainPod(int(gpus_per_worker), dict(node_selector), list(tolerations))


def start(
    config_path: str,
    data_source: str,
    config_out: str | Path,
    backends: str = "",
    min_auc: float | str | None = None,
    max_auc_drop: float | str | None = None,
    max_logloss_rise: float | str | None = None,
    workers: int = 1,
    gpus_per_worker: int = 0,
    mlflow_uri: str = "",
    model_name: str = "",
    overrides: Mapping[str, Any] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: list[Mapping[str, Any]] | None = None,
    kfp_run_id: str | None = None,
    image: str | None = None,
    run_name: str | None = None,
    launcher: str = "local",
    partitions: str = "",
    init_from: str = "",
    schedule_time: str = "",
) -> StartResult:
    """Check the pipeline parameters, write the resolved config to ``config_out`` and create the MLflow run.

    Args:
        min_auc, max_auc_drop, max_logloss_rise (float | str | None): gate thresholds; None or "" keeps
            the config's ``eval.gate``.
        launcher (str): ``"local"`` (steps on this machine) or ``"pytorchjob"`` (steps in cluster pods,
            where a local MLflow store is refused).
        partitions (str): ``data.partitions`` ("" keeps the config's); ``{date}`` / ``{date-N}`` are filled
            from ``schedule_time`` (:func:`~recpipe.pipeline.params.expand_partition_template`).
        init_from (str): ``train.init_from`` ("" keeps the config's); ``champion-if-any`` is the champion's
            version or from scratch (:func:`~recpipe.pipeline.params.resolve_init_from`).
        schedule_time (str): the run's scheduled time (KFP's schedule-time placeholder; "" or unresolved:
            none).

    Raises:
        ParameterError: a parameter is invalid; the message names it.
    """
    from recpipe import tracking

    if launcher not in LAUNCHERS:
        raise ParameterError("launcher", f"must be one of {list(LAUNCHERS)}, got {launcher!r}")
    overrides = run_overrides(overrides, partitions, init_from)
    cfg = resolve_config(config_path, backends or None, min_auc, max_auc_drop, max_logloss_rise, overrides)
    template = cfg.data.partitions
    if template:
        cfg.data.partitions = expand_partition_template(template, schedule_time)
    if int(workers) < 1:
        raise ParameterError("workers", f"must be >= 1, got {workers}")
    if int(gpus_per_worker) < 0:
        raise ParameterError("gpus_per_worker", f"must be >= 0, got {gpus_per_worker}")
    selector, tols = check_placement(node_selector, tolerations)
    check_data_source(data_source)
    check_data_fits(cfg, data_source)
    uri = resolve_tracking_uri(mlflow_uri, cfg.tracking.uri, in_cluster=launcher != "local")
    name = model_name.strip() or cfg.registered_model_name
    given_init = cfg.train.init_from
    cfg.train.init_from = resolve_init_from(given_init, uri, name)
    write_config(cfg, config_out)
    tags = tracking.lineage_tags(cfg.digest(), image=image, kfp_run_id=kfp_run_id)
    tags.update({"config_path": config_path, "data_source": data_source, "registered_model": name})
    tags.update(_schedule_tags(template, schedule_time, given_init, cfg.train.init_from))
    run_id = tracking.start_or_resume_run(
        uri, cfg.tracking.experiment, run_name=run_name or cfg.name, tags=tags
    )
    log = tracking.MlflowRunLog(run_id, uri)
    with failing(log, "start"):
        params = flatten(cfg.to_dict())
        params.update(
            {
                "pipeline.data_source": data_source,
                "pipeline.workers": int(workers),
                "pipeline.gpus_per_worker": int(gpus_per_worker),
                "pipeline.backends": ",".join(cfg.export.backends),
                "pipeline.launcher": launcher,
            }
        )
        log.log_params(params)
        log.log_artifact(config_out, "config")
    pod = train_pod(int(workers), int(gpus_per_worker), selector, tols)
    backends_used = ",".join(cfg.export.backends)
    return StartResult(
        run_id, uri, cfg.tracking.experiment, name, cfg.digest(), backends_used, pod,
        cfg.data.partitions, cfg.train.init_from,
    )  # fmt: skip


def _schedule_tags(
    template: str | None, schedule_time: str, given_init: str | None, init_from: str | None
) -> dict[str, str]:
    """The run's record of how its partitions and warm start were chosen (only what was set)."""
    tags: dict[str, str] = {}
    when = parse_schedule_time(schedule_time)
    if when is not None:
        tags[TAG_SCHEDULE_TIME] = when.isoformat().replace("+00:00", "Z")
    if is_partition_template(template):
        tags[TAG_PARTITIONS_TEMPLATE] = str(template)
    if given_init:
        tags[TAG_INIT_FROM] = given_init
        tags[TAG_INIT_FROM_RESOLVED] = init_from or FROM_SCRATCH
    return tags


def reject(log: RunLog, reasons: list[str] | str) -> str:
    """Record a failed gate on the run (tags ``gate.decision=rejected``, ``gate.reasons``); returns the outcome."""
    if isinstance(reasons, str):
        reasons = [r for r in reasons.split("\n") if r.strip()]
    failed = [r for r in reasons if r.startswith("FAIL")] or reasons
    log.set_tags(
        {TAG_GATE_DECISION: "rejected", TAG_GATE_REASONS: "\n".join(reasons), TAG_OUTCOME: OUTCOME_REJECTED}
    )
    return f"{OUTCOME_REJECTED}: " + "; ".join(failed)


def finish(log: RunLog, outcome: str) -> str:
    """End the run as FINISHED with tag ``pipeline.outcome``; returns ``outcome`` (with the promotion, if
    the promote step ran)."""
    promotion = log.tags().get("promotion")
    if promotion:
        outcome = f"{outcome}; {promotion}"
    log.set_tags({TAG_OUTCOME: outcome.split(":", 1)[0], "pipeline.summary": outcome})
    log.end("FINISHED")
    return outcome
