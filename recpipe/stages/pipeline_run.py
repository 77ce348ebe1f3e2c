"""The pipeline run around the stages: parameter checks, the one MLflow run, and its end.

``start`` is the pipeline's first step: it checks every pipeline parameter (so a bad one fails before any
data moves, with a message naming it), writes the resolved config every later step reads, and creates
the MLflow run the others resume by id. ``ingest_step`` / ``fit_step`` wrap the ``ingest`` and ``fit``
stages with their lineage. ``failing`` marks the run FAILED with the reason when a step raises;
``reject`` records a failed gate (a normal outcome); ``finish`` ends the run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recpipe.config import ConfigError, RecpipeConfig, flatten, load_config
from recpipe.export.backends import BACKENDS

# Outcomes a pipeline run ends with (pipeline output ``outcome`` starts with one of them).
OUTCOME_REGISTERED = "registered"
OUTCOME_PROMOTED = "promoted"
OUTCOME_REJECTED = "rejected"
TAG_OUTCOME = "pipeline.outcome"
TAG_GATE_DECISION = "gate.decision"
TAG_GATE_REASONS = "gate.reasons"
ENV_LOCAL = "RECPIPE_LOCAL"


class ParameterError(ValueError):
    """A pipeline parameter is invalid; the message starts with ``parameter <name>:``."""

    def __init__(self, name: str, message: str) -> None:
        self.parameter = name
        super().__init__(f"parameter {name}: {message}")


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


@dataclass
class IngestStepResult:
    train_rows: int
    eval_rows: int
    oracle_auc: float
    data_digest: str


@dataclass
class FitStepResult:
    fg_json: str
    features: int
    embedding_rows: int
    digest: str


# ----------------------------------------------------------------------------------------- parameters
def parse_backends(backends: str | list[str] | None, default: list[str]) -> list[str]:
    """``"jit, onnx"`` → ``["jit", "onnx"]``; empty → ``default``; an unknown name raises ``ParameterError``."""
    if backends is None or (isinstance(backends, str) and not backends.strip()):
        names = list(default)
    elif isinstance(backends, str):
        names = [b.strip().lower() for b in backends.split(",") if b.strip()]
    else:
        names = [str(b).strip().lower() for b in backends]
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise ParameterError("backends", f"unknown backend(s) {unknown}; choose from {list(BACKENDS)}")
    if not names:
        raise ParameterError("backends", "no backend given")
    return list(dict.fromkeys(names))


def check_threshold(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, f"must be a number in [0, 1], got {value!r}") from None
    if not 0.0 <= v <= 1.0:
        raise ParameterError(name, f"must be in [0, 1], got {v}")
    return v


def check_data_source(source: str) -> None:
    """Fail fast when ``source`` cannot be read (:func:`recpipe.data.sources.check_source`)."""
    from recpipe.data.sources import check_source

    if not source or not source.strip():
        raise ParameterError(
            "data_source", "is empty; give an odps:// table, a Parquet/CSV URI or synthetic:taobao?rows=N"
        )
    try:
        check_source(source)
    except Exception as err:  # noqa: BLE001 - any failure to reach the source is a bad parameter
        raise ParameterError("data_source", f"{source!r} is not readable: {err}") from None


def check_placement(node_selector: Any, tolerations: Any) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Validate the ``node_selector`` mapping and the ``tolerations`` list (Kubernetes toleration dicts)."""
    from recpipe.stages.pytorchjob import JobResources, Placement, build_pytorchjob

    if node_selector is None:
        node_selector = {}
    if not isinstance(node_selector, Mapping) or not all(isinstance(v, str) for v in node_selector.values()):
        raise ParameterError("node_selector", f"must map label keys to string values, got {node_selector!r}")
    if tolerations is None:
        tolerations = []
    if isinstance(tolerations, Mapping):
        tolerations = [tolerations]
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise ParameterError("tolerations", f"must be a list of toleration mappings, got {tolerations!r}")
    placement = Placement(dict(node_selector), [dict(t) for t in tolerations])
    try:  # the manifest builder checks label keys and toleration fields the way the API server would
        build_pytorchjob("check", "default", "image", ["true"], 1, JobResources(), placement)
    except ValueError as err:
        name = "tolerations" if "toleration" in str(err) else "node_selector"
        raise ParameterError(name, str(err)) from None
    return dict(node_selector), [dict(t) for t in tolerations]


def train_pod(
    workers: int, gpus_per_worker: int, node_selector: dict[str, str], tolerations: list[dict[str, Any]]
) -> TrainPod:
    if int(workers) > 1:
        return TrainPod(0, {}, [])
    return TrainPod(int(gpus_per_worker), dict(node_selector), list(tolerations))


def resolve_config(
    config_path: str,
    backends: str | list[str] | None = None,
    min_auc: float | None = None,
    max_auc_drop: float | None = None,
    max_logloss_rise: float | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RecpipeConfig:
    """Load ``config_path`` with the pipeline parameters applied (gate thresholds, backends, and
    dotted ``overrides`` such as ``{"train.max_steps": 50}``)."""
    if not config_path or not Path(config_path).is_file():
        raise ParameterError("config", f"config file {config_path!r} does not exist")
    values: dict[str, Any] = dict(overrides or {})
    for name, value in (
        ("min_auc", min_auc),
        ("max_auc_drop", max_auc_drop),
        ("max_logloss_rise", max_logloss_rise),
    ):
        if value is not None:
            values[f"eval.gate.{name}"] = check_threshold(name, value)
    try:
        base = load_config(config_path, values)
    except ConfigError as err:
        raise ParameterError("config", str(err)) from None
    if backends is not None:
        base.export.backends = parse_backends(backends, base.export.backends)  # type: ignore[assignment]
    return base


def write_config(cfg: RecpipeConfig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    return path


def resolve_tracking_uri(
    mlflow_uri: str | None, cfg_uri: str | None, default_dir: str | Path = "runs"
) -> str:
    """``mlflow_uri`` > ``MLFLOW_TRACKING_URI`` > ``tracking.uri`` of the config > ``sqlite:///<default_dir>/mlflow.db``.

    Inside a Kubernetes pod the last fallback would vanish with the pod, so it is refused there.
    """
    from recpipe.tracking import tracking_uri

    if mlflow_uri and mlflow_uri.strip():
        return mlflow_uri.strip()
    if (
        not os.environ.get("MLFLOW_TRACKING_URI")
        and not cfg_uri
        and os.environ.get("KUBERNETES_SERVICE_HOST")
    ):
        raise ParameterError(
            "mlflow_uri",
            "is empty and neither MLFLOW_TRACKING_URI nor tracking.uri is set (a pod has no local store)",
        )
    return tracking_uri(cfg_uri, default_dir)


# ------------------------------------------------------------------------------------------- the run
def start(
    config_path: str,
    data_source: str,
    config_out: str | Path,
    backends: str = "",
    min_auc: float = 0.6,
    max_auc_drop: float = 0.005,
    max_logloss_rise: float = 0.01,
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
) -> StartResult:
    """Check the pipeline parameters, write the resolved config to ``config_out`` and create the MLflow run.

    Raises:
        ParameterError: a parameter is invalid; the message names it.
    """
    from recpipe import tracking

    cfg = resolve_config(config_path, backends or None, min_auc, max_auc_drop, max_logloss_rise, overrides)
    if int(workers) < 1:
        raise ParameterError("workers", f"must be >= 1, got {workers}")
    if int(gpus_per_worker) < 0:
        raise ParameterError("gpus_per_worker", f"must be >= 0, got {gpus_per_worker}")
    selector, tols = check_placement(node_selector, tolerations)
    check_data_source(data_source)
    uri = resolve_tracking_uri(mlflow_uri, cfg.tracking.uri)
    write_config(cfg, config_out)
    name = model_name.strip() or cfg.registered_model_name
    tags = tracking.lineage_tags(cfg.digest(), image=image, kfp_run_id=kfp_run_id)
    tags.update({"config_path": config_path, "data_source": data_source, "registered_model": name})
    run_id = tracking.start_or_resume_run(
        uri, cfg.tracking.experiment, run_name=run_name or cfg.name, tags=tags
    )
    with failing(run_id, uri, "start"):
        params = flatten(cfg.to_dict())
        params.update(
            {
                "pipeline.data_source": data_source,
                "pipeline.workers": int(workers),
                "pipeline.gpus_per_worker": int(gpus_per_worker),
                "pipeline.backends": ",".join(cfg.export.backends),
            }
        )
        tracking.log_params(run_id, params)
        tracking.log_artifact(run_id, config_out, "config")
    pod = train_pod(int(workers), int(gpus_per_worker), selector, tols)
    backends_used = ",".join(cfg.export.backends)
    return StartResult(run_id, uri, cfg.tracking.experiment, name, cfg.digest(), backends_used, pod)


def resume(run_id: str, tracking_uri: str, experiment: str | None = None) -> None:
    """Make ``run_id`` known to ``recpipe.tracking`` in this process (each step is its own process)."""
    from recpipe import tracking
    from recpipe.tracking.uri import client

    exp = (
        experiment
        or client(tracking_uri).get_experiment(client(tracking_uri).get_run(run_id).info.experiment_id).name
    )
    tracking.start_or_resume_run(tracking_uri, exp, run_id=run_id)


@contextmanager
def failing(run_id: str | None, tracking_uri: str | None, step: str) -> Iterator[None]:
    """Run a step; if it raises, end the MLflow run as FAILED with ``"<step>: <error>"`` and re-raise."""
    try:
        yield
    except BaseException as err:
        if run_id and tracking_uri:
            mark_failed(run_id, tracking_uri, f"{step}: {type(err).__name__}: {err}")
        raise


def mark_failed(run_id: str, tracking_uri: str, reason: str) -> None:
    from recpipe import tracking

    try:
        tracking.end_run(run_id, "FAILED", reason=reason, uri=tracking_uri)
    except Exception as err:  # noqa: BLE001 - never hide the step's own error behind a tracking error
        print(f"recpipe: could not mark MLflow run {run_id} FAILED: {err}")


def reject(run_id: str, tracking_uri: str, reasons: list[str] | str) -> str:
    """Record a failed gate on the run (tags ``gate.decision=rejected``, ``gate.reasons``); returns the outcome."""
    from recpipe import tracking

    if isinstance(reasons, str):
        reasons = [r for r in reasons.split("\n") if r.strip()]
    failed = [r for r in reasons if r.startswith("FAIL")] or reasons
    tracking.set_tags(
        run_id,
        {TAG_GATE_DECISION: "rejected", TAG_GATE_REASONS: "\n".join(reasons), TAG_OUTCOME: OUTCOME_REJECTED},
        uri=tracking_uri,
    )
    return f"{OUTCOME_REJECTED}: " + "; ".join(failed)


def finish(run_id: str, tracking_uri: str, outcome: str) -> str:
    """End the run as FINISHED with tag ``pipeline.outcome``; returns ``outcome`` (with the promotion, if
    the promote step ran)."""
    from recpipe import tracking

    promotion = tracking.run_summary(run_id, uri=tracking_uri)["tags"].get("promotion")
    if promotion:
        outcome = f"{outcome}; {promotion}"
    tracking.set_tags(
        run_id, {TAG_OUTCOME: outcome.split(":", 1)[0], "pipeline.summary": outcome}, uri=tracking_uri
    )
    tracking.end_run(run_id, "FINISHED", uri=tracking_uri)
    return outcome


# ----------------------------------------------------------------------------------- ingest and fit
def ingest_step(
    config_path: str,
    data_source: str,
    train_out: str | Path,
    eval_out: str | Path,
    run_id: str | None = None,
    tracking_uri: str | None = None,
) -> IngestStepResult:
    """The ``ingest`` stage into two artifact folders, with the datasets recorded as run inputs."""
    import pyarrow.parquet as pq

    from recpipe import tracking
    from recpipe.stages import ingest

    cfg = load_config(config_path)
    if run_id and tracking_uri:
        resume(run_id, tracking_uri, cfg.tracking.experiment)
    with failing(run_id, tracking_uri, "ingest"):
        work = Path(train_out).parent / f".{Path(train_out).name}.ingest"
        r = ingest.run(
            data_source,
            work,
            cfg.data.label,
            cfg.data.split,
            neg_sample_rate=cfg.data.neg_sample_rate,
            oracle_column=cfg.data.oracle_column,
            csv=cfg.data.csv,
        )
        for src, dst in ((r.train_dir, train_out), (r.eval_dir, eval_out)):
            shutil.rmtree(dst, ignore_errors=True)
            shutil.move(src, dst)
        shutil.rmtree(work, ignore_errors=True)
        if run_id and tracking_uri:
            schema = pq.read_schema(next(iter(sorted(Path(train_out).glob("*.parquet")))))
            columns = {f.name: str(f.type) for f in schema}
            for path, rows, digest, ctx in (
                (data_source, r.train_rows, r.train_digest, "training"),
                (data_source, r.eval_rows, r.eval_digest, "evaluation"),
            ):
                tracking.log_dataset_input(run_id, path, rows, columns, digest, ctx, name=f"{ctx}-data")
            tracking.log_metrics(
                run_id,
                {
                    "data.train_rows": r.train_rows,
                    "data.eval_rows": r.eval_rows,
                    "data.oracle_auc": r.oracle_auc,
                },
            )
    return IngestStepResult(
        train_rows=r.train_rows,
        eval_rows=r.eval_rows,
        oracle_auc=float("nan") if r.oracle_auc is None else float(r.oracle_auc),
        data_digest=r.eval_digest,
    )


def fit_step(
    config_path: str,
    train_dir: str,
    fg_out: str | Path,
    run_id: str | None = None,
    tracking_uri: str | None = None,
) -> FitStepResult:
    """The ``fit`` stage; ``fg.json`` is also logged to the run."""
    from recpipe import tracking
    from recpipe.stages import fit

    if run_id and tracking_uri:
        resume(run_id, tracking_uri)
    with failing(run_id, tracking_uri, "fit"):
        r = fit.run(config_path, train_dir, fg_out)
        if run_id and tracking_uri:
            tracking.log_artifact(run_id, r.fg_json, "features")
            tracking.set_tags(run_id, {"feature_spec_digest": r.digest}, uri=tracking_uri)
    return FitStepResult(r.fg_json, r.features, r.embedding_rows, r.digest)


def is_local() -> bool:
    """True when steps run on this machine (``recpipe run``, tests), per env ``RECPIPE_LOCAL=1``."""
    return os.environ.get(ENV_LOCAL, "") == "1"
