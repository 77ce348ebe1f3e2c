"""train: on this pod (one process, or torchrun over its GPUs), or a PyTorchJob across ``workers`` pods."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components.image import CUDA_IMAGE


@dsl.component(base_image=CUDA_IMAGE, install_kfp_package=False)
def train(
    config: Input[Artifact],
    train_data: Input[Dataset],
    eval_data: Input[Dataset],
    feature_spec: Input[Artifact],
    run_id: str,
    tracking_uri: str,
    launcher: str,
    workers: int,
    gpus_per_worker: int,
    accelerator_type: str,
    node_selector: dict,
    tolerations: list,
    image: str,
    workspace_pvc: str,
    checkpoint: Output[Model],
) -> str:
    """Train the model. ``launcher="pytorchjob"`` with ``workers > 1`` creates a PyTorchJob (``workers`` pods
    × ``gpus_per_worker`` GPUs, NCCL) and streams its logs; otherwise (``"local"``, or one worker) training
    runs on this pod. A failure marks the MLflow run FAILED with the reason. Returns where it ran (``local``
    or the PyTorchJob name)."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.stages import train as stage
        from recpipe.tracking import open_run_log

        r = stage.run(
            config.path, train_data.path, eval_data.path, checkpoint.path, fg_json=feature_spec.path,
            workers=workers, gpus_per_worker=gpus_per_worker, launcher=launcher, accelerator=accelerator_type,
            node_selector=node_selector, tolerations=tolerations, image=image, workspace_pvc=workspace_pvc,
            log=open_run_log(run_id, tracking_uri),
        )  # fmt: skip
        checkpoint.metadata.update({"world_size": r.world_size, "where": r.where, "seconds": r.seconds})
        return r.where
