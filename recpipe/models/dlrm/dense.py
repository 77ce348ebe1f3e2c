"""DLRM's dense arch in plain torch: bottom MLP, pairwise dot interaction, over MLP, logit. Imports
neither torchrec nor fbgemm, so it runs (and exports) where they are not installed
(``benchmarks/gpu_check.py`` on a bare CUDA machine)."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.models.blocks.interaction import DotInteraction, interaction_width
from recpipe.models.blocks.mlp import MLP, MlpSpec


def over_arch_width(num_sparse_features: int, embedding_dim: int, arch_with_sparse: bool = False) -> int:
    """Width of the over arch's input: the interaction's ``D + F·(F + 1) / 2``, plus ``F·D`` when the
    raw embeddings are fed too (``arch_with_sparse``)."""
    extra = num_sparse_features * embedding_dim if arch_with_sparse else 0
    return interaction_width(num_sparse_features, embedding_dim) + extra


class DlrmDense(nn.Module):
    """DLRM's dense arch: bottom MLP, :class:`DotInteraction`, over MLP, logit (plain torch ops only).

    Args:
        sparse_keys (list[str]): the ``F`` sparse keys, in interaction order.
        dense_in_features (int): width of ``Batch.dense``.
        dense_arch (MlpSpec): bottom MLP, ending at ``embedding_dim``.
        over_arch (MlpSpec): top MLP.
        embedding_dim (int): ``D``.
        arch_with_sparse (bool): also feed the raw ``(B, F·D)`` embeddings to the over arch.
        device (torch.device | None): parameter device.

    Example::

        keys = [f"C{i}" for i in range(1, 27)]
        dense_arch = DlrmDense(keys, 13, MlpSpec((64, 16)), MlpSpec((128, 64)), 16)
        dense_arch(torch.randn(4, 13), {k: torch.randn(4, 16) for k in keys}).shape  # (4,)
    """

    def __init__(
        self,
        sparse_keys: list[str],
        dense_in_features: int,
        dense_arch: MlpSpec,
        over_arch: MlpSpec,
        embedding_dim: int,
        arch_with_sparse: bool = False,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.sparse_keys = list(sparse_keys)
        self.arch_with_sparse = arch_with_sparse
        self.bottom = MLP.from_spec(dense_in_features, dense_arch, device=device)
        self.interaction = DotInteraction(len(sparse_keys), device=device)
        self.over = MLP.from_spec(
            over_arch_width(len(sparse_keys), embedding_dim, arch_with_sparse), over_arch, device=device
        )
        self.logit = nn.Linear(self.over.out_features, 1, device=device)

    def input_names(self) -> list[str]:
        """``dense`` ``(B, 13)`` then one ``(B, D)`` per sparse key."""
        return ["dense", *self.sparse_keys]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        bottom = self.bottom(dense)  # (B, D)
        sparse = torch.stack([embeddings[k] for k in self.sparse_keys], dim=1)  # (B, F, D)
        inter = self.interaction(bottom, sparse)
        if self.arch_with_sparse:
            inter = torch.cat([inter, sparse.flatten(1)], dim=1)
        return self.logit(self.over(inter)).squeeze(-1)
