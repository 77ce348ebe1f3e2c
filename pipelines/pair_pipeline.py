"""The pair pipeline: a retrieval model and a ranking model trained, gated, exported, registered and promoted
together in one run (issue 30). Wiring only (components in ``components/``, logic in ``recpipe.pipeline.pair``).

    start ×2 → check-pair (the ranker's item columns in the retriever's catalogue)
      → per model: ingest → fit → train → evaluate → export → register (challenger)
      → pair-decision (partner tags; promote only if both gates passed)
          ─┬─ both passed: promote-pair (both champion)
           └─ else: hold-pair (neither moves; the runs say which gate failed)
      → finish-pair (both MLflow runs FINISHED; the outcome is the pipeline output)

Each model has its own MLflow run (``start``), so its params, metrics and gate read as a single-model run's;
both are registered whatever their gate says (a version the pair decision can name), and only the pair step
moves ``champion``. The retriever trains in one process (its sampled negatives are shared by the batch).
"""

from pathlib import Path
from typing import Any

from kfp import compiler, dsl
from kfp.dsl import PipelineTask

from components import evaluate, export, fit, ingest, register, start
from components.pair import check_pair, finish_pair, hold_pair, pair_decision, promote_pair
from pipelines.training_pipeline import _settings, train_step

PAIR_PIPELINE_NAME = "recpipe-pair"


def _start(config: Any, data_source: Any, backends: Any, model_name: Any, overrides: Any, workers: Any,
           gpus: Any, mlflow_uri: Any, node_selector: Any, tolerations: Any, launcher: Any) -> PipelineTask:  # fmt: skip
    """One model's ``start``: its own MLflow run and resolved config (the gate thresholds: the config's and
    its overrides')."""
    return _settings(
        start(
            config_path=config, data_source=data_source, backends=backends, min_auc="", max_auc_drop="",
            max_logloss_rise="", workers=workers, gpus_per_worker=gpus, mlflow_uri=mlflow_uri,
            model_name=model_name, node_selector=node_selector, tolerations=tolerations,
            config_overrides=overrides, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, launcher=launcher,
        ),
        odps=True,
    )  # fmt: skip


def _branch(run: PipelineTask, check: PipelineTask, data_source: Any, workers: Any, gpus: Any,
            accelerator_type: Any, node_selector: Any, tolerations: Any, workspace_pvc: Any,
            launcher: Any) -> tuple[PipelineTask, PipelineTask]:  # fmt: skip
    """One model from its data to its registered version, after the pair's check; returns (evaluate, register)."""
    cfg, run_id, uri = run.outputs["config"], run.outputs["run_id"], run.outputs["tracking_uri"]
    data = _settings(ingest(config=cfg, data_source=data_source, run_id=run_id, tracking_uri=uri), odps=True)
    data.after(check)
    spec = _settings(fit(config=cfg, train_data=data.outputs["train_data"], run_id=run_id, tracking_uri=uri))
    trained = train_step(
        run, data, spec, workers, gpus, accelerator_type, node_selector, tolerations, workspace_pvc, launcher
    )
    checkpoint = trained.outputs["checkpoint"]
    gate = _settings(
        evaluate(
            config=cfg, checkpoint=checkpoint, eval_data=data.outputs["eval_data"],
            train_data=data.outputs["train_data"], run_id=run_id, tracking_uri=uri,
            model_name=run.outputs["model_name"],
        )
    )  # fmt: skip
    exported = _settings(
        export(checkpoint=checkpoint, eval_data=data.outputs["eval_data"], backends=run.outputs["backends"],
               run_id=run_id, tracking_uri=uri)
    )  # fmt: skip
    version = _settings(
        register(
            exported=exported.outputs["exported"], report=gate.outputs["report"],
            eval_data=data.outputs["eval_data"], run_id=run_id, tracking_uri=uri,
            model_name=run.outputs["model_name"], data_digest=data.outputs["data_digest"],
        )
    )  # fmt: skip
    return gate, version


@dsl.pipeline(
    name=PAIR_PIPELINE_NAME,
    description="A retrieval and a ranking model trained, gated, registered and promoted together.",
)
def pair_pipeline(
    retriever_config: str = "configs/dssm_retrieval_small.yaml",
    ranker_config: str = "configs/deepfm_retrieval_ranker_small.yaml",
    retriever_data: str = "synthetic:retrieval?rows=200000&users=10000&items=4000",
    ranker_data: str = "synthetic:retrieval?rows=200000&users=10000&items=4000&ranking=1",
    retriever_gpus_per_worker: int = 1,
    ranker_workers: int = 1,
    ranker_gpus_per_worker: int = 1,
    accelerator_type: str = "nvidia.com/gpu",
    node_selector: dict = {},  # noqa: B006 - KFP pipeline parameters take literal defaults
    tolerations: list = [],  # noqa: B006
    retriever_backends: str = "",
    ranker_backends: str = "",
    mlflow_uri: str = "",
    retriever_model_name: str = "",
    ranker_model_name: str = "",
    auto_promote: bool = True,
    workspace_pvc: str = "recpipe-workspace",
    retriever_overrides: dict = {},  # noqa: B006
    ranker_overrides: dict = {},  # noqa: B006
    launcher: str = "pytorchjob",
) -> str:
    """Train, gate, export and register a retrieval model and a ranking model; promote both together.

    Args:
        retriever_config: the retrieval model's recpipe config (``dssm``, ``dssm_v2``); its negative sampler's
            item table is the pair's catalogue (``retriever_overrides`` may name it: ``data.params.ITEMS``).
        ranker_config: the ranking model's config; every item column it reads must be in the catalogue.
        retriever_data, ranker_data: each model's data source (the two datasets of one world).
        retriever_gpus_per_worker: the retriever's accelerators (it trains in one process: 0 or 1).
        ranker_workers, ranker_gpus_per_worker: the ranker's training pods and accelerators per pod.
        accelerator_type, node_selector, tolerations: the train pods' accelerators and placement.
        retriever_backends, ranker_backends: export backends; empty: each config's.
        mlflow_uri: MLflow tracking URI; empty: ``MLFLOW_TRACKING_URI`` / the configs'.
        retriever_model_name, ranker_model_name: registered model names; empty: each config's.
        auto_promote: promote the pair when both gates passed.
        workspace_pvc: ReadWriteMany claim mounted on the train pods.
        retriever_overrides, ranker_overrides: dotted config overrides of each model.
        launcher: ``pytorchjob`` (a cluster) or ``local`` (every step on this machine: ``recpipe run``).
    """
    one = 1
    r_run = _start(retriever_config, retriever_data, retriever_backends, retriever_model_name,
                   retriever_overrides, one, retriever_gpus_per_worker, mlflow_uri, node_selector, tolerations,
                   launcher)  # fmt: skip
    k_run = _start(ranker_config, ranker_data, ranker_backends, ranker_model_name, ranker_overrides,
                   ranker_workers, ranker_gpus_per_worker, mlflow_uri, node_selector, tolerations, launcher)  # fmt: skip
    check = _settings(
        check_pair(retriever_config=r_run.outputs["config"], ranker_config=k_run.outputs["config"])
    )
    r_gate, r_version = _branch(r_run, check, retriever_data, one, retriever_gpus_per_worker, accelerator_type,
                                node_selector, tolerations, workspace_pvc, launcher)  # fmt: skip
    k_gate, k_version = _branch(k_run, check, ranker_data, ranker_workers, ranker_gpus_per_worker,
                                accelerator_type, node_selector, tolerations, workspace_pvc, launcher)  # fmt: skip
    uri = r_run.outputs["tracking_uri"]
    r_id, k_id = r_run.outputs["run_id"], k_run.outputs["run_id"]
    r_name, k_name = r_run.outputs["model_name"], k_run.outputs["model_name"]
    decision = _settings(
        pair_decision(
            tracking_uri=uri, retriever_model=r_name, retriever_version=r_version.outputs["version"],
            retriever_run_id=r_id, retriever_gate_passed=r_gate.outputs["gate_passed"],
            retriever_gate_reasons=r_gate.outputs["gate_reasons"], ranker_model=k_name,
            ranker_version=k_version.outputs["version"], ranker_run_id=k_id,
            ranker_gate_passed=k_gate.outputs["gate_passed"], ranker_gate_reasons=k_gate.outputs["gate_reasons"],
            auto_promote=auto_promote,
        )
    )  # fmt: skip
    with dsl.If(decision.outputs["promote"] == True, name="pair-gates-passed"):  # noqa: E712 - KFP condition syntax
        promoted = _settings(
            promote_pair(
                tracking_uri=uri, retriever_model=r_name, retriever_version=r_version.outputs["version"],
                retriever_run_id=r_id, ranker_model=k_name, ranker_version=k_version.outputs["version"],
                ranker_run_id=k_id,
            )
        )  # fmt: skip
    with dsl.Else(name="pair-not-promoted"):
        held = _settings(
            hold_pair(tracking_uri=uri, retriever_run_id=r_id, ranker_run_id=k_id,
                      outcome=decision.outputs["outcome"])
        )  # fmt: skip
    outcome = dsl.OneOf(promoted.output, held.output)
    done = _settings(
        finish_pair(tracking_uri=uri, retriever_run_id=r_id, ranker_run_id=k_id, outcome=outcome)
    )
    return done.output


def compile_pair_pipeline(out: str | Path) -> Path:
    """Write the pair pipeline's IR YAML (with its Kubernetes platform spec) to ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(pair_pipeline, str(out))
    return out
