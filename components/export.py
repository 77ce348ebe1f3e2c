"""export: the checkpoint to the configured serving backends, each parity-checked."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def export(
    checkpoint: Input[Model],
    eval_data: Input[Dataset],
    backends: str,
    run_id: str,
    tracking_uri: str,
    exported: Output[Model],
) -> str:
    """Export to ``backends`` (``jit,aoti,onnx,rtp,trt``) under one folder with a manifest per backend;
    parity against the checkpoint is checked on eval rows. Returns ``backend=parity`` pairs."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.stages import export as stage
        from recpipe.tracking import open_run_log

        r = stage.run(
            checkpoint.path,
            backends,
            exported.path,
            data_uri=eval_data.path,
            log=open_run_log(run_id, tracking_uri),
        )
        exported.metadata.update(r.metadata())
        return r.describe()
