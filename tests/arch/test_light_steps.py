"""The pipeline's light steps run without torch: each kfp step is a process of its own, and torch (~1.5 s of
CPU) plus TorchRec (~2 s) on every start, ingest, fit, train (the launcher), register and promote step was
~3 s of each pipeline run's ~40 (the train step alone: 5.3 s of CPU with them, 2.4 s without).

The train step checks the config against the ranks' device and the tables against their memory before it
starts any rank, finds checkpoints and pins the final one; the register step reads the evaluation report and
finds the served backend folder. None of that needs torch on a machine without a GPU driver."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

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
    assert ranks_device() == "cpu"
    assert latest_checkpoint(Path(sys.argv[2])) is None
    assert train.checkpoint_tags(sys.argv[2]) == {}
    assert to_numpy([1, 2]).tolist() == [1, 2]
    print(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchrec", "fbgemm_gpu"}))
    """
)


def test_the_train_and_register_steps_checks_run_without_torch(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", LIGHT, str(ROOT / "configs" / "din_taobao_small.yaml"), str(tmp_path)],
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

    cfg = load_config(ROOT / "configs" / "din_taobao_small.yaml", {"train.sparse_optimizer.type": "adam"})
    with pytest.raises(ValueError, match="FBGEMM's fused Adam runs on GPU only"):
        check_ranks_device(cfg)
