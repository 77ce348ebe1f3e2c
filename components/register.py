"""register (pyfunc model version, alias ``challenger``) and promote (alias ``champion``)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def register(
    exported: Input[Model],
    report: Input[Artifact],
    eval_data: Input[Dataset],
    run_id: str,
    tracking_uri: str,
    model_name: str,
    data_digest: str,
) -> NamedTuple("RegisterOutputs", [("version", int), ("outcome", str)]):
    """Log an MLflow pyfunc model that scores raw feature rows (FG inside) and register it as a new
    version of ``model_name`` with alias ``challenger`` and the evaluation as version tags; its signature
    comes from fg.json, its input example from ``eval_data``."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.stages import register as stage
        from recpipe.tracking import open_run_log

        r = stage.run(
            exported.path, report.path, model_name, tracking_uri, data_digest=data_digest,
            log=open_run_log(run_id, tracking_uri), example_data=eval_data.path,
        )  # fmt: skip
        return (r.version, r.outcome())


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def promote(model_name: str, version: int, tracking_uri: str, run_id: str) -> str:
    """Point alias ``champion`` at ``version`` (its gate passed); returns ``promoted: …``."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.stages import promote as stage
        from recpipe.tracking import open_run_log

        return stage.run(model_name, version, tracking_uri, log=open_run_log(run_id, tracking_uri)).outcome()
