"""Training: one trainer for 1..N processes (DistributedModelParallel, fused sparse optimizer,
TrainPipelineSparseDist), its torchrun launcher, DCP checkpoints, evaluation and memory reports.

Imports are lazy so the launcher stays light (torchrec loads only in the training processes).

Example::

    from recpipe.train import launch, evaluate_checkpoint
    launch("configs/din_taobao_small.yaml", "data/train", "data/eval", "runs/x", nproc_per_node=2)
    evaluate_checkpoint("runs/x", "data/eval")["auc"]
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "train": "recpipe.train.loop",
    "TrainResult": "recpipe.train.loop",
    "launch": "recpipe.train.launch",
    "LaunchError": "recpipe.train.launch",
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
