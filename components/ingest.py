"""ingest (source → Parquet train/eval) and fit (training split → fg.json)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def ingest(
    config: Input[Artifact],
    data_source: str,
    run_id: str,
    tracking_uri: str,
    train_data: Output[Dataset],
    eval_data: Output[Dataset],
) -> NamedTuple("IngestOutputs", [("oracle_auc", float), ("data_digest", str)]):
    """Read ``data_source`` (ODPS table, Parquet/CSV URI, ``synthetic:taobao?rows=N``) once, split it
    into train/eval Parquet datasets and record both as MLflow dataset inputs."""
    from recpipe.stages import pipeline_run

    r = pipeline_run.ingest_step(
        config.path, data_source, train_data.path, eval_data.path, run_id, tracking_uri
    )
    train_data.metadata.update({"rows": r.train_rows})
    eval_data.metadata.update({"rows": r.eval_rows, "digest": r.data_digest})
    return (r.oracle_auc, r.data_digest)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def fit(
    config: Input[Artifact],
    train_data: Input[Dataset],
    run_id: str,
    tracking_uri: str,
    feature_spec: Output[Artifact],
):
    """Fit the FeatureSpec (vocabularies, boundaries, statistics) on the training split; write fg.json."""
    from recpipe.stages import pipeline_run

    r = pipeline_run.fit_step(config.path, train_data.path, feature_spec.path, run_id, tracking_uri)
    feature_spec.metadata.update(
        {"features": r.features, "embedding_rows": r.embedding_rows, "digest": r.digest}
    )
