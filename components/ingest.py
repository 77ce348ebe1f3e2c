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
    """Read ``data_source`` (ODPS table, Parquet/CSV URI, ``synthetic:taobao?rows=N``; the config's
    ``data.partitions`` of it) once, split it (a ``data.eval`` is kept as the eval split) into train/eval
    Parquet datasets and record both as MLflow dataset inputs."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        import os

        from recpipe.config import load_config
        from recpipe.features.build import build_feature_spec
        from recpipe.stages import ingest as stage
        from recpipe.tracking import open_run_log

        full = load_config(config.path)
        cfg = full.data
        source, eval_source = stage.configured_sources(cfg, data_source, os.environ)
        r = stage.run(
            source, None, cfg.label, cfg.split, cfg.neg_sample_rate, cfg.oracle_column, full.csv_options(),
            train_dir=train_data.path, eval_dir=eval_data.path, log=open_run_log(run_id, tracking_uri),
            spec=build_feature_spec(full), partitions=cfg.partitions, eval_source=eval_source,
        )  # fmt: skip
        train_data.metadata.update({"rows": r.train_rows})
        eval_data.metadata.update({"rows": r.eval_rows, "digest": r.eval_digest})
        return (float("nan") if r.oracle_auc is None else r.oracle_auc, r.eval_digest)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def fit(
    config: Input[Artifact],
    train_data: Input[Dataset],
    run_id: str,
    tracking_uri: str,
    feature_spec: Output[Artifact],
):
    """Fit the FeatureSpec (vocabularies, boundaries, statistics) on the training split; write fg.json."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.stages import fit as stage
        from recpipe.tracking import open_run_log

        r = stage.run(config.path, train_data.path, feature_spec.path, log=open_run_log(run_id, tracking_uri))
        feature_spec.metadata.update(
            {"features": r.features, "embedding_rows": r.embedding_rows, "digest": r.digest}
        )
