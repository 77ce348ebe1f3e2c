"""RocketLaunching's dense arch in plain torch: the group's concatenation, an optional shared MLP, the light net
(what ``forward`` computes, the served graph) and the booster net (:meth:`RocketDense.distill`, training
only). Imports neither torchrec nor fbgemm."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recpipe.models.blocks.distill import Distillation
from recpipe.models.blocks.group_input import GroupConcat
from recpipe.models.blocks.mlp import MLP, MlpSpec
from recpipe.models.blocks.multitask import TwoClassLogit


def _head(in_features: int, num_class: int, name: str, device: torch.device | None) -> nn.Module:
    """A net's output layer: ``Linear(·, 1)``, or a :class:`TwoClassLogit` (``num_class: 2``)."""
    if num_class == 2:
        return TwoClassLogit(in_features, name, device=device)
    return nn.Linear(in_features, 1, device=device)


def _raw(head: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The head's ``(B, C)`` output before the logit: ``(l0, l1)`` of a two-class head, else the logit."""
    return head.pair(x) if isinstance(head, TwoClassLogit) else head(x)


def _layers(mlp: MLP, x: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's output of ``mlp`` on ``x`` (TorchEasyRec's ``hidden_layer{i}``)."""
    out = []
    for layer in mlp.layers:
        x = layer(x)
        out.append(x)
    return out


def matched_layers(light: tuple[int, ...], booster: tuple[int, ...]) -> list[tuple[int, int]]:
    """``(i, j)``: each light layer ``i`` with the first booster layer ``j`` of its width (TorchEasyRec's
    ``_get_distillation_mlp_index``).

    Example::

        matched_layers((96, 64, 32), (256, 128, 64, 32))   # [(1, 2), (2, 3)]
    """
    return [(i, booster.index(width)) for i, width in enumerate(light) if width in booster]


@dataclass(frozen=True)
class RocketSpec:
    """The two nets of a RocketLaunching model.

    Args:
        booster (MlpSpec): the booster net.
        light (MlpSpec): the light net.
        share (MlpSpec | None): the shared MLP.
        num_class (int): 1 or 2 (:func:`_head`).
        feature_based (bool): pull matched hidden layers together (:func:`matched_layers`).
        similarity (str): ``cosine`` or ``euclid``.
    """

    booster: MlpSpec
    light: MlpSpec
    share: MlpSpec | None = None
    num_class: int = 1
    feature_based: bool = False
    similarity: str = "cosine"


class RocketDense(nn.Module):
    """``forward``: the light net's logit ``(B,)`` (TorchEasyRec's ``logits_light``, what it serves);
    :meth:`distill`: both nets for the training loss. The light net reads the shared input detached: the
    embeddings and the shared MLP learn from the booster's loss only (TorchEasyRec's
    ``self.light_mlp(share_net.detach())``).

    Args:
        group (GroupConcat): the group's ``(B, D)`` input.
        spec (RocketSpec): the nets.
        device (torch.device | None): parameter device.

    Example::

        arch = RocketDense(group, RocketSpec(MlpSpec((64, 32)), MlpSpec((32,)), feature_based=True))
        arch(dense, embeddings).shape          # (B,): the light net
        arch.distill(dense, embeddings).hidden  # ((light layer 0, booster layer 1),)
    """

    def __init__(self, group: GroupConcat, spec: RocketSpec, device: torch.device | None = None) -> None:
        super().__init__()
        self.group = group
        width = group.out_features
        self.share = MLP.from_spec(width, spec.share, device=device) if spec.share is not None else None
        width = self.share.out_features if self.share is not None else width
        self.light = MLP.from_spec(width, spec.light, device=device)
        self.light_logit = _head(self.light.out_features, spec.num_class, "light", device)
        self.booster = MLP.from_spec(width, spec.booster, device=device)
        self.booster_logit = _head(self.booster.out_features, spec.num_class, "booster", device)
        units = (spec.light.hidden_units, spec.booster.hidden_units)
        self.matched = matched_layers(*units) if spec.feature_based else []
        self.similarity = spec.similarity

    def input_names(self) -> list[str]:
        return ["dense", *self.group.keys]

    def _shared(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.group(dense, embeddings)
        return self.share(x) if self.share is not None else x

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.light_logit(self.light(self._shared(dense, embeddings).detach())).squeeze(-1)

    def distill(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> Distillation:
        """Both nets on one batch: logits, head outputs and the matched hidden layers."""
        shared = self._shared(dense, embeddings)
        light = _layers(self.light, shared.detach())
        booster = _layers(self.booster, shared)
        light_raw, booster_raw = _raw(self.light_logit, light[-1]), _raw(self.booster_logit, booster[-1])

        def logit(raw: torch.Tensor) -> torch.Tensor:
            return raw[:, 1] - raw[:, 0] if raw.shape[1] == 2 else raw[:, 0]

        return Distillation(
            logit(light_raw),
            logit(booster_raw),
            light_raw,
            booster_raw,
            tuple((light[i], booster[j]) for i, j in self.matched),
            self.similarity,
        )
