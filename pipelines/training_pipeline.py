"""The recpipe training pipeline: wiring only (components in ``components/``, logic in ``recpipe.stages``).

    start → ingest → fit → train → evaluate ─┬─ gate passed: export → register (challenger) → [auto_promote] promote (champion)
                                              └─ gate failed: reject (MLflow tag)
                                           → finish (MLflow run FINISHED; the outcome is the pipeline output)

``train`` with ``workers > 1`` launches a PyTorchJob and waits for it (the job's pods get the GPUs, node
selector and tolerations); otherwise the train pod itself asks for ``gpus_per_worker`` accelerators.
Kubernetes settings are attached here; ``kfp.local`` ignores them, so credentials are read from the
environment there (``ODPS_*``, ``AWS_*``, ``MLFLOW_TRACKING_TOKEN``).
"""

from pathlib import Path
from typing import Any

from kfp import compiler, dsl, kubernetes
from kfp.dsl import PipelineTask
from kfp.dsl.graph_component import GraphComponent

from components import (
    CUDA_IMAGE,
    IMAGE,
    evaluate,
    export,
    finish,
    fit,
    ingest,
    promote,
    register,
    reject,
    start,
    train,
)
from recpipe.launch.secrets import MLFLOW_SECRET, OBJECT_STORE_SECRET, ODPS_SECRET, SECRETS

PIPELINE_NAME = "recpipe-training"
IMAGE_PULL_POLICY = "IfNotPresent"
WORKSPACE_MOUNT = "/workspace"

# The Secrets every step reads as environment variables (names and keys: recpipe.launch.secrets.SECRETS, the
# one table the PyTorchJob's pods use too). Credentials never travel as parameters.
STEP_SECRETS = (OBJECT_STORE_SECRET, MLFLOW_SECRET)


def _settings(task: PipelineTask, image: str = IMAGE, odps: bool = False) -> PipelineTask:
    """Secrets as env (optional: a run that reads no ODPS table needs no ODPS secret), pull policy, no cache
    (every step writes to the MLflow run, so a cached step would skip that)."""
    for name in STEP_SECRETS + ((ODPS_SECRET,) if odps else ()):
        kubernetes.use_secret_as_env(task, secret_name=name, secret_key_to_env=SECRETS[name], optional=True)
    kubernetes.set_image_pull_policy(task, IMAGE_PULL_POLICY)
    task.set_env_variable("RECPIPE_IMAGE", image)
    task.set_caching_options(False)
    return task


def train_step(
    run: PipelineTask,
    data: PipelineTask,
    spec: PipelineTask,
    workers: Any,
    gpus_per_worker: Any,
    accelerator_type: Any,
    node_selector: Any,
    tolerations: Any,
    workspace_pvc: Any,
    launcher: Any,
) -> PipelineTask:
    """The train task of the model whose ``start``, ``ingest`` and ``fit`` tasks are given, with its pod's GPUs,
    placement and workspace (the pipeline's parameters or constants)."""
    trained = _settings(
        train(
            config=run.outputs["config"],
            train_data=data.outputs["train_data"],
            eval_data=data.outputs["eval_data"],
            feature_spec=spec.outputs["feature_spec"],
            run_id=run.outputs["run_id"],
            tracking_uri=run.outputs["tracking_uri"],
            workers=workers,
            gpus_per_worker=gpus_per_worker,
            accelerator_type=accelerator_type,
            node_selector=node_selector,
            tolerations=tolerations,
            image=CUDA_IMAGE,
            workspace_pvc=workspace_pvc,
            launcher=launcher,
        ),
        image=CUDA_IMAGE,
    )
    # The train pod's own GPUs and placement come from start: the parameters' values for single-pod
    # training, none when workers > 1 (the PyTorchJob's pods get them; this pod only launches and waits).
    trained.set_accelerator_type(accelerator_type).set_accelerator_limit(run.outputs["pod_gpus"])
    kubernetes.add_node_selector_json(trained, run.outputs["pod_node_selector"])
    kubernetes.add_toleration_json(trained, run.outputs["pod_tolerations"])
    kubernetes.mount_pvc(trained, pvc_name=workspace_pvc, mount_path=WORKSPACE_MOUNT)
    return trained


def _build(schedule_time: str) -> GraphComponent:
    """The pipeline whose ``start`` step receives ``schedule_time`` (a constant: KFP fills a placeholder only
    where a task input is exactly that constant)."""

    @dsl.pipeline(
        name=PIPELINE_NAME, description="Raw table → trained, gated, exported, registered CTR model."
    )
    def training_pipeline(
        config: str = "configs/din_taobao.yaml",
        data_source: str = "synthetic:taobao?rows=1000000",
        workers: int = 1,
        gpus_per_worker: int = 1,
        accelerator_type: str = "nvidia.com/gpu",
        node_selector: dict = {},  # noqa: B006 - KFP pipeline parameters take literal defaults
        tolerations: list = [],  # noqa: B006
        min_auc: str = "",
        max_auc_drop: str = "",
        max_logloss_rise: str = "",
        backends: str = "",
        mlflow_uri: str = "",
        model_name: str = "",
        auto_promote: bool = True,
        workspace_pvc: str = "recpipe-workspace",
        config_overrides: dict = {},  # noqa: B006
        launcher: str = "pytorchjob",
        partitions: str = "",
        init_from: str = "",
    ) -> str:
        """Train, gate, export, register and (optionally) promote a CTR model.

        Args:
            config: recpipe config YAML (a path in the image, e.g. ``configs/din_taobao.yaml``).
            data_source: ``odps://project/tables/t[/pt=…]``, a Parquet/CSV URI, or ``synthetic:taobao?rows=N``.
            workers: training pods; > 1 launches a PyTorchJob (training operator).
            gpus_per_worker: accelerators per pod (torchrun ``nproc_per_node``); 0 trains on CPU.
            accelerator_type: accelerator resource name, e.g. ``nvidia.com/gpu``.
            node_selector: node labels the training pods must match, e.g. ``{"gpu": "h100"}``.
            tolerations: Kubernetes tolerations for the training pods.
            min_auc: gate: the candidate's AUC floor, in [0, 1]; empty: the config's ``eval.gate.min_auc``.
            max_auc_drop: gate: the largest AUC drop against the champion, in [0, 1]; empty: the config's.
            max_logloss_rise: gate: the largest logloss rise against the champion, in [0, 1]; empty: the
                config's.
            backends: comma-separated export backends (jit, aoti, onnx, rtp, trt); empty: the config's.
            mlflow_uri: MLflow tracking URI; empty: ``MLFLOW_TRACKING_URI`` / the config's.
            model_name: registered model name; empty: the config's.
            auto_promote: move alias ``champion`` to the new version when its gate passed.
            workspace_pvc: ReadWriteMany claim mounted on the train pod and shared with the PyTorchJob's pods.
            config_overrides: dotted config overrides, e.g. ``{"train.max_steps": 1000}``.
            launcher: how training starts: ``pytorchjob`` (a cluster: a PyTorchJob when ``workers > 1``,
                else torchrun in the train pod) or ``local`` (every step on this machine: ``recpipe run``).
            partitions: ``data.partitions`` of a partitioned source (``dt=20260107``, ``last:7``); ``{date}`` and
                ``{date-N}`` are filled from the run's scheduled time (a recurring run); empty: the config's.
            init_from: ``train.init_from`` (``models:/NAME@champion``, ``models:/NAME/3``, a checkpoint folder),
                or ``champion-if-any``: the champion's version, from scratch while there is none; empty: the
                config's.
        """
        run = start(
            config_path=config,
            data_source=data_source,
            backends=backends,
            min_auc=min_auc,
            max_auc_drop=max_auc_drop,
            max_logloss_rise=max_logloss_rise,
            workers=workers,
            gpus_per_worker=gpus_per_worker,
            mlflow_uri=mlflow_uri,
            model_name=model_name,
            node_selector=node_selector,
            tolerations=tolerations,
            config_overrides=config_overrides,
            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            launcher=launcher,
            partitions=partitions,
            init_from=init_from,
            schedule_time=schedule_time,
        )
        _settings(run, odps=True)
        run_id, uri = run.outputs["run_id"], run.outputs["tracking_uri"]
        cfg = run.outputs["config"]

        data = _settings(
            ingest(config=cfg, data_source=data_source, run_id=run_id, tracking_uri=uri), odps=True
        )
        spec = _settings(
            fit(config=cfg, train_data=data.outputs["train_data"], run_id=run_id, tracking_uri=uri)
        )

        trained = train_step(
            run, data, spec, workers, gpus_per_worker, accelerator_type, node_selector, tolerations,
            workspace_pvc, launcher,
        )  # fmt: skip
        checkpoint = trained.outputs["checkpoint"]

        gate = _settings(
            evaluate(
                config=cfg,
                checkpoint=checkpoint,
                eval_data=data.outputs["eval_data"],
                train_data=data.outputs["train_data"],
                run_id=run_id,
                tracking_uri=uri,
                model_name=run.outputs["model_name"],
            )
        )
        with dsl.If(gate.outputs["gate_passed"] == True, name="gate-passed"):  # noqa: E712 - KFP condition syntax
            exported = _settings(
                export(
                    checkpoint=checkpoint,
                    eval_data=data.outputs["eval_data"],
                    backends=run.outputs["backends"],
                    run_id=run_id,
                    tracking_uri=uri,
                )
            )
            version = _settings(
                register(
                    exported=exported.outputs["exported"],
                    report=gate.outputs["report"],
                    eval_data=data.outputs["eval_data"],
                    run_id=run_id,
                    tracking_uri=uri,
                    model_name=run.outputs["model_name"],
                    data_digest=data.outputs["data_digest"],
                )
            )
            with dsl.If(auto_promote == True, name="auto-promote"):  # noqa: E712
                _settings(
                    promote(
                        model_name=run.outputs["model_name"],
                        version=version.outputs["version"],
                        tracking_uri=uri,
                        run_id=run_id,
                    )
                )
        with dsl.Else(name="gate-failed"):
            rejected = _settings(
                reject(run_id=run_id, tracking_uri=uri, gate_reasons=gate.outputs["gate_reasons"])
            )
        outcome = dsl.OneOf(version.outputs["outcome"], rejected.output)
        done = _settings(finish(run_id=run_id, tracking_uri=uri, outcome=outcome))
        return done.output

    return training_pipeline


training_pipeline = _build(dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER)
"""The cluster pipeline (compile, submit, schedule): each run of a recurring run gets its scheduled time (a
one-off run its creation time)."""

local_training_pipeline = _build("")
"""The same pipeline for kfp.local (``recpipe run``), whose runs have no scheduled time: kfp 2.17's local
runner cannot parse the schedule-time placeholder (IndexError in ``placeholder_utils``)."""


def compile_pipeline(out: str | Path) -> Path:
    """Write the pipeline's IR YAML (with its Kubernetes platform spec) to ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(training_pipeline, str(out))
    return out
