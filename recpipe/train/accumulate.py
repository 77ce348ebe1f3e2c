"""The dense step over several micro-batches and under fp16 loss scaling, as TorchEasyRec's TZRecOptimizer
(tzrec/optim/optimizer.py) and its pipelines' backward (tzrec/utils/dist_util.py) do it: each step's loss is
divided by the accumulation count and multiplied by the scale; the dense gradients are summed over the
count's micro-batches, unscaled, clipped and stepped (or the step skipped when one is not finite).

The fused table optimizer updates inside every backward and is not touched here: it takes each micro-batch's
1/N share of the (scaled) gradient, as TorchEasyRec's does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.amp import GradScaler
from torchrec.optim.keyed import KeyedOptimizer, OptimizerWrapper

from recpipe.config import TrainConfig


class DenseSchedule:
    """When the dense optimizer steps (every ``accumulation_steps``-th micro-batch) and the loss scale.

    Args:
        accumulation_steps (int): micro-batches per dense step (``train.gradient_accumulation_steps``).
        scaler (GradScaler | None): the fp16 loss scaler (``train.grad_scaler``), or None.

    Example::

        schedule = DenseSchedule(2, None)
        schedule.backward_loss(torch.tensor(3.0))   # tensor(1.5): half of each of two micro-batches
    """

    def __init__(self, accumulation_steps: int = 1, scaler: GradScaler | None = None) -> None:
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
        self.accumulation_steps = accumulation_steps
        self.scaler = scaler
        self.micro_steps = 0  # micro-batches stepped so far (a resumed run starts from its checkpoint's step)

    @classmethod
    def from_config(cls, train: TrainConfig, device_type: str) -> DenseSchedule:
        """``train.gradient_accumulation_steps`` and ``train.grad_scaler`` on ``device_type``."""
        gs = train.grad_scaler
        scaler = None if gs is None else GradScaler(device_type, **gs.model_dump())
        return cls(train.gradient_accumulation_steps, scaler)

    def backward_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """What the backward differentiates: ``loss / N``, times the scale under a scaler."""
        if self.accumulation_steps > 1:
            loss = loss / self.accumulation_steps
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def window_starts(self) -> bool:
        """Whether the next micro-batch opens a new accumulation (its gradients start from zero)."""
        return self.micro_steps % self.accumulation_steps == 0

    def state(self) -> dict[str, Any] | None:
        """The scaler's state (scale, growth tracker, factors), for a checkpoint; None without one."""
        return None if self.scaler is None else self.scaler.state_dict()

    def restore(self, step: int, scaler_state: dict[str, Any] | None) -> None:
        """Continue after ``step`` micro-batches with the checkpoint's scaler state (if both have one)."""
        self.micro_steps = step
        if self.scaler is not None and scaler_state:
            self.scaler.load_state_dict(scaler_state)


class ScheduledOptimizer(OptimizerWrapper):
    """The dense optimizer stepped by a :class:`DenseSchedule`: ``zero_grad`` only when an accumulation
    starts, ``step`` only when one ends (through the scaler: unscale, the wrapped clipping and step, or a
    skip on inf/NaN, then the scale's update).

    Args:
        optimizer (KeyedOptimizer): the dense optimizer (with its gradient clipping, if any).
        schedule (DenseSchedule): the accumulation count and the scaler.
    """

    def __init__(self, optimizer: KeyedOptimizer, schedule: DenseSchedule) -> None:
        super().__init__(optimizer)
        self.schedule = schedule

    def zero_grad(self, set_to_none: bool = False) -> None:
        if self.schedule.window_starts():
            self._optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:
        s = self.schedule
        s.micro_steps += 1
        if s.micro_steps % s.accumulation_steps:
            return
        if s.scaler is None:
            self._optimizer.step(closure=closure)
            return
        s.scaler.step(self._optimizer)
        s.scaler.update()
