"""The training wrapper: the loss lives here so the inner model stays loss-free and exportable."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recpipe.batch import Batch


class TrainModel(nn.Module):
    """Wraps a ranking model with binary cross-entropy on its logits (sample-weighted when given).

    ``forward(batch)`` returns ``(loss, logits)``, the shape TorchRec's train pipelines expect.

    Args:
        model (nn.Module): a ranking model with ``predict(batch) -> (B,)`` logits, or ``(B, T)`` for a
            multi-task model (whose ``task_weights`` weigh each task's loss).

    Example::

        train = TrainModel(build_model(spec, cfg.model))
        loss, logits = train(batch)   # loss: scalar; logits: (B,)
        loss.backward()
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        # A multi-task model's (B, T) logits: the loss is Σ_t weight_t · BCE_t (TorchEasyRec's task weights).
        task_weights = getattr(model, "task_weights", None)
        self.register_buffer(
            "task_weights", None if task_weights is None else torch.tensor(task_weights, dtype=torch.float32)
        )

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model.predict(batch)
        return bce_loss(logits, batch.labels, batch.weights, self.task_weights), logits.detach()


def bce_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor | None = None,
    task_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean binary cross-entropy with logits; with ``weights`` the weighted mean ``Σ w·l / Σ w``; for
    ``(B, T)`` logits (a multi-task model) each task's mean, summed with ``task_weights`` (default 1 each).

    Args:
        logits (torch.Tensor): ``(B,)``, or ``(B, T)``.
        labels (torch.Tensor): 0/1, the shape of ``logits``.
        weights (torch.Tensor | None): ``(B,)`` non-negative sample weights.
        task_weights (torch.Tensor | None): ``(T,)`` loss weight of each task.
    """
    if labels.shape != logits.shape:
        raise ValueError(f"labels {tuple(labels.shape)} do not match logits {tuple(logits.shape)}")
    logits = logits.float()  # a mixed-precision forward's bf16/fp16 logits: the loss is summed in float32
    labels = labels.to(logits.dtype)
    per_row = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    if weights is None:
        per_task = per_row.mean(dim=0)
    else:
        w = weights.to(logits.dtype)
        total = w.sum().clamp_min(torch.finfo(logits.dtype).tiny)
        per_task = (per_row * (w.unsqueeze(1) if per_row.dim() == 2 else w)).sum(dim=0) / total
    if per_row.dim() == 1:
        return per_task
    if task_weights is not None:
        per_task = per_task * task_weights.to(per_task.dtype)
    return per_task.sum()
