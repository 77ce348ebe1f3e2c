"""train: the worker trained by the launcher the caller names, its record in the run log.

``launcher="local"`` trains on this machine: one plain process, or ``torchrun`` of several (CPU processes
with gloo, or this pod's GPUs with NCCL). ``launcher="pytorchjob"`` creates a Kubeflow PyTorchJob across
``workers`` pods; one worker trains in this pod, which the pipeline gave the GPUs. A failure ends the run
log as FAILED with the reason.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recpipe.config import ParameterError
from recpipe.launch.cluster import launch_pytorchjob
from recpipe.launch.command import LAUNCHERS
from recpipe.launch.errors import LaunchError, TrainingFailed
from recpipe.launch.local import launch_local, local_world
from recpipe.runlog import NULL_LOG, RunLog, failing

# How a local run treats checkpoints already in its output folder.
RESUME_MODES = ("auto", "never", "must")


@dataclass
class TrainStageResult:
    """Where training ran and what it made (what the trainer did: :class:`~recpipe.train.result.TrainResult`,
    in ``train_result.json`` of ``checkpoint_dir``).

    Args:
        checkpoint_dir (str): the checkpoint folder (``out_dir``).
        where (str): ``"local"`` or ``"pytorchjob/<namespace>/<name>"``.
        world_size (int): training processes.
        seconds (float): wall time of the launch.
    """

    checkpoint_dir: str
    where: str
    world_size: int
    seconds: float


def run(
    config_path: str,
    train_dir: str,
    eval_dir: str,
    out_dir: str,
    fg_json: str | None = None,
    workers: int = 1,
    gpus_per_worker: int = 0,
    nproc_per_node: int | None = None,
    launcher: str = "local",
    accelerator: str = "nvidia.com/gpu",
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    image: str | None = None,
    workspace_pvc: str = "",
    namespace: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    log: RunLog = NULL_LOG,
    resume: str = "auto",
    tracking_uri: str | None = None,
) -> TrainStageResult:
    """Train ``config_path`` on ``train_dir`` (validating on ``eval_dir``) into the checkpoint folder
    ``out_dir``.

    Args:
        config_path (str): recpipe config YAML.
        train_dir (str), eval_dir (str): Parquet datasets written by ``ingest``.
        out_dir (str): checkpoint folder (``checkpoints/ckpt-<step>``, ``latest``).
        fg_json (str | None): the fitted FeatureSpec from ``fit`` (default: the trainer builds it).
        workers (int): pods of a PyTorchJob (``local``: the world size is ``workers × max(1, gpus)``).
        gpus_per_worker (int): GPUs per pod = torchrun processes per pod (0: CPU).
        nproc_per_node (int | None): local processes (default ``workers × max(1, gpus_per_worker)``).
        launcher (str): ``"local"`` (this machine) or ``"pytorchjob"`` (a PyTorchJob when ``workers > 1``).
        accelerator (str): GPU resource name for the PyTorchJob pods.
        node_selector, tolerations: placement of the PyTorchJob pods.
        image (str | None): image of the PyTorchJob pods (default env ``RECPIPE_IMAGE``).
        workspace_pvc (str): ReadWriteMany claim shared by this pod and the job's pods (PyTorchJob only).
        namespace (str | None): namespace of the job (default: this pod's).
        overrides (Mapping | None): dotted config overrides (``{"train.max_steps": 100}``).
        log (RunLog): records the per-step metrics, ``train_result.json``, the curves, tags ``train.where``,
            ``train.world_size``, ``train.checkpoint`` and ``train.checkpoint_manifest_sha256`` (what a warm
            start from this run's registered version reads), ``init_from``, ``init_from_version`` and
            ``init_from_run_id`` (a warm start) and metric ``train.seconds``.
        resume (str): ``"auto"`` continues from the latest checkpoint in ``out_dir`` if there is one,
            ``"never"`` starts fresh, ``"must"`` fails unless there is one to continue from (local only).
            A run that continues its own checkpoint ignores ``train.init_from``.
        tracking_uri (str | None): the registry a ``train.init_from: models:/…`` is read from (default: the
            run log's, else env ``MLFLOW_TRACKING_URI``, else the config's ``tracking.uri``).

    Raises:
        ParameterError: an invalid parameter (the message names it).
        SchemaMismatch: the data lacks columns the config reads (all listed; checked before any process
            starts).
        OversizeError: the embedding tables and optimizer state exceed the devices' memory (checked
            before any process starts; ``train.allow_oversize`` skips it).
        TrainingFailed: training ended without a checkpoint.
    """
    if launcher not in LAUNCHERS:
        raise ParameterError("launcher", f"must be one of {list(LAUNCHERS)}, got {launcher!r}")
    if int(workers) < 1:
        raise ParameterError("workers", f"must be >= 1, got {workers}")
    if int(gpus_per_worker) < 0:
        raise ParameterError("gpus_per_worker", f"must be >= 0, got {gpus_per_worker}")
    if resume not in RESUME_MODES:
        raise ParameterError("resume", f"must be one of {list(RESUME_MODES)}, got {resume!r}")
    if resume == "must":
        from recpipe.train.checkpoint_files import latest_checkpoint

        if latest_checkpoint(Path(out_dir)) is None:
            raise ParameterError("resume", f"is 'must' but {out_dir} holds no complete checkpoint")
    _check_retrieval(config_path, overrides or {}, workers, gpus_per_worker, nproc_per_node, resume)
    # One worker needs no job: it trains in this pod, which the pipeline gave the GPUs and placement.
    cluster = launcher == "pytorchjob" and int(workers) > 1
    t0 = time.perf_counter()
    with failing(log, "train"):
        warm = _warm_source(config_path, out_dir, overrides or {}, resume, tracking_uri, log)
        if warm is not None:  # the workers get the resolved folder, and the parent's fitted FeatureSpec
            overrides = {**(overrides or {}), "train.init_from": str(warm.checkpoint)}
            fg_json = fg_json or str(warm.checkpoint / "fg.json")
        elif fg_json is None:
            fg_json = _resumed_spec(config_path, out_dir, overrides or {})
        if cluster:
            image = image or os.environ.get("RECPIPE_IMAGE", "")
            if not workspace_pvc:
                raise ParameterError(
                    "workspace_pvc",
                    "multi-node training (workers > 1) needs a ReadWriteMany PersistentVolumeClaim",
                )
            if not image:
                raise ParameterError("image", "the PyTorchJob needs an image (env RECPIPE_IMAGE is unset)")
            where, world = launch_pytorchjob(
                config_path, train_dir, eval_dir, out_dir, fg_json, int(workers), int(gpus_per_worker),
                image=str(image), workspace_pvc=workspace_pvc, accelerator=accelerator,
                node_selector=node_selector, tolerations=tolerations, namespace=namespace,
                overrides=overrides,
            )  # fmt: skip
        else:
            if nproc_per_node is not None and int(nproc_per_node) < 1:
                raise ParameterError("nproc_per_node", f"must be >= 1, got {nproc_per_node}")
            world = local_world(workers, gpus_per_worker, nproc_per_node)
            _train_local(
                config_path, train_dir, eval_dir, out_dir, fg_json, world, overrides or {}, resume != "never"
            )
            where = "local"
        seconds = round(time.perf_counter() - t0, 1)
        log_training(log, out_dir)
        log.set_tags(
            {
                "train.where": where,
                "train.world_size": world,
                **checkpoint_tags(out_dir),
                **(warm.tags() if warm else {}),
            }
        )
        log.log_metrics({"train.seconds": seconds})
    return TrainStageResult(checkpoint_dir=str(out_dir), where=where, world_size=world, seconds=seconds)


def _check_retrieval(
    config_path: str,
    overrides: Mapping[str, Any],
    workers: int,
    gpus_per_worker: int,
    nproc_per_node: int | None,
    resume: str,
) -> None:
    """A retrieval model (``model.type`` in ``RETRIEVAL_MODELS``) trains in one process and writes one final
    checkpoint (:mod:`recpipe.train.retrieval_job`): more ranks, a resume that must continue, or ``train:``
    options it does not implement (a warm start among them) are refused here, before any process starts."""
    from recpipe.config import load_config
    from recpipe.config.catalogue import RETRIEVAL_MODELS

    cfg = load_config(config_path, dict(overrides))
    if cfg.model.type not in RETRIEVAL_MODELS:
        return
    from recpipe.train.retrieval_check import check_retrieval_train_config

    check_retrieval_train_config(cfg)
    world = local_world(workers, gpus_per_worker, nproc_per_node)
    if world > 1:
        name = "nproc_per_node" if nproc_per_node is not None else "workers"
        raise ParameterError(
            name,
            f"model {cfg.model.type!r} trains in one process (the retrieval trainer is unsharded and its "
            f"sampled negatives are shared by the whole batch), got a world of {world}",
        )
    if resume == "must":
        raise ParameterError("resume", f"model {cfg.model.type!r}: a retrieval run does not resume")


def _warm_source(
    config_path: str,
    out_dir: str,
    overrides: Mapping[str, Any],
    resume: str,
    tracking_uri: str | None,
    log: RunLog,
) -> Any:
    """The :class:`~recpipe.tracking.checkpoints.WarmSource` of ``train.init_from`` for a run that starts
    fresh, else None (no ``init_from``, or ``out_dir`` holds a checkpoint this run continues)."""
    from recpipe.config import load_config

    cfg = load_config(config_path, dict(overrides))
    if not cfg.train.init_from:
        return None
    from recpipe.train.checkpoint_files import latest_checkpoint

    if resume != "never" and latest_checkpoint(Path(out_dir)) is not None:
        return None
    from recpipe.tracking.checkpoints import resolve_init_from

    uri = tracking_uri or getattr(log, "tracking_uri", None)  # the MLflow run log's store
    return resolve_init_from(cfg.train.init_from, uri, cfg.tracking.uri)


def _resumed_spec(config_path: str, out_dir: str, overrides: Mapping[str, Any]) -> str | None:
    """A warm-started run continued without ``fg_json``: the FeatureSpec of its own latest checkpoint (the
    parent's), not one fitted again."""
    from recpipe.config import load_config

    if not load_config(config_path, dict(overrides)).train.init_from:
        return None
    from recpipe.train.checkpoint_files import SPEC, latest_checkpoint

    ckpt = latest_checkpoint(Path(out_dir))
    return str(ckpt / SPEC) if ckpt is not None else None


def checkpoint_tags(out_dir: str | Path) -> dict[str, str]:
    """Run tags naming the final checkpoint in ``out_dir`` and pinning its content (the sha256 of its
    manifest), which a later ``train.init_from: models:/…`` of the registered version checks; {} when none."""
    from recpipe.train.result import TrainResult

    result = TrainResult.read(Path(out_dir))
    if result is None or not result.checkpoint or not Path(result.checkpoint).is_dir():
        return {}
    from recpipe.tracking.checkpoints import TAG_CHECKPOINT, TAG_CHECKPOINT_MANIFEST
    from recpipe.train.warm import manifest_digest

    path = Path(result.checkpoint).resolve()
    return {TAG_CHECKPOINT: str(path), TAG_CHECKPOINT_MANIFEST: manifest_digest(path)}


def check_data(
    config_path: str,
    train_dir: str,
    eval_dir: str | None,
    fg_json: str | None,
    overrides: Mapping[str, Any],
    nproc: int | None = None,
) -> None:
    """Check both splits against the config's columns, and the tables against this machine's memory
    for ``nproc`` ranks, in this process, in a second, rather than in the ranks after the model is built.

    Args:
        config_path (str): the config YAML.
        train_dir (str), eval_dir (str | None): the data.
        fg_json (str | None): the fitted FeatureSpec (default: built from the config).
        overrides (Mapping): dotted config overrides.
        nproc (int | None): ranks to start here (None: no memory check).

    Raises:
        SchemaMismatch: a split lacks columns the config reads.
        OversizeError: the tables and optimizer state exceed the ranks' devices (unless
            ``train.allow_oversize``).
    """
    from recpipe.config import load_config
    from recpipe.features.build import build_feature_spec
    from recpipe.features.schema_check import check_source
    from recpipe.features.spec import FeatureSpec

    cfg = load_config(config_path, dict(overrides))
    spec = FeatureSpec.load(fg_json) if fg_json else build_feature_spec(cfg)
    if nproc is not None and not cfg.train.allow_oversize:
        from recpipe.train.memory import check_fits, embedding_memory_report, planned_device_memory
        from recpipe.train.optim_check import ranks_device

        check_fits(
            embedding_memory_report(spec, cfg.train.sparse_optimizer.type),
            planned_device_memory(ranks_device(), nproc),
        )
    for uri in (train_dir, eval_dir):
        if uri:
            check_source(spec, uri, cfg.csv_options())


def _train_local(
    config_path: str,
    train_dir: str,
    eval_dir: str,
    out_dir: str,
    fg_json: str | None,
    nproc: int,
    overrides: Mapping[str, Any],
    resume: bool = True,
) -> None:
    check_data(config_path, train_dir, eval_dir, fg_json, overrides, nproc)
    try:  # each rank's threads: train.threads_per_rank, else OMP_NUM_THREADS, else the cores split
        launch_local(
            config_path, train_dir, eval_dir, out_dir, nproc, overrides,
            resume=resume, spec_path=fg_json, check=True,
        )  # fmt: skip
    except LaunchError as err:
        # The run's failure reason names the stage's error type, whichever launcher failed.
        raise TrainingFailed(str(err)) from None


def log_training(log: RunLog, out_dir: str | Path) -> None:
    """Record the trainer's ``metrics.jsonl`` (per step) and ``train_result.json`` in ``log``, with the
    training curves.

    Args:
        log (RunLog): where to record.
        out_dir (str | Path): the trainer's output folder.
    """
    if log.run_id is None:
        return  # nothing is recorded: skip reading the files and drawing the curves
    from recpipe.eval.plots import training_curves_png
    from recpipe.train.result import RESULT_FILE, TrainResult

    out = Path(out_dir)
    history = []
    metrics_file = out / "metrics.jsonl"
    if metrics_file.is_file():
        history = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    for rec in history:
        values = {
            f"train.{k}": v
            for k, v in rec.items()
            if k not in ("step", "epoch") and isinstance(v, int | float)
        }
        log.log_metrics(values, step=int(rec.get("step", 0)))
    result = TrainResult.read(out)
    if result is not None:
        final = {
            "steps": result.steps,
            "rows_trained": result.rows_trained,
            "seconds": result.seconds,
            "rows_per_second": result.rows_per_second,  # over training steps: evaluations apart
            "train_seconds": result.train_seconds,
            "eval_seconds": result.eval_seconds,
            "checkpoint_seconds": result.checkpoint_seconds,
            "final_loss": result.final_loss,
        }
        rows = result.rows or {}  # rows read = used + skipped (on_bad_row: skip), truncated histories
        final.update({k: v for k, v in rows.items() if isinstance(v, int)})
        # the pressure on each zero-collision table: ids that lost their row to a new one this run
        final.update({f"zch_evictions.{t}": n for t, n in (result.zch_evictions or {}).items()})
        log.log_metrics({f"train.{k}": v for k, v in final.items()})
        log.log_artifact(out / RESULT_FILE, "train")
    if history:
        png = training_curves_png(history, out / ".plots" / "training_curves.png")
        log.log_artifact(png, "train")
