"""The dense arch of DCNv1 and DCNv2 in plain torch: the group's concatenation, an optional backbone MLP, a
cross network, an optional deep MLP, the final MLP and a Linear without bias to the logit. Imports neither
torchrec nor fbgemm."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.models.blocks.group_input import GroupColumns, GroupConcat
from recpipe.models.blocks.mlp import MLP, MlpSpec


class DcnDense(nn.Module):
    """``logit = w · final(concat(cross(backbone(x0)), deep(x0)))`` with ``x0`` the group's ``(B, D)``
    concatenation (TorchEasyRec's ``DCNV2.predict`` and ``DCNV1.predict``; DCNv1 has no backbone and always a
    deep MLP).

    Args:
        columns (GroupColumns): the group's keys and dense columns.
        key_dims (dict[str, int]): embedding width of every key.
        dense_in_features (int): width of ``Batch.dense``.
        cross (nn.Module): the cross network over the backbone's width (``out_features`` attribute):
            a :class:`~recpipe.models.blocks.cross.CrossNetV2` or a :class:`~recpipe.models.blocks.cross.CrossNet`.
        final (MlpSpec): the final MLP.
        backbone (nn.Module | None): an MLP from ``D`` to the cross network's width, or None.
        deep (MlpSpec | None): the deep MLP over ``x0``, or None.
        device (torch.device | None): parameter device.

    Example::

        dense_arch = DcnDense(cols, dims, 13, CrossNetV2(429), MlpSpec((64,)), deep=MlpSpec((128,)))
        dense_arch(torch.randn(2, 13), embeddings).shape  # (2,)
    """

    def __init__(
        self,
        columns: GroupColumns,
        key_dims: dict[str, int],
        dense_in_features: int,
        cross: nn.Module,
        final: MlpSpec,
        backbone: MLP | None = None,
        deep: MlpSpec | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.group = GroupConcat(columns, key_dims, dense_in_features)
        width = self.group.out_features
        if backbone is not None and backbone.in_features != width:
            raise ValueError(f"DCN backbone input width {backbone.in_features} != the group's width {width}")
        self.backbone = backbone
        self.cross = cross
        self.deep = MLP.from_spec(width, deep, device=device) if deep is not None else None
        final_in = cross.out_features + (self.deep.out_features if self.deep is not None else 0)
        self.final = MLP.from_spec(final_in, final, device=device)
        self.logit = nn.Linear(self.final.out_features, 1, bias=False, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *self.group.keys]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        x0 = self.group(dense, embeddings)
        net = self.cross(self.backbone(x0) if self.backbone is not None else x0)
        if self.deep is not None:
            net = torch.cat([net, self.deep(x0)], dim=1)
        return self.logit(self.final(net)).squeeze(-1)
