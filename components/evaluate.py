"""evaluate: metrics of the candidate, the champion re-evaluated on the same data, the gate."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def evaluate(
    config: Input[Artifact],
    checkpoint: Input[Model],
    eval_data: Input[Dataset],
    train_data: Input[Dataset],
    run_id: str,
    tracking_uri: str,
    model_name: str,
    metrics: Output[Metrics],
    classification: Output[ClassificationMetrics],
    report: Output[Artifact],
) -> NamedTuple("GateOutputs", [("gate_passed", bool), ("gate_reasons", str)]):
    """Evaluate the checkpoint (AUC, GAUC, logloss, ROC, confusion matrix; a retrieval model: recall@K and
    hit-rate@K over its catalogue, no ROC), measure the eval split's drift from the training split, and gate it
    against the thresholds (``max_psi`` included) and the registry's ``champion`` (re-evaluated on the same eval
    data when possible)."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.stages import evaluate as stage
        from recpipe.tracking import open_run_log

        r = stage.run(
            checkpoint.path, eval_data.path, report.path, config_path=config.path, champion_model=model_name,
            tracking_uri=tracking_uri, train_data=train_data.path, log=open_run_log(run_id, tracking_uri),
        )  # fmt: skip
        for name, value in r.kfp_metrics().items():
            metrics.log_metric(name, value)
        if isinstance(r, stage.EvaluateResult):  # a ranking model's scores have a ROC curve
            classification.log_roc_curve(r.roc_fpr, r.roc_tpr, r.roc_thresholds)
            classification.log_confusion_matrix(["no click", "click"], r.confusion_matrix)
        return (r.gate_passed, "\n".join(r.gate_reasons))
