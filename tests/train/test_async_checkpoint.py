"""Checkpoints written in the background: the snapshot is the step's state though training went on, ``latest``
moves only to a complete checkpoint, a failed or killed write leaves the previous one in charge, and a
resume from an asynchronously written checkpoint trains bit-identically."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _FileSystemWriter

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.train.async_checkpoint import CheckpointCadence
from recpipe.train.checkpoint import (
    CheckpointError,
    CheckpointMeta,
    latest_checkpoint,
    list_checkpoints,
    load_model_for_inference,
)

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = {"data.batch_size": 64, "train.log_every_steps": 10, "train.checkpoint_every_steps": 40}
_write_data = _FileSystemWriter.write_data


def _cfg(path: str, **extra):
    return load_config(path, {**OVERRIDES, **extra})


def _losses(out: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records]


def _pointer(out: Path) -> str | None:
    p = out / "checkpoints" / "latest"
    return p.read_text().strip() if p.is_file() else None


def _same_models(a: Path, b: Path) -> None:
    ma, _, _ = load_model_for_inference(a)
    mb, _, _ = load_model_for_inference(b)
    sa, sb = ma.state_dict(), mb.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.fixture(scope="module")
def reference(taobao, tmp_path_factory):
    """101 steps with checkpoints written on the training thread (the old path), all three kept."""
    out = tmp_path_factory.mktemp("sync")
    cfg = _cfg(
        taobao["config"],
        **{"train.max_steps": 101, "train.checkpoint_async": False, "train.keep_last_checkpoints": 3},
    )
    train(cfg, build_feature_spec(cfg), taobao["train"], None, out)
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["ckpt-40", "ckpt-80", "ckpt-101"]
    return out


def test_a_slow_background_write_holds_the_step_and_resumes_bit_identically(
    reference, taobao, tmp_path, monkeypatch
):
    seen: list[tuple[str, str | None]] = []

    def slow(self, plan, planner):  # the tensors reach the disk a second late: training goes on meanwhile
        seen.append((Path(self.path).name, _pointer(tmp_path)))
        time.sleep(1.0)
        return _write_data(self, plan, planner)

    monkeypatch.setattr(_FileSystemWriter, "write_data", slow)
    cfg = _cfg(taobao["config"], **{"train.max_steps": 60})
    spec = build_feature_spec(cfg)
    result = train(cfg, spec, taobao["train"], None, tmp_path)
    # While a checkpoint was being written, `latest` still named the previous one.
    assert seen == [("ckpt-40.tmp", None), ("ckpt-60.tmp", "ckpt-40")]
    assert result.checkpoint == str(tmp_path / "checkpoints" / "ckpt-60") and _pointer(tmp_path) == "ckpt-60"
    # The staging happened at step 40 (the training thread), though steps 41.. ran during the write.
    _same_models(reference / "checkpoints" / "ckpt-40", tmp_path / "checkpoints" / "ckpt-40")
    assert CheckpointMeta.read(tmp_path / "checkpoints" / "ckpt-40").position == 40 * 64

    monkeypatch.setattr(_FileSystemWriter, "write_data", _write_data)
    # Killed after ckpt-40 was published: resume from the asynchronously written ckpt-40 to step 101.
    import shutil

    shutil.rmtree(tmp_path / "checkpoints" / "ckpt-60")
    (tmp_path / "checkpoints" / "latest").write_text("ckpt-40\n")
    resumed = train(_cfg(taobao["config"], **{"train.max_steps": 101}), spec, taobao["train"], None, tmp_path)
    assert resumed.resumed_from.endswith("ckpt-40") and resumed.steps == 101
    assert _losses(tmp_path) == _losses(reference)  # bit-identical
    _same_models(reference, tmp_path)


def test_a_failed_background_write_fails_the_run_and_leaves_the_previous_checkpoint(
    taobao, tmp_path, monkeypatch
):
    def failing(self, plan, planner):
        if Path(self.path).name == "ckpt-80.tmp":
            raise OSError("disk full (injected)")
        return _write_data(self, plan, planner)

    monkeypatch.setattr(_FileSystemWriter, "write_data", failing)
    cfg = _cfg(taobao["config"], **{"train.max_steps": 101})
    with pytest.raises(CheckpointError, match="(?s)ckpt-80.tmp.*disk full"):
        train(cfg, build_feature_spec(cfg), taobao["train"], None, tmp_path)
    root = tmp_path / "checkpoints"
    assert _pointer(tmp_path) == "ckpt-40" and latest_checkpoint(tmp_path) == root / "ckpt-40"
    assert [p.name for p in list_checkpoints(root)] == ["ckpt-40"]  # ckpt-80 never published
    assert (root / "ckpt-80.tmp").is_dir() and not (root / "ckpt-80").exists()
    model, _, cfg_back = load_model_for_inference(tmp_path)
    assert cfg_back.train.max_steps == 101 and not model.training


_CRASH = """
import os, sys
from pathlib import Path
from torch.distributed.checkpoint.filesystem import _FileSystemWriter
from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train

config, data, out = sys.argv[1:4]
write = _FileSystemWriter.write_data

def crash(self, plan, planner):
    if Path(self.path).name == "ckpt-80.tmp":
        os._exit(17)  # the process dies in the middle of the background write
    return write(self, plan, planner)

_FileSystemWriter.write_data = crash
cfg = load_config(config, {OVERRIDES!r} | {{"train.max_steps": 101}})
train(cfg, build_feature_spec(cfg), data, None, Path(out))
"""


def test_a_process_killed_during_a_background_write_resumes_from_the_previous_checkpoint(
    reference, taobao, tmp_path
):
    script = _CRASH.format(OVERRIDES=OVERRIDES)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", script, taobao["config"], taobao["train"], str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 17, run.stderr[-2000:]
    root = tmp_path / "checkpoints"
    assert _pointer(tmp_path) == "ckpt-40" and [p.name for p in list_checkpoints(root)] == ["ckpt-40"]
    assert (root / "ckpt-80.tmp").is_dir()
    cfg = _cfg(taobao["config"], **{"train.max_steps": 101})
    resumed = train(cfg, build_feature_spec(cfg), taobao["train"], None, tmp_path)
    assert resumed.resumed_from.endswith("ckpt-40") and resumed.steps == 101
    assert not (root / "ckpt-80.tmp").exists()  # cleared by the next write
    assert _losses(tmp_path) == _losses(reference)
    _same_models(reference, tmp_path)


def test_the_cadence_by_steps_and_by_rank_0s_clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    cadence = CheckpointCadence(every_steps=50, every_seconds=600.0)
    assert [s for s in range(1, 121) if cadence.due(s)] == [50, 100]
    now[0] += 599.0
    assert not cadence.due(121)
    now[0] += 1.0
    assert cadence.due(122)
    cadence.saved()  # the clock counts from the last checkpoint
    now[0] += 300.0
    assert not cadence.due(123) and cadence.due(150)
    assert not any(CheckpointCadence(None, None).due(s) for s in range(1, 1000))
