"""The pipeline run's first and last steps, and the record of a rejected candidate."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def start(
    config_path: str,
    data_source: str,
    backends: str,
    min_auc: str,
    max_auc_drop: str,
    max_logloss_rise: str,
    workers: int,
    gpus_per_worker: int,
    mlflow_uri: str,
    model_name: str,
    node_selector: dict,
    tolerations: list,
    config_overrides: dict,
    kfp_run_id: str,
    launcher: str,
    config: Output[Artifact],
    partitions: str = "",
    init_from: str = "",
    schedule_time: str = "",
) -> NamedTuple(
    "StartOutputs",
    [
        ("run_id", str),
        ("tracking_uri", str),
        ("model_name", str),
        ("backends", str),
        ("pod_gpus", int),
        ("pod_node_selector", dict),
        ("pod_tolerations", list),
    ],
):
    """Check every pipeline parameter (failing with its name), write the resolved config, start the
    MLflow run that later steps resume by id, and say what the train pod itself asks for. Empty gate
    thresholds keep the config's ``eval.gate``; ``partitions`` and ``init_from`` become ``data.partitions``
    and ``train.init_from`` (empty: the config's), ``{date}`` / ``{date-N}`` filled from ``schedule_time``
    and ``champion-if-any`` resolved to the champion's version or from scratch."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import start as start_run

        r = start_run(
            config_path, data_source, config.path, backends, min_auc, max_auc_drop, max_logloss_rise, workers,
            gpus_per_worker, mlflow_uri, model_name, config_overrides, node_selector, tolerations, kfp_run_id,
            launcher=launcher, partitions=partitions, init_from=init_from, schedule_time=schedule_time,
        )  # fmt: skip
        pod = r.train_pod
        return (
            r.run_id,
            r.tracking_uri,
            r.model_name,
            r.backends,
            pod.gpus,
            pod.node_selector,
            pod.tolerations,
        )


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def reject(run_id: str, tracking_uri: str, gate_reasons: str) -> str:
    """Record a failed gate (a normal outcome) on the MLflow run; returns ``rejected: <reasons>``."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import reject as reject_run
        from recpipe.tracking import open_run_log

        return reject_run(open_run_log(run_id, tracking_uri), gate_reasons)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def finish(run_id: str, tracking_uri: str, outcome: str) -> str:
    """End the MLflow run as FINISHED with the outcome; the outcome is the pipeline's output."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import finish as finish_run
        from recpipe.tracking import open_run_log

        return finish_run(open_run_log(run_id, tracking_uri), outcome)
