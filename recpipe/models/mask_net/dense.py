"""MaskNet's dense arch in plain torch: the group's concatenation, :class:`~recpipe.models.blocks.masknet.MaskNetModule`
and a Linear without bias to the logit. Imports neither torchrec nor fbgemm."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.models.blocks.group_input import GroupConcat
from recpipe.models.blocks.masknet import MaskNetModule, MaskNetSpec


class MaskNetDense(nn.Module):
    """``logit = w · MaskNetModule(x)``, ``x`` the group's ``(B, D)`` concatenation (TorchEasyRec's
    ``MaskNet.predict``).

    Args:
        group (GroupConcat): the group's concatenation ``x``.
        spec (MaskNetSpec): the mask blocks and the top MLP.
        device (torch.device | None): parameter device.

    Example::

        dense_arch = MaskNetDense(GroupConcat(cols, dims, 13), MaskNetSpec(3, 512, 3.0, None, MlpSpec((256, 128, 64))))
        dense_arch(torch.randn(2, 13), embeddings).shape  # (2,)
    """

    def __init__(
        self,
        group: GroupConcat,
        spec: MaskNetSpec,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.group = group
        self.mask_net = MaskNetModule(self.group.out_features, spec, device=device)
        self.logit = nn.Linear(self.mask_net.out_features, 1, bias=False, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *self.group.keys]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.logit(self.mask_net(self.group(dense, embeddings))).squeeze(-1)
