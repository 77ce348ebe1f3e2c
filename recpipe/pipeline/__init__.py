"""The pipeline run around the stages: its parameters, its first step (``start``), its ends (``reject``,
``finish``) and the summary read back from the run log. Never imports kfp: ``pipelines/`` wires these
into the KFP pipeline, and ``recpipe run`` runs that pipeline with kfp.local.
"""

from recpipe.pipeline.lifecycle import (
    LAUNCHERS,
    OUTCOME_PROMOTED,
    OUTCOME_REGISTERED,
    OUTCOME_REJECTED,
    StartResult,
    TrainPod,
    finish,
    reject,
    start,
)
from recpipe.pipeline.params import check_data_source, check_placement, resolve_config, resolve_tracking_uri
from recpipe.pipeline.summary import RunSummary, summarize

__all__ = [
    "LAUNCHERS",
    "OUTCOME_PROMOTED",
    "OUTCOME_REGISTERED",
    "OUTCOME_REJECTED",
    "RunSummary",
    "StartResult",
    "TrainPod",
    "check_data_source",
    "check_placement",
    "finish",
    "reject",
    "resolve_config",
    "resolve_tracking_uri",
    "start",
    "summarize",
]
