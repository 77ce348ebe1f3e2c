"""The files of a training checkpoint, without torch: the folder layout, ``meta.json``, the manifest, the
``latest`` pointer, finding and resolving a checkpoint and reading its config.

:mod:`recpipe.train.checkpoint` writes and loads the DCP state and re-exports these names; the pipeline's
train, fit and register steps and the warm-start checks read checkpoints through this module, so their
processes need not import torch (~1.5 s) or TorchRec (~2 s) to find a folder or hash a manifest.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recpipe.config import RecpipeConfig, parse_config
from recpipe.features.spec import FG_JSON
from recpipe.integrity import IntegrityError, seal_folder, verify_sealed

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
META = "meta.json"
CONFIG = "config.yaml"
SPEC = FG_JSON
MANIFEST = "manifest.json"
_NAME = re.compile(r"^ckpt-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or does not fit the model."""


@dataclass(frozen=True)
class CheckpointMeta:
    """Where training stood when the checkpoint was written.

    Args:
        step (int): optimizer steps done in total.
        epoch (int): the epoch the next step belongs to.
        position (int): global row of the dataset where the next step starts (see
            :class:`recpipe.train.data.StepPlan`); ``position == epoch_rows`` means the epoch is done.
        epoch_rows (int): rows in the training dataset.
        rows_trained (int): rows consumed by all steps so far (over all epochs).
        world_size (int): ranks that wrote it.
        global_batch_size (int): rows per step over all ranks.
        config_digest (str), spec_digest (str): what it was trained with.
        grad_scaler (dict | None): the fp16 loss scaler's state (``train.grad_scaler``), for an exact resume.
    """

    step: int
    epoch: int
    position: int
    epoch_rows: int
    rows_trained: int
    world_size: int
    global_batch_size: int
    config_digest: str
    spec_digest: str
    created: float = 0.0
    grad_scaler: dict[str, Any] | None = None

    @classmethod
    def read(cls, ckpt: Path) -> CheckpointMeta:
        try:
            return cls(**json.loads((ckpt / META).read_text()))
        except FileNotFoundError:
            raise CheckpointError(f"{ckpt} is not a checkpoint (no {META})") from None


def write_manifest(ckpt: Path, key: bytes | None = None) -> Path:
    """List every file of ``ckpt`` with its sha256 in ``ckpt/manifest.json`` (signed with ``key``).

    Args:
        ckpt (Path): the (temporary) checkpoint folder, complete.
        key (bytes | None): the signing key; default :func:`recpipe.integrity.signing_key`.
    """
    return seal_folder(ckpt, MANIFEST, "checkpoint", key)


def verify_checkpoint(ckpt: Path, key: bytes | None = None) -> None:
    """Check ``ckpt`` against its manifest before anything in it is read.

    Args:
        ckpt (Path): a ``ckpt-<step>`` folder.
        key (bytes | None): the signing key; default :func:`recpipe.integrity.signing_key`.

    Raises:
        CheckpointError: no manifest, or a missing, unlisted or modified file, or a bad signature (named).
    """
    try:
        verify_sealed(ckpt, MANIFEST, "a verified checkpoint (written by recpipe 0.4 or later)", key)
    except IntegrityError as err:
        raise CheckpointError(f"refusing to load checkpoint {ckpt}: {err}") from None


def checkpoint_root(out_dir: Path) -> Path:
    return Path(out_dir) / CHECKPOINT_DIR


def _complete(path: Path) -> bool:
    return (path / META).is_file() and (path / ".metadata").is_file()


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest step first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and _complete(p)]
    return [p for _, p in sorted(found)]


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The checkpoint ``latest`` names, or the newest complete one if the pointer is missing or stale."""
    root = checkpoint_root(out_dir)
    pointer = root / LATEST
    if pointer.is_file():
        target = root / pointer.read_text().strip()
        if _complete(target):
            return target
    found = list_checkpoints(root)
    return found[-1] if found else None


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder itself, or a training output / ``checkpoints`` folder (its latest checkpoint)."""
    path = Path(path)
    if _complete(path):
        return path
    for out in (path, path.parent):
        found = latest_checkpoint(out) if (out / CHECKPOINT_DIR).is_dir() else None
        if found is not None:
            return found
    raise CheckpointError(f"no complete checkpoint at {path}")


def _write_pointer(root: Path, name: str) -> None:
    tmp = root / f".{LATEST}.tmp"
    with open(tmp, "w") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / LATEST)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_config(ckpt: Path) -> RecpipeConfig:
    """The config a checkpoint was trained with, after :func:`verify_checkpoint`."""
    verify_checkpoint(ckpt)
    return parse_config(yaml.safe_load((ckpt / CONFIG).read_text()), str(ckpt / CONFIG))
