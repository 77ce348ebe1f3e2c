"""fit: learn vocabularies / boundaries / statistics from the training split and write ``fg.json``; a
warm-started run (``train.init_from``) keeps its parent's instead, so every known id keeps its row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recpipe.config import load_config
from recpipe.data.sources import open_source
from recpipe.features.build import build_feature_spec
from recpipe.features.fit import fit_feature_spec
from recpipe.features.schema_check import check_source
from recpipe.runlog import NULL_LOG, RunLog, failing


@dataclass
class FitResult:
    fg_json: str
    features: int
    tables: int
    embedding_rows: int
    digest: str


def run(
    config_path: str | Path,
    train_dir: str,
    out_path: str | Path,
    log: RunLog = NULL_LOG,
    overrides: Mapping[str, Any] | None = None,
    tracking_uri: str | None = None,
) -> FitResult:
    """Fit the FeatureSpec of ``config_path`` on ``train_dir``; write it to ``out_path`` (fg.json).

    Args:
        config_path (str | Path): recpipe config YAML.
        train_dir (str): the training split written by ``ingest``.
        out_path (str | Path): where ``fg.json`` goes.
        log (RunLog): records ``fg.json`` and tag ``feature_spec_digest``.
        overrides (Mapping | None): dotted config overrides (``{"data.label": "clicked"}``).
        tracking_uri (str | None): the registry of a ``train.init_from: models:/…`` (default: the run
            log's, else env ``MLFLOW_TRACKING_URI``, else the config's ``tracking.uri``).

    With ``train.init_from`` set, nothing is fitted: the parent checkpoint's ``fg.json`` is written (after
    its features are checked against this config's), so a value the parent never saw takes its
    feature's UNK id, and hashed and zch ids their usual rows (tag ``feature_spec_from``: the checkpoint).

    Raises:
        SchemaMismatch: ``train_dir`` lacks columns the config reads (all listed), before any row is read.
        WarmStartError: ``train.init_from`` names no usable checkpoint, or its features differ (named).
    """
    with failing(log, "fit"):
        cfg = load_config(config_path, dict(overrides or {}))
        check_source(build_feature_spec(cfg), train_dir, cfg.csv_options())
        if cfg.train.init_from:
            spec = _parent_spec(cfg, tracking_uri, log)
        else:
            spec = fit_feature_spec(cfg, open_source(train_dir, csv=cfg.csv_options()))
        path = spec.save(out_path)
        tables = spec.tables()
        result = FitResult(
            fg_json=str(path),
            features=len(spec.sparse) + len(spec.dense),
            tables=len(tables),
            embedding_rows=sum(t.num_embeddings for t in tables),
            digest=spec.digest(),
        )
        log.log_artifact(path, "features")
        log.set_tags({"feature_spec_digest": result.digest})
    return result


def _parent_spec(cfg: Any, tracking_uri: str | None, log: RunLog) -> Any:
    """The fitted FeatureSpec of ``cfg.train.init_from``'s checkpoint, refused when the features differ."""
    from recpipe.tracking.checkpoints import resolve_init_from
    from recpipe.train.checkpoint_files import read_config
    from recpipe.train.warm import WarmStartError, config_differences, parent_spec

    uri = tracking_uri or getattr(log, "tracking_uri", None)  # the MLflow run log's store
    warm = resolve_init_from(cfg.train.init_from, uri, cfg.tracking.uri)
    diffs = [d for d in config_differences(read_config(warm.checkpoint), cfg) if d.startswith("feature")]
    if diffs:
        raise WarmStartError(f"cannot reuse the FeatureSpec of {warm.checkpoint}: " + "; ".join(diffs))
    log.set_tags({"feature_spec_from": str(warm.checkpoint)})
    return parent_spec(warm.checkpoint)
