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
        model (nn.Module): a ranking model with ``predict(batch) -> (B,)`` logits.

    Example::

        train = TrainModel(build_model(spec, cfg.model))
        loss, logits = train(batch)   # loss: scalar; logits: (B,)
        loss.backward()
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model.predict(batch)
        return bce_loss(logits, batch.labels, batch.weights), logits.detach()


def bce_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean binary cross-entropy with logits; with ``weights`` the weighted mean ``Σ w·l / Σ w``.

    Args:
        logits (torch.Tensor): ``(B,)``.
        labels (torch.Tensor): ``(B,)`` 0/1.
        weights (torch.Tensor | None): ``(B,)`` non-negative sample weights.
    """
    labels = labels.to(logits.dtype)
    if weights is None:
        return F.binary_cross_entropy_with_logits(logits, labels)
    per_row = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    weights = weights.to(logits.dtype)
    return (per_row * weights).sum() / weights.sum().clamp_min(torch.finfo(logits.dtype).tiny)
