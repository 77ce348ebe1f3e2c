"""The factorization machine's second-order term (plain torch)."""

from __future__ import annotations

import torch
from torch import nn


class FactorizationMachine(nn.Module):
    """The second-order term of a factorization machine (TorchEasyRec's ``tzrec/modules/fm.py``):
    ``0.5 · ((Σ_i v_i)² − Σ_i v_i²)`` per embedding column, i.e. ``Σ_{i<j} v_i ⊙ v_j`` in ``O(F·D)``.

    Example::

        v = torch.randn(2, 26, 16)                 # (B, F, D): F embeddings of one dim
        FactorizationMachine()(v).shape            # (2, 16); .sum(1) is Σ_{i<j} <v_i, v_j>
    """

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        s = v.sum(dim=1)
        return 0.5 * (s * s - (v * v).sum(dim=1))
