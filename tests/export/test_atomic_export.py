"""A whole export (and a checkpoint) appears at once: a crash at any file operation leaves the previous
one fully usable, parity included, and the next run cleans up what the crash left."""

from __future__ import annotations

import builtins
import copy
import os
import shutil
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

from recpipe.export.api import export
from recpipe.export.layout import STAGING_PREFIX, VERSIONS, clean_stale, read_pointer
from recpipe.export.loaders import load_backend
from recpipe.train.checkpoint import (
    CheckpointMeta,
    latest_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)

pytestmark = pytest.mark.slow  # one export per file operation: a minute or two
BACKENDS = ["jit", "rtp"]


class Crash(Exception):
    """The injected failure: the process "dies" at this file operation."""


class FileOps:
    """Counts file operations (``os.replace``/``rename``/``unlink``, ``shutil.rmtree``, ``open`` for
    writing) and raises :class:`Crash` at operation ``crash_at`` (``None``: only count)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, crash_at: int | None) -> None:
        self.count, self.crash_at = 0, crash_at
        for mod, name in ((os, "replace"), (os, "rename"), (os, "unlink"), (shutil, "rmtree")):
            monkeypatch.setattr(mod, name, self._wrap(getattr(mod, name)))
        real_open = builtins.open

        def guarded_open(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN202
            if any(c in str(mode) for c in "wax+"):
                self._tick()
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", guarded_open)

    def _tick(self) -> None:
        self.count += 1
        if self.count == self.crash_at:
            raise Crash(f"injected crash at file operation {self.count}")

    def _wrap(self, fn):  # noqa: ANN001, ANN202
        def wrapped(*args, **kwargs):  # noqa: ANN202
            self._tick()
            return fn(*args, **kwargs)

        return wrapped


def _shifted(model: nn.Module, by: float) -> nn.Module:
    """A copy of ``model`` whose logits are ``by`` higher (the bias of its last one-output Linear)."""
    out = copy.deepcopy(model)
    last = [m for m in out.modules() if isinstance(m, nn.Linear) and m.out_features == 1][-1]
    with torch.no_grad():
        last.bias += by
    return out.eval()


def _current_export_matches(out: Path, rows, logits_by_version: dict[str, np.ndarray], tol: float) -> str:
    """Every backend of the current export loads, comes from one version and matches that model."""
    pointer = read_pointer(out)
    seen = set()
    for name in BACKENDS:
        scorer = load_backend(out / name)
        got = np.asarray(scorer.predict_raw(rows))
        matches = [v for v, want in logits_by_version.items() if np.abs(got - want).max() <= tol]
        assert len(matches) == 1, f"{name}: logits match no single export"
        seen.add(matches[0])
    assert len(seen) == 1, f"backends of two exports are visible at once: {seen}"
    assert pointer is not None
    return seen.pop()


def test_a_crash_at_any_file_operation_keeps_the_previous_export(dlrm, tmp_path, monkeypatch):
    rows = dlrm.clean.slice(0, 64).drop_columns([dlrm.spec.label])
    tol = dlrm.cfg.export.max_abs_logit_diff
    new_model = _shifted(dlrm.model, 0.5)
    base = tmp_path / "base"
    export(dlrm.model, dlrm.spec, dlrm.cfg, BACKENDS, base, dlrm.held_out)
    with torch.no_grad():
        from recpipe.batch import to_batch
        from recpipe.features.fg import FeatureGenerator

        b = to_batch(FeatureGenerator(dlrm.spec, with_labels=False)(rows), dlrm.spec.sparse_keys())
        by_version = {
            "old": dlrm.model(b.dense, b.sparse).numpy(),
            "new": new_model(b.dense, b.sparse).numpy(),
        }

    with monkeypatch.context() as m:
        counter = FileOps(m, crash_at=None)
        export(new_model, dlrm.spec, dlrm.cfg, BACKENDS, tmp_path / "count", dlrm.held_out)
    total = counter.count
    assert total >= 10  # the builders' writes, the manifests, the move, the pointer, the clean-up

    outcomes = []
    for k in range(1, total + 1):
        out = tmp_path / f"crash-{k}"
        shutil.copytree(base, out)
        with monkeypatch.context() as m:
            FileOps(m, crash_at=k)
            with pytest.raises(Crash):
                export(new_model, dlrm.spec, dlrm.cfg, BACKENDS, out, dlrm.held_out)
        outcomes.append(_current_export_matches(out, rows, by_version, tol))
        clean_stale(out)  # what the next run does first
        assert not list(out.glob(f"{STAGING_PREFIX}*")) and len(list((out / VERSIONS).iterdir())) <= 2
        shutil.rmtree(out)
    # Crashes before the pointer keep the old export, after it the new one: never a mix, never nothing.
    assert outcomes[0] == "old" and outcomes == sorted(outcomes, key=["old", "new"].index)


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _save(out: Path, step: int, value: float, dlrm) -> Path:
    meta = CheckpointMeta(step, 0, step, 100, step, 1, 8, dlrm.cfg.digest(), dlrm.spec.digest())
    state = {"w": torch.full((4,), value)}
    return save_checkpoint(out, meta, state, {"lr": torch.tensor(0.1)}, dlrm.cfg, dlrm.spec, keep_last=1)


def test_a_crash_at_any_file_operation_keeps_the_previous_checkpoint(dlrm, tmp_path, monkeypatch, one_rank):
    base = tmp_path / "base"
    _save(base, 1, 1.0, dlrm)
    shutil.copytree(base, tmp_path / "count")
    with monkeypatch.context() as m:
        counter = FileOps(m, crash_at=None)
        _save(tmp_path / "count", 2, 2.0, dlrm)
    total = counter.count
    assert total >= 8
    for k in range(1, total + 1):
        out = tmp_path / f"crash-{k}"
        shutil.copytree(base, out)
        with monkeypatch.context() as m:
            FileOps(m, crash_at=k)
            with pytest.raises(BaseException) as crashed:  # CheckpointException is a BaseException
                _save(out, 2, 2.0, dlrm)
        # DCP wraps a rank's failure in a CheckpointException that holds its traceback as text.
        assert "injected crash at file operation" in "".join(traceback.format_exception(crashed.value))
        ckpt = latest_checkpoint(out)
        assert ckpt is not None and ckpt.name in ("ckpt-1", "ckpt-2")
        verify_checkpoint(ckpt)
        state = {"model": {"w": torch.zeros(4)}}
        dcp.load(state, checkpoint_id=str(ckpt), no_dist=True)
        assert state["model"]["w"].tolist() == [float(ckpt.name[-1])] * 4
        shutil.rmtree(out)
