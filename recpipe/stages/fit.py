"""fit: learn vocabularies / boundaries / statistics from the training split and write ``fg.json``."""

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
) -> FitResult:
    """Fit the FeatureSpec of ``config_path`` on ``train_dir``; write it to ``out_path`` (fg.json).

    Args:
        config_path (str | Path): recpipe config YAML.
        train_dir (str): the training split written by ``ingest``.
        out_path (str | Path): where ``fg.json`` goes.
        log (RunLog): records ``fg.json`` and tag ``feature_spec_digest``.
        overrides (Mapping | None): dotted config overrides (``{"data.label": "clicked"}``).

    Raises:
        SchemaMismatch: ``train_dir`` lacks columns the config reads (all listed), before any row is read.
    """
    with failing(log, "fit"):
        cfg = load_config(config_path, dict(overrides or {}))
        check_source(build_feature_spec(cfg), train_dir, cfg.csv_options())
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
