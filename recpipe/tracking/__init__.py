"""MLflow tracking and registry for recpipe: the only package that imports mlflow.

Runs (one per pipeline run, resumed by id), lineage, the model registry with the ``challenger`` and
``champion`` aliases, and promotion under a lock. Everything takes and returns plain values.
"""

from recpipe.tracking.lineage import head_commit, lineage_tags, log_dataset_input
from recpipe.tracking.lineage_chain import chain_tags, lineage
from recpipe.tracking.lock import LockTimeout, promotion_lock
from recpipe.tracking.models import (
    check_served_pair,
    download_served_export,
    load_pyfunc_model,
    log_pyfunc_model,
    resolve_model_uri,
    split_model_uri,
)
from recpipe.tracking.promotion import PromotionRefused, PromotionResult, promote, promotion_history, rollback
from recpipe.tracking.registry import (
    ALIAS_CHALLENGER,
    ALIAS_CHAMPION,
    eval_version_tags,
    get_version,
    get_version_by_alias,
    list_models,
    register_version,
    set_alias,
    set_version_tags,
)
from recpipe.tracking.runlog import MlflowRunLog, open_run_log
from recpipe.tracking.runs import (
    end_run,
    log_artifact,
    log_artifacts,
    log_metrics,
    log_model_dir,
    log_params,
    run_summary,
    set_tags,
    start_or_resume_run,
)
from recpipe.tracking.uri import artifact_root, tracking_uri

__all__ = [
    "ALIAS_CHALLENGER",
    "ALIAS_CHAMPION",
    "LockTimeout",
    "MlflowRunLog",
    "PromotionRefused",
    "PromotionResult",
    "artifact_root",
    "chain_tags",
    "check_served_pair",
    "download_served_export",
    "resolve_model_uri",
    "split_model_uri",
    "end_run",
    "eval_version_tags",
    "get_version",
    "get_version_by_alias",
    "head_commit",
    "lineage",
    "lineage_tags",
    "list_models",
    "load_pyfunc_model",
    "log_artifact",
    "log_artifacts",
    "log_dataset_input",
    "log_metrics",
    "log_model_dir",
    "log_params",
    "log_pyfunc_model",
    "open_run_log",
    "promote",
    "promotion_history",
    "promotion_lock",
    "register_version",
    "rollback",
    "run_summary",
    "set_alias",
    "set_tags",
    "set_version_tags",
    "start_or_resume_run",
    "tracking_uri",
]
