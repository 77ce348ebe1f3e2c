"""The pipeline's train step runs its checks without torch: each kfp step is a process of its own, and the train
step imported torch (~1.5 s of CPU) and TorchRec (~2 s) only to check the sparse optimizer against the ranks'
device, the tables against their memory and to find and pin checkpoints (5.3 s of CPU per pipeline run with them,
2.4 s without). A retrieval model's step too: its config check imported the retrieval trainer, torch with it
(5.1 CPU-s for the step, ~2 without).

The register step's own reads (the evaluation report's metrics, the served backend folder) import no torch
either; that step still loads torch when MLflow validates the logged model's input example by loading it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

LIGHT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import recpipe.stages.train as train
    from recpipe.config import load_config
    from recpipe.eval.metrics import to_numpy
    from recpipe.export.loaders import served_folder
    from recpipe.launch.local import check_ranks_device
    from recpipe.train.checkpoint_files import latest_checkpoint, resolve_checkpoint
    from recpipe.train.optim_check import ranks_device
    from recpipe.train.warm import manifest_digest
    import recpipe.tracking.checkpoints

    cfg = load_config(sys.argv[1])
    check_ranks_device(cfg)
    # a retrieval config's refusals (one process, its train: options), as the train step checks them
    train._check_retrieval(sys.argv[3], {}, 1, 1, None, "auto")
    assert ranks_device() == "cpu"
    assert latest_checkpoint(Path(sys.argv[2])) is None
    assert train.checkpoint_tags(sys.argv[2]) == {}
    assert to_numpy([1, 2]).tolist() == [1, 2]
    print(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchrec", "fbgemm_gpu"}))
    """
)


def test_the_train_steps_checks_and_the_register_steps_reads_import_no_torch(tmp_path):
    ranking, retrieval = CONFIGS / "din_taobao_small.yaml", CONFIGS / "dssm_retrieval_small.yaml"
    proc = subprocess.run(
        [sys.executable, "-c", LIGHT, str(ranking), str(tmp_path), str(retrieval)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_a_machine_with_a_gpu_driver_asks_torch(monkeypatch):
    """Where a driver's device node exists, torch decides (here: its CPU build sees no GPU)."""
    import os

    from recpipe.train import optim_check

    assert optim_check.ranks_device() == "cpu"
    real = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/nvidiactl" or real(p))
    asked = []
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or True)
    assert optim_check.ranks_device() == "cuda" and asked == [1]


def test_adam_on_the_ranks_device_is_refused_before_any_rank_starts():
    from recpipe.config import load_config
    from recpipe.launch.local import check_ranks_device

    cfg = load_config(CONFIGS / "din_taobao_small.yaml", {"train.sparse_optimizer.type": "adam"})
    with pytest.raises(ValueError, match="FBGEMM's fused Adam runs on GPU only"):
        check_ranks_device(cfg)
