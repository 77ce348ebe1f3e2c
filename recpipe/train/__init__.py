"""Training: one trainer for 1..N processes (DistributedModelParallel, fused sparse optimizer,
TrainPipelineSparseDist), its per-process entry (:mod:`recpipe.train.worker`), DCP checkpoints, evaluation
and memory reports. How the processes are started is :mod:`recpipe.launch`'s business.

Imports are lazy so a light importer (the launcher's ``free_port``) does not load torchrec.

Example::

    from recpipe.train import evaluate_checkpoint
    evaluate_checkpoint("runs/x", "data/eval")["auc"]
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "train": "recpipe.train.loop",
    "TrainResult": "recpipe.train.loop",
    "load_model_for_inference": "recpipe.train.checkpoint",
    "latest_checkpoint": "recpipe.train.checkpoint",
    "CheckpointMeta": "recpipe.train.checkpoint",
    "CheckpointError": "recpipe.train.checkpoint",
    "evaluate_checkpoint": "recpipe.train.evaluate",
    "predict_dataset": "recpipe.train.evaluate",
    "embedding_memory_report": "recpipe.train.memory",
    "all_to_all_volume": "recpipe.train.memory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'recpipe.train' has no attribute {name!r}")
