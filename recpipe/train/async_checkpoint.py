"""Checkpoints off the training's critical path: the state is copied to host memory on the training thread
(:class:`HostStager`, for DCP's ``async_save``), written and published in the background, and the steps go on.

The guarantees are :func:`recpipe.train.checkpoint.save_checkpoint`'s: a checkpoint is written as
``ckpt-<step>.tmp/``, sealed with its manifest and renamed, and ``latest`` is moved to it, only once every
rank has written its part; pruning only ever deletes complete checkpoints. At most one write is in flight:
the next save first waits for the previous one, and so does the end of training (:meth:`CheckpointWriter.wait`).
A background write that fails raises :class:`~recpipe.train.checkpoint.CheckpointError` there, on every rank.

The background thread's collectives (DCP's plan and result exchange, the ranks' agreement before and after
publishing) run on a gloo group of their own, so they never interleave with the training thread's.

:class:`CheckpointCadence` says when: every ``train.checkpoint_every_steps`` steps and/or every
``train.checkpoint_every_seconds`` seconds of rank 0's clock (broadcast, so every rank saves at the same step).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import AsyncStager

from recpipe.config import RecpipeConfig
from recpipe.features.spec import FeatureSpec
from recpipe.train.checkpoint import (
    CheckpointError,
    CheckpointMeta,
    begin_checkpoint,
    finish_checkpoint,
    rng_state,
)


class CheckpointWriter:
    """Writes the checkpoints of one training run, one at a time, in the background (or, with
    ``background=False``, on the caller's thread: :func:`~recpipe.train.checkpoint.save_checkpoint`).

    Every rank makes one, in the same order (it creates a process group), and calls :meth:`save` at the same
    steps and :meth:`close` at the end.

    Args:
        out_dir (Path): training output folder (checkpoints go to ``out_dir/checkpoints``).
        cfg (RecpipeConfig), spec (FeatureSpec): written beside the tensors.
        keep_last (int): complete checkpoints to keep.
        background (bool): write in the background (else on the caller's thread).
        log (Callable | None): told when a background write is done (rank 0's).

    Example::

        writer = CheckpointWriter(out_dir, cfg, spec, keep_last=2)
        writer.save(meta, model_sd, optim_sd)   # returns once the state is copied; written in the background
        ...                                     # training goes on
        writer.close()                          # waits for the last write; raises if it failed
    """

    def __init__(
        self,
        out_dir: Path,
        cfg: RecpipeConfig,
        spec: FeatureSpec,
        keep_last: int,
        background: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.out_dir, self.cfg, self.spec, self.keep_last = Path(out_dir), cfg, spec, keep_last
        self.background, self.log = background, log
        self.group = dist.new_group(backend="gloo")  # every rank, same order: the background's collectives
        self._stager = HostStager() if background else None
        self._finisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recpipe-checkpoint")
        self._pending: tuple[Path, Future[Path]] | None = None

    def save(self, meta: CheckpointMeta, model_sd: dict[str, Any], optim_sd: dict[str, Any]) -> Path:
        """Start writing ``ckpt-<meta.step>`` once the previous write is done; returns its final path (the
        folder exists once :meth:`wait` returns).

        Args:
            meta (CheckpointMeta): step, data position, ...
            model_sd (dict): the model state dict (ShardedTensors for sharded tables), model keys.
            optim_sd (dict): the combined optimizer state dict.

        Raises:
            CheckpointError: the previous background write failed.
        """
        self.wait()
        tmp = begin_checkpoint(self.out_dir, meta.step, self.group)
        final = tmp.parent / tmp.name.removesuffix(".tmp")
        state = {"model": model_sd, "optim": optim_sd}
        rng = rng_state()  # the random state of this step, not of the step the write ends at
        if not self.background:
            dcp.save(state, checkpoint_id=str(tmp), process_group=self.group)
            return finish_checkpoint(tmp, meta, rng, self.cfg, self.spec, self.keep_last, self.group)
        # Staged (copied to host memory) before async_save returns: training may change the live tensors.
        written = dcp.async_save(
            state, checkpoint_id=str(tmp), process_group=self.group, async_stager=self._stager
        )
        self._pending = (final, self._finisher.submit(self._finish, written, tmp, meta, rng))
        return final

    def _finish(self, written: Future[Any], tmp: Path, meta: CheckpointMeta, rng: dict[str, Any]) -> Path:
        t0 = time.perf_counter()
        err = None
        try:
            written.result()  # DCP's write on every rank (its own collectives on self.group)
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's is a BaseException; the ranks agree on it in finish_checkpoint, then all raise
            err = e
        final = finish_checkpoint(tmp, meta, rng, self.cfg, self.spec, self.keep_last, self.group, err)
        if self.log is not None:
            self.log(
                f"step {meta.step}: checkpoint {final} written in the background ({time.perf_counter() - t0:.1f}s)"
            )
        return final

    def wait(self) -> Path | None:
        """Wait for the write in flight; returns its final path (None if there was none).

        Raises:
            CheckpointError: it failed (on this rank or another).
        """
        if self._pending is None:
            return None
        final, future = self._pending
        self._pending = None
        try:
            return future.result()
        except CheckpointError:
            raise
        except (Exception, CheckpointException) as err:  # noqa: BLE001 - anything else the background met
            raise CheckpointError(f"writing {final} in the background failed: {err}") from err

    def close(self) -> Path | None:
        """Wait for the last write (raising if it failed) and release the host copies and the thread."""
        try:
            return self.wait()
        finally:
            self._finisher.shutdown(wait=True)
            if self._stager is not None:
                self._stager.close()


class HostStager(AsyncStager):
    """Copies a state dict to host memory for :func:`torch.distributed.checkpoint.async_save`, ShardedTensors
    included (DCP's default stager cannot copy them), into buffers kept for the next save.

    A buffer is refilled only by the next :meth:`stage`, which :class:`CheckpointWriter` starts after the
    previous write is done; a tensor whose shape changed gets a new one.

    Example::

        stager = HostStager()
        copy = stager.stage({"w": torch.ones(2)})   # copy["w"] is a host tensor, not the live one
    """

    _synchronize_after_execute = False  # stage() returns the copy itself: nothing to wait for

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}

    @torch.no_grad()
    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        """A copy of ``state_dict`` whose tensors are host buffers, filled now."""
        return self._copy(state_dict, ())

    def _copy(self, value: Any, path: tuple[Any, ...]) -> Any:
        if isinstance(value, ShardedTensor):
            shards = [
                Shard(self._tensor(s.tensor, (*path, i)), s.metadata)
                for i, s in enumerate(value.local_shards())
            ]
            return ShardedTensor._init_from_local_shards_and_global_metadata(
                shards, value.metadata(), process_group=value._process_group
            )
        if isinstance(value, torch.Tensor):
            return self._tensor(value, path)
        if isinstance(value, dict):
            return {k: self._copy(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._copy(v, (*path, i)) for i, v in enumerate(value))
        return value  # numbers, strings, None: not changed in place by training

    def _tensor(self, tensor: torch.Tensor, path: tuple[Any, ...]) -> torch.Tensor:
        buf = self._buffers.get(path)
        if buf is None or buf.shape != tensor.shape or buf.dtype != tensor.dtype:
            buf = self._buffers[path] = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
        return buf.copy_(tensor.detach())

    def synchronize_staging(self) -> None:
        """Nothing to wait for: :meth:`stage` copies before it returns."""

    def close(self) -> None:
        """Release the host buffers."""
        self._buffers.clear()


class CheckpointCadence:
    """When to checkpoint: every ``every_steps`` steps and/or once ``every_seconds`` have passed on rank 0's
    clock since the last checkpoint (or the start); every rank gets the same answer at the same step.

    The time rule costs one tiny broadcast per step on ``group`` when there are several ranks; rank 0's clock
    decides so that ranks whose clocks drift never disagree (a rank that saved alone would wait forever).

    Args:
        every_steps (int | None): steps between checkpoints.
        every_seconds (float | None): seconds between checkpoints.
        group (ProcessGroup | None): the CPU group of the broadcast (several ranks only).
    """

    def __init__(self, every_steps: int | None, every_seconds: float | None, group: Any = None) -> None:
        self.every_steps, self.every_seconds, self.group = every_steps, every_seconds, group
        self.last = time.monotonic()

    def due(self, step: int) -> bool:
        """Whether step ``step`` (just done) ends with a checkpoint; the same on every rank."""
        if self.every_steps and step % self.every_steps == 0:
            return True
        if not self.every_seconds:
            return False
        flag = torch.tensor([time.monotonic() - self.last >= self.every_seconds], dtype=torch.int32)
        if dist.is_initialized() and dist.get_world_size(self.group) > 1:
            dist.broadcast(flag, group_src=0, group=self.group)
        return bool(flag.item())

    def saved(self) -> None:
        """A checkpoint was just taken: the time rule counts from now."""
        self.last = time.monotonic()
