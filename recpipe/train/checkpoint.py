"""Training checkpoints with torch.distributed.checkpoint (DCP), written atomically, readable on any
world size.

A checkpoint folder ``ckpt-<step>/`` holds the DCP files (model: sharded embedding tables and dense
parameters; optimizer: the fused sparse optimizer's sharded state and the dense optimizer's state),
``meta.json`` (step, epoch, data position, world size, batch size, digests), ``config.yaml``,
``fg.json`` and each rank's random state. It is written as ``ckpt-<step>.tmp/`` and renamed by rank 0
after every rank has finished; ``latest`` names the newest one and is replaced atomically, so an
interrupted write leaves the previous checkpoint in charge.

``manifest.json`` lists every file of the folder with its sha256 (signed when a signing key is
configured, :mod:`recpipe.integrity`); every load checks it before a byte is deserialized: DCP's
``.metadata`` and the random states are pickles, and a tampered one would run code.

Model keys are those of the model itself (``group.ebc.embedding_bags.user_id.weight``, ...), not of
the training wrappers, so :func:`load_model_for_inference` loads them into a plain module.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import yaml
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from recpipe.config import RecpipeConfig
from recpipe.features.spec import FeatureSpec
from recpipe.train.checkpoint_files import (  # noqa: F401 - the torch-free half, re-exported
    CHECKPOINT_DIR,
    CONFIG,
    LATEST,
    MANIFEST,
    META,
    SPEC,
    CheckpointError,
    CheckpointMeta,
    _fsync_dir,
    _write_pointer,
    checkpoint_root,
    latest_checkpoint,
    list_checkpoints,
    read_config,
    resolve_checkpoint,
    verify_checkpoint,
    write_manifest,
)
from recpipe.train.zch_resplit import resplit_zch, zch_resplit_keys


# --------------------------------------------------------------------------------------- state dicts
def model_prefix(wrapper: nn.Module, model: nn.Module) -> str:
    """``"a.b."`` where ``model`` sits inside ``wrapper`` (``""`` if they are the same)."""
    for name, m in wrapper.named_modules():
        if m is model:
            return f"{name}." if name else ""
    raise ValueError("model is not a submodule of the wrapper")


def model_state(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``state`` with ``prefix`` taken off its keys (values are the same tensors: DCP loads in place)."""
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in state.items()}


# ---------------------------------------------------------------------------------------------- save
def save_checkpoint(
    out_dir: Path,
    meta: CheckpointMeta,
    model_sd: dict[str, Any],
    optim_sd: dict[str, Any],
    cfg: RecpipeConfig,
    spec: FeatureSpec,
    keep_last: int,
    group: dist.ProcessGroup | None = None,
) -> Path:
    """Write ``ckpt-<step>`` from every rank of ``group`` on this thread; returns its final path.

    :class:`recpipe.train.async_checkpoint.CheckpointWriter` does the same with the tensors written in
    the background.

    Args:
        out_dir (Path): training output folder (checkpoints go to ``out_dir/checkpoints``).
        meta (CheckpointMeta): step, data position, ...
        model_sd (dict): the model state dict (ShardedTensors for sharded tables), model keys.
        optim_sd (dict): the combined optimizer state dict.
        cfg (RecpipeConfig), spec (FeatureSpec): written beside the tensors.
        keep_last (int): complete checkpoints to keep (older ones are deleted by rank 0).
        group (ProcessGroup | None): the ranks that write it (default: the default group).
    """
    tmp = begin_checkpoint(out_dir, meta.step, group)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp), process_group=group)
    return finish_checkpoint(tmp, meta, rng_state(), cfg, spec, keep_last, group)


def begin_checkpoint(out_dir: Path, step: int, group: dist.ProcessGroup | None = None) -> Path:
    """Create the empty ``ckpt-<step>.tmp`` (rank 0, after deleting what an interrupted write left) and
    return it once every rank of ``group`` can write into it.

    Args:
        out_dir (Path): training output folder.
        step (int): the checkpoint's step.
        group (ProcessGroup | None): the writing ranks (default: the default group).
    """
    root = checkpoint_root(out_dir)
    tmp = root / f"ckpt-{step}.tmp"
    if dist.get_rank(group) == 0:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob("*.tmp"):  # left by an interrupted write
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    dist.barrier(group=group)
    return tmp


def finish_checkpoint(
    tmp: Path,
    meta: CheckpointMeta,
    rng: dict[str, Any],
    cfg: RecpipeConfig,
    spec: FeatureSpec,
    keep_last: int,
    group: dist.ProcessGroup | None = None,
    write_error: BaseException | None = None,
) -> Path:
    """After DCP wrote ``tmp`` on every rank of ``group``: add the random states and the files beside the
    tensors, seal it, rename it to ``ckpt-<step>``, point ``latest`` at it and prune; returns the final path.

    Every rank calls it. The ranks agree that each one's part is written before rank 0 seals and renames,
    and that rank 0 did before any returns, so a failure anywhere raises on every rank (no rank is left
    waiting) and leaves ``latest`` on the previous checkpoint.

    Args:
        tmp (Path): the folder of :func:`begin_checkpoint`, its DCP files written.
        meta (CheckpointMeta): written as ``meta.json``.
        rng (dict): this rank's random state when the tensors were taken (:func:`rng_state`).
        cfg (RecpipeConfig), spec (FeatureSpec): written beside the tensors.
        keep_last (int): complete checkpoints to keep.
        group (ProcessGroup | None): the writing ranks (default: the default group).
        write_error (BaseException | None): DCP's write failed on this rank (the others are told; all raise).

    Raises:
        CheckpointError: this rank's or another rank's part could not be written.
    """
    rank = dist.get_rank(group)
    root = tmp.parent
    final = root / tmp.name.removesuffix(".tmp")
    err = write_error
    try:
        if err is not None:
            raise err
        (tmp / "rng").mkdir(exist_ok=True)
        torch.save(rng, tmp / "rng" / f"rank-{rank}.pt")
        if rank == 0:
            (tmp / CONFIG).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
            spec.save(tmp / SPEC)
            (tmp / META).write_text(json.dumps({**asdict(meta), "created": time.time()}, indent=1))
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - told to the other ranks first, raised below
        err = e
    _agree(err, f"writing {tmp}", group)
    if rank == 0:
        try:
            write_manifest(tmp)  # every rank's files are in place: the manifest covers them all
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            _write_pointer(root, final.name)
            _fsync_dir(root)
            for old in list_checkpoints(root)[:-keep_last]:
                shutil.rmtree(old, ignore_errors=True)
        except (Exception, CheckpointException) as e:  # noqa: BLE001
            err = e
    _agree(err, f"publishing {final}", group)
    return final


def _agree(err: BaseException | None, what: str, group: dist.ProcessGroup | None) -> None:
    """Raise :class:`CheckpointError` on every rank of ``group`` if ``err`` is set on any of them."""
    ok = torch.tensor([0 if err else 1], dtype=torch.int32)
    if dist.get_world_size(group) > 1:
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
    if err is not None:
        raise CheckpointError(f"{what} failed on rank {dist.get_rank(group)}: {err}") from err
    if not ok.item():
        raise CheckpointError(f"{what} failed on another rank (its log names the cause)")


def rng_state() -> dict[str, Any]:
    """This rank's random state (CPU and, where there is one, CUDA), as a checkpoint stores it."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


# ---------------------------------------------------------------------------------------------- load
def restore_rng_state(ckpt: Path, meta: CheckpointMeta) -> None:
    """After :func:`load_weights_and_optimizer` (which verified the folder): this rank's random state of
    ``ckpt``, when it was written by as many ranks as there are now (what exact resume needs; a warm start
    and another world size keep their own)."""
    rng = ckpt / "rng" / f"rank-{dist.get_rank()}.pt"
    if meta.world_size == dist.get_world_size() and rng.is_file():
        saved = torch.load(rng, weights_only=True)  # tensors only: a pickle here could run code
        torch.set_rng_state(saved["torch"])
        if "cuda" in saved and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["cuda"])


def load_weights_and_optimizer(
    ckpt: Path,
    model_sd: dict[str, Any],
    optimizer: Any,
    dense_optimizer: Any,
    log: Callable[[str], None] | None = None,
) -> CheckpointMeta:
    """Load the model (dense, embedding and zch remapping tensors) and optimizer states of ``ckpt`` in
    place, resharded to this run's plan, after :func:`verify_checkpoint`; what resume and a warm start share.

    Args:
        ckpt (Path): a ``ckpt-<step>`` folder.
        model_sd (dict): the live model state dict, model keys.
        optimizer: the combined optimizer (fused sparse + dense).
        dense_optimizer: the dense optimizer (its lazy state is created first).
        log (Callable | None): told how zch tables were re-split (another world size only).

    Raises:
        CheckpointError: an unverified folder, or tensors that do not fit.
    """
    verify_checkpoint(ckpt)
    meta = CheckpointMeta.read(ckpt)
    dense_optimizer.init_state()
    optimizer.zero_grad()
    optim_sd = optimizer.state_dict()
    # zch remappings are split by key range over the ranks: on another world size they are re-split
    # (recpipe.train.zch_resplit), not resharded by row offset as DCP would.
    resplit = meta.world_size != dist.get_world_size()
    held_model, held_optim = zch_resplit_keys(model_sd, optim_sd) if resplit else (set(), set())
    state = {
        "model": {k: v for k, v in model_sd.items() if k not in held_model},
        "optim": {
            **optim_sd,
            "state": {  # a param left with no state is left out: DCP would look for an empty dict
                param: kept
                for param, states in optim_sd.get("state", {}).items()
                if (kept := {n: v for n, v in states.items() if (param, n) not in held_optim}) or not states
            },
        },
    }
    try:
        dcp.load(state, checkpoint_id=str(ckpt))
        dropped = resplit_zch(ckpt, model_sd, optim_sd) if held_model else {}
    except Exception as err:  # DCP wraps per-rank failures; name the checkpoint
        raise CheckpointError(f"cannot load {ckpt} into this model: {err}") from err
    for param, name in held_optim:  # loaded in place by resplit_zch
        state["optim"]["state"].setdefault(param, {})[name] = optim_sd["state"][param][name]
    optimizer.load_state_dict(state["optim"])
    if held_model and log is not None:
        log(
            f"zch tables re-split by key range from {meta.world_size} onto {dist.get_world_size()} rank(s); "
            f"known ids dropped (no free row on their new rank, now unseen ids): {dropped}"
        )
    return meta


def load_model_for_inference(ckpt_dir: str | Path) -> tuple[nn.Module, FeatureSpec, RecpipeConfig]:
    """The trained model as a plain, unsharded ``nn.Module`` on CPU in eval mode, with its FeatureSpec
    and config, from a checkpoint written by any number of ranks.

    Runs in this process alone (no process group needed, none used): the sharded tables are gathered
    from their pieces by DCP.

    Args:
        ckpt_dir (str | Path): a ``ckpt-<step>`` folder, or a training output folder (its latest).

    Example::

        model, spec, cfg = load_model_for_inference("runs/x/train")
        logits = model(batch.dense, batch.sparse)      # (B,)
    """
    from recpipe.models.blocks.zch_admission import hold_spare_rows
    from recpipe.models.registry import build_model
    from recpipe.train.zch import zch_collections

    ckpt = resolve_checkpoint(ckpt_dir)
    cfg = read_config(ckpt)  # verifies the whole folder, DCP metadata included
    spec = FeatureSpec.load(ckpt / SPEC)
    model = build_model(spec, cfg.model, device=torch.device("cpu"))
    state = {"model": model.state_dict()}
    try:
        dcp.load(state, checkpoint_id=str(ckpt), no_dist=True)
    except Exception as err:
        raise CheckpointError(f"cannot load the model of {ckpt}: {err}") from err
    model.load_state_dict(state["model"])
    for _, collection in zch_collections(model):
        # The spare rows of an admission table took the last training step's update; they read its constant.
        hold_spare_rows(collection)
    return model.eval(), spec, cfg
