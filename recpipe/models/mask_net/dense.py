"""MaskNet's dense arch in plain torch: the group's concatenation, :class:`~recpipe.models.blocks.masknet.MaskNetModule`
and a Linear without bias to the logit. Imports neither torchrec nor fbgemm."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.models.blocks.group_input import GroupColumns, GroupConcat
from recpipe.models.blocks.masknet import MaskNetModule
from recpipe.models.blocks.mlp import MlpSpec


class MaskNetDense(nn.Module):
    """``logit = w · MaskNetModule(x)``, ``x`` the group's ``(B, D)`` concatenation (TorchEasyRec's
    ``MaskNet.predict``).

    Args:
        columns (GroupColumns): the group's keys and dense columns.
        key_dims (dict[str, int]): embedding width of every key.
        dense_in_features (int): width of ``Batch.dense``.
        num_blocks (int): mask blocks.
        hidden_dim (int): each block's output width.
        reduction_ratio (float | None): the mask generator's width over its block's input width.
        aggregation_dim (int | None): the mask generator's width without a ratio.
        top_mlp (MlpSpec | None): the MLP over the blocks.
        parallel (bool): parallel (true) or serial blocks.
        device (torch.device | None): parameter device.

    Example::

        dense_arch = MaskNetDense(cols, dims, 13, 3, 512, 3.0, None, MlpSpec((256, 128, 64)))
        dense_arch(torch.randn(2, 13), embeddings).shape  # (2,)
    """

    def __init__(
        self,
        columns: GroupColumns,
        key_dims: dict[str, int],
        dense_in_features: int,
        num_blocks: int,
        hidden_dim: int,
        reduction_ratio: float | None,
        aggregation_dim: int | None,
        top_mlp: MlpSpec | None = None,
        parallel: bool = True,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.group = GroupConcat(columns, key_dims, dense_in_features)
        self.mask_net = MaskNetModule(
            self.group.out_features,
            num_blocks,
            hidden_dim,
            reduction_ratio,
            aggregation_dim,
            top_mlp,
            parallel,
            device=device,
        )
        self.logit = nn.Linear(self.mask_net.out_features, 1, bias=False, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *self.group.keys]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.logit(self.mask_net(self.group(dense, embeddings))).squeeze(-1)
