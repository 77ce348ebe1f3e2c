"""xDeepFM's dense arch in plain torch: the CIN over the wide group's fields, the deep MLP, the final MLP and
the logit. Imports neither torchrec nor fbgemm."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.models.blocks.cross import CompressedInteraction
from recpipe.models.blocks.group_input import GroupColumns, GroupConcat
from recpipe.models.blocks.mlp import MLP, MlpSpec


class XDeepFMDense(nn.Module):
    """``logit = Linear(final(concat(CIN(stack(wide)), deep(concat(deep group)))))`` (TorchEasyRec's
    ``xDeepFM.predict``).

    Args:
        wide_keys (list[str]): the wide group's keys, ``F`` fields of one dim.
        deep (GroupColumns): the deep group's keys and dense columns.
        key_dims (dict[str, int]): embedding width of every key.
        dense_in_features (int): width of ``Batch.dense``.
        cin_layer_sizes (list[int]): the CIN's layers.
        deep_mlp (MlpSpec): the deep MLP.
        final (MlpSpec): the final MLP.
        device (torch.device | None): parameter device.

    Example::

        dense_arch = XDeepFMDense(wide, cols, dims, 13, [64, 64], MlpSpec((128,)), MlpSpec((64,)))
        dense_arch(torch.randn(2, 13), embeddings).shape  # (2,)
    """

    def __init__(
        self,
        wide_keys: list[str],
        deep: GroupColumns,
        key_dims: dict[str, int],
        dense_in_features: int,
        cin_layer_sizes: list[int],
        deep_mlp: MlpSpec,
        final: MlpSpec,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        wide_dims = {key_dims[k] for k in wide_keys}
        if not wide_keys or len(wide_dims) != 1:
            raise ValueError(
                "xDeepFM's CIN needs wide features of one embedding dim, got "
                f"{ {k: key_dims[k] for k in wide_keys} }"
            )
        self.wide_keys = list(wide_keys)
        self.cin = CompressedInteraction(len(wide_keys), cin_layer_sizes, device=device)
        self.group = GroupConcat(deep, key_dims, dense_in_features)
        self.deep = MLP.from_spec(self.group.out_features, deep_mlp, device=device)
        self.final = MLP.from_spec(self.cin.out_features + self.deep.out_features, final, device=device)
        self.logit = nn.Linear(self.final.out_features, 1, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *dict.fromkeys([*self.wide_keys, *self.group.keys])]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        cin = self.cin(torch.stack([embeddings[k] for k in self.wide_keys], dim=1))
        deep = self.deep(self.group(dense, embeddings))
        return self.logit(self.final(torch.cat([cin, deep], dim=1))).squeeze(-1)
