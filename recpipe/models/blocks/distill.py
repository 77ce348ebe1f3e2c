"""Training-only distillation between a served (light) net and a booster net trained beside it (TorchEasyRec's
RocketLaunching, tzrec/models/rocket_launching.py): what the model gives the training wrapper and the loss the
wrapper adds. Plain torch."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class Distillation(NamedTuple):
    """One training forward of a distilled model.

    Args:
        light (torch.Tensor): ``(B,)`` the light (served) net's logits.
        booster (torch.Tensor): ``(B,)`` the booster's logits.
        light_raw (torch.Tensor): ``(B, C)`` the light net's head output (one logit, or ``(l0, l1)``).
        booster_raw (torch.Tensor): ``(B, C)`` the booster's.
        hidden (tuple[tuple[torch.Tensor, torch.Tensor], ...]): ``(light layer, booster layer)`` outputs of
            the same width that feature-based distillation pulls together (empty: none).
        similarity (str): ``cosine`` or ``euclid``.
    """

    light: torch.Tensor
    booster: torch.Tensor
    light_raw: torch.Tensor
    booster_raw: torch.Tensor
    hidden: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
    similarity: str = "cosine"


def distillation_terms(out: Distillation, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The distillation's loss terms beside the two nets' own losses: the hint loss, the mean squared
    difference of the light net's head output from the booster's (held constant), plus per hidden pair the
    similarity term (the booster's side held constant): cosine ``-0.1 · mean(cos(light_h, booster_h))``,
    euclid ``sqrt(Σ ||booster_h - light_h||²)`` over the batch. With sample weights (normalized to mean 1, as
    TorchEasyRec's ``div_no_nan(w, mean(w))``) every mean and sum is over the weighted rows; TorchEasyRec's
    weighted hint loss multiplies its ``(B, C)`` loss by ``(B,)`` weights, which broadcasts to ``(B, B)`` for
    ``C = 1``: here each row's mean over its columns is weighted.

    Example::

        out = Distillation(light, booster, light[:, None], booster[:, None])
        distillation_terms(out)   # mean((light - booster)²)
    """
    w = None
    if weights is not None:
        w = weights.to(torch.float32)
        w = w / w.mean().clamp_min(torch.finfo(w.dtype).tiny)
    hint = (out.light_raw.float() - out.booster_raw.detach().float()).square().mean(dim=1)
    total = hint.mean() if w is None else (hint * w).mean()
    for light_h, booster_h in out.hidden:
        light_h, booster_h = light_h.float(), booster_h.detach().float()
        if out.similarity == "cosine":
            cos = (F.normalize(booster_h, p=2, dim=1) * F.normalize(light_h, p=2, dim=1)).sum(dim=1)
            total = total - 0.1 * (cos.mean() if w is None else (cos * w).mean())
        else:
            dist = (booster_h - light_h).square().sum(dim=1)
            total = total + torch.sqrt(dist.sum() if w is None else (dist * w).sum())
    return total
