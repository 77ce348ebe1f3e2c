"""train: torchrun on this machine, or a Kubeflow PyTorchJob across ``workers`` pods of a cluster.

Which one: a PyTorchJob when ``workers > 1``, a Kubernetes API is reachable and ``RECPIPE_LOCAL`` is not
``1``; otherwise the trainer's launcher runs ``torchrun`` here (CPU processes with gloo, or this pod's GPUs
with NCCL). Either way a failure ends the pipeline's MLflow run as FAILED with the reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recpipe.stages import pipeline_run

ENV_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class TrainingFailed(RuntimeError):
    """Training ended without a checkpoint; the message carries the job's error and log tail."""


@dataclass
class TrainResult:
    checkpoint_dir: str
    where: str  # "local" or "pytorchjob/<namespace>/<name>"
    world_size: int
    seconds: float


def local_world(workers: int, gpus_per_worker: int, nproc_per_node: int | None) -> int:
    """Processes torchrun starts here: ``nproc_per_node`` if given, else ``workers × max(1, gpus)`` (the same
    world size the cluster job would have)."""
    if nproc_per_node is not None:
        if nproc_per_node < 1:
            raise pipeline_run.ParameterError("nproc_per_node", f"must be >= 1, got {nproc_per_node}")
        return nproc_per_node
    return max(1, int(workers)) * max(1, int(gpus_per_worker))


def cluster_available() -> bool:
    """True inside a pod (service account) or with a kubeconfig, unless ``RECPIPE_LOCAL=1``."""
    if pipeline_run.is_local():
        return False
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return Path(os.environ.get("KUBECONFIG", "~/.kube/config")).expanduser().is_file()


def run(
    config_path: str,
    train_dir: str,
    eval_dir: str,
    out_dir: str,
    fg_json: str | None = None,
    workers: int = 1,
    gpus_per_worker: int = 0,
    nproc_per_node: int | None = None,
    accelerator: str = "nvidia.com/gpu",
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    image: str | None = None,
    workspace_pvc: str = "",
    namespace: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    tracking_uri: str | None = None,
) -> TrainResult:
    """Train ``config_path`` on ``train_dir`` (validating on ``eval_dir``) into the checkpoint folder ``out_dir``.

    Args:
        config_path (str): recpipe config YAML.
        train_dir (str), eval_dir (str): Parquet datasets written by ``ingest``.
        out_dir (str): checkpoint folder (``checkpoints/ckpt-<step>``, ``latest``).
        fg_json (str | None): the fitted FeatureSpec from ``fit`` (default: the trainer builds it).
        workers (int): pods; > 1 creates a PyTorchJob on a cluster.
        gpus_per_worker (int): GPUs per pod = torchrun processes per pod (0: CPU).
        nproc_per_node (int | None): local processes (default ``workers × max(1, gpus_per_worker)``).
        accelerator (str): GPU resource name for the PyTorchJob pods.
        node_selector, tolerations: placement of the PyTorchJob pods.
        image (str | None): image of the PyTorchJob pods (default env ``RECPIPE_IMAGE``).
        workspace_pvc (str): ReadWriteMany claim shared by this pod and the job's pods (multi-node only).
        namespace (str | None): namespace of the job (default: this pod's).
        overrides (Mapping | None): dotted config overrides (``{"train.max_steps": 100}``).
        run_id (str | None), tracking_uri (str | None): the pipeline's MLflow run.
    """
    if int(workers) < 1:
        raise pipeline_run.ParameterError("workers", f"must be >= 1, got {workers}")
    if int(gpus_per_worker) < 0:
        raise pipeline_run.ParameterError("gpus_per_worker", f"must be >= 0, got {gpus_per_worker}")
    if run_id and tracking_uri:
        pipeline_run.resume(run_id, tracking_uri)
    t0 = time.perf_counter()
    with pipeline_run.failing(run_id, tracking_uri, "train"):
        if int(workers) > 1 and cluster_available():
            from recpipe.stages import train_cluster

            where, world = train_cluster.run_pytorchjob(
                config_path, train_dir, eval_dir, out_dir, fg_json, int(workers), int(gpus_per_worker),
                accelerator=accelerator, node_selector=node_selector or {}, tolerations=tolerations or [],
                image=image or os.environ.get("RECPIPE_IMAGE", ""), workspace_pvc=workspace_pvc,
                namespace=namespace, overrides=overrides or {},
            )  # fmt: skip
        else:
            world = local_world(workers, gpus_per_worker, nproc_per_node)
            _train_local(config_path, train_dir, eval_dir, out_dir, fg_json, world, overrides or {})
            where = "local"
        seconds = round(time.perf_counter() - t0, 1)
        if run_id and tracking_uri:
            from recpipe import tracking

            log_training(run_id, tracking_uri, out_dir)
            tracking.set_tags(run_id, {"train.where": where, "train.world_size": world}, uri=tracking_uri)
            tracking.log_metrics(run_id, {"train.seconds": seconds})
    return TrainResult(checkpoint_dir=str(out_dir), where=where, world_size=world, seconds=seconds)


def _train_local(
    config_path: str,
    train_dir: str,
    eval_dir: str,
    out_dir: str,
    fg_json: str | None,
    nproc: int,
    overrides: Mapping[str, Any],
) -> None:
    from recpipe.train.launch import LaunchError, launch

    threads = max(1, (os.cpu_count() or 1) // nproc)
    try:
        launch(
            config_path, train_dir, eval_dir, out_dir, nproc, dict(overrides),
            spec_path=fg_json, threads_per_rank=threads, check=True,
        )  # fmt: skip
    except LaunchError as err:
        raise TrainingFailed(
            f"torchrun ({nproc} process(es)) exit code {err.returncode}: {err.root_cause}"
        ) from None


def log_training(run_id: str, tracking_uri: str, out_dir: str | Path) -> None:
    """Log the trainer's ``metrics.jsonl`` (per step) and ``train_result.json`` to the run, with the curves."""
    import json

    from recpipe import tracking
    from recpipe.eval.plots import training_curves_png

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
        tracking.log_metrics(run_id, values, step=int(rec.get("step", 0)), uri=tracking_uri)
    result_file = out / "train_result.json"
    if result_file.is_file():
        result = json.loads(result_file.read_text())
        final = {k: result[k] for k in ("steps", "rows_trained", "seconds", "rows_per_second", "final_loss")}
        tracking.log_metrics(run_id, {f"train.{k}": v for k, v in final.items()}, uri=tracking_uri)
        tracking.log_artifact(run_id, result_file, "train", uri=tracking_uri)
    if history:
        png = training_curves_png(history, out / ".plots" / "training_curves.png")
        tracking.log_artifact(run_id, png, "train", uri=tracking_uri)
