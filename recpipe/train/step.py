"""The module the train pipeline runs: TrainModel plus the distributed loss, shaped for TorchRec's
TrainPipelineSparseDist.

TrainPipelineSparseDist finds the sharded embedding modules by fx-tracing the model and starts their
input all-to-all one batch ahead; that needs each sharded module to be called on ``batch.sparse``
itself from traceable code. Models are written for clarity and export, not for fx (EmbeddingGroup
selects keys with Python logic before its lookups), so :class:`PipelineStep` calls every embedding
collection on ``batch.sparse`` itself and runs the rest, TrainModel's forward and loss, in
:class:`_Rest`, a leaf module without sharded children. Inside it each collection answers with the
lookup already done (the collections take the whole KJT; extra keys are ignored by TorchRec).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torchrec.distributed.comm_ops import get_gradient_division

from recpipe.batch import Batch
from recpipe.train.accumulate import DenseSchedule
from recpipe.train.dist import embedding_modules

# train.mixed_precision → the autocast type of the training forward.
AUTOCAST_DTYPES: dict[str | None, torch.dtype | None] = {
    None: None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


class _Answer:
    """A forward that returns one precomputed value, whatever it is called with."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.value


@contextmanager
def _answering(modules: list[nn.Module], values: tuple[Any, ...]) -> Iterator[None]:
    saved = [m.__dict__.get("forward") for m in modules]
    try:
        for m, v in zip(modules, values, strict=True):
            # An instance attribute shadows the class forward, or TorchRec's pipelined one it saved.
            m.forward = _Answer(v)
        yield
    finally:
        for m, old in zip(modules, saved, strict=True):
            if old is None:
                del m.forward
            else:
                m.forward = old


class _Rest(nn.Module):
    """TrainModel's forward with the embedding lookups given; returns ``(loss share, logits)``.

    Holds the train model in a plain list, so it has no (sharded) submodules and fx treats it as a leaf.
    """

    def __init__(
        self, train_model: nn.Module, paths: list[str], world_size: int, autocast: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self._train_model = [train_model]
        self._paths = paths
        self.world_size = world_size
        self.autocast = autocast

    def forward(self, batch: Batch, *lookups: Any) -> tuple[torch.Tensor, torch.Tensor]:
        train_model = self._train_model[0]
        modules = [train_model.get_submodule(p) for p in self._paths]
        device = batch.dense.device.type
        # TorchEasyRec's mixed_precision (tzrec/models/model.py, TrainWrapper): the model's forward and its
        # loss under torch.autocast; the lookups are done already, and BCE runs in float32 under autocast.
        with (
            _answering(modules, lookups),
            torch.autocast(device, self.autocast, enabled=self.autocast is not None),
        ):
            loss, logits = train_model(batch)
        loss, logits = loss.float(), logits.float()
        if batch.weights is not None:
            # TrainModel's loss is this rank's weighted mean; with weights normalized over the global
            # step, times this rank's weight sum it is this rank's share of the global mean. DDP
            # averages dense gradients over ranks and TorchRec divides embedding gradients by the world
            # size (comm_ops.GRADIENT_DIVISION): times W, both become gradients of the global mean.
            loss = loss * (batch.weights.sum() * self.world_size)
        return loss, logits


class PipelineStep(nn.Module):
    """``forward(batch) -> (loss, (logits, labels, weights, loss_share))`` around a ``TrainModel``.

    With weights from :func:`recpipe.train.data.normalize_step_weights`, ``loss_share`` summed over
    ranks is the global step's weighted mean BCE, and the backward of ``loss`` (``W × loss_share``)
    gives every parameter the gradient of that global mean after DDP's and TorchRec's averaging, for
    any world size. Without weights ``loss`` is TrainModel's loss.

    Args:
        train_model (nn.Module): ``TrainModel(model)``; ``forward(batch) -> (loss, logits)``.
        world_size (int): ranks training together.
        mixed_precision (str | None): ``"bf16"`` or ``"fp16"``: the forward after the lookups (dense arch and
            loss) runs under ``torch.autocast`` of that type (``train.mixed_precision``); parameters, their
            gradients and the optimizer states stay float32; loss scaling is ``schedule``'s.
        schedule (DenseSchedule | None): the backward's loss is ``schedule.backward_loss(loss)`` (divided by the
            accumulation count, times the fp16 loss scale); the returned ``loss_share`` stays the loss itself.

    Example::

        step = PipelineStep(TrainModel(build_model(spec, cfg.model)))
        loss, (logits, labels, weights, loss_value) = step(batch)   # loss: scalar, logits: (B,)
    """

    def __init__(
        self,
        train_model: nn.Module,
        world_size: int = 1,
        mixed_precision: str | None = None,
        schedule: DenseSchedule | None = None,
    ) -> None:
        super().__init__()
        if mixed_precision not in AUTOCAST_DTYPES:
            raise ValueError(f"mixed_precision {mixed_precision!r} is not one of bf16, fp16 or None")
        if not get_gradient_division():
            raise ValueError("PipelineStep assumes TorchRec's default embedding gradient division")
        self.train_model = train_model
        self.world_size = world_size
        self.paths = [name for name, _ in embedding_modules(train_model)]
        if not self.paths:
            raise ValueError("the model has no EmbeddingBagCollection / EmbeddingCollection")
        self.rest = _Rest(train_model, self.paths, world_size, AUTOCAST_DTYPES[mixed_precision])
        self.schedule = schedule

    @property
    def model(self) -> nn.Module:
        """The ranking model inside TrainModel."""
        return self.train_model.model

    def forward(self, batch: Batch) -> tuple[torch.Tensor, StepOutput]:
        lookups = [self.train_model.get_submodule(p)(batch.sparse) for p in self.paths]
        loss, logits = self.rest(batch, *lookups)
        share = loss.detach() / self.world_size
        if self.schedule is not None:
            loss = self.schedule.backward_loss(loss)
        return loss, (logits, batch.labels, batch.weights, share)


# What the train pipeline's progress() returns: logits, labels, weights, this rank's loss share.
StepOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]
