"""Pairwise dot interaction (DLRM's): every pair's dot product among ``[dense, sparse_1 … sparse_F]``,
in plain torch (no torchrec, no fbgemm)."""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import FunctionCtx


def interaction_width(num_sparse_features: int, embedding_dim: int) -> int:
    """Width of :class:`DotInteraction`'s output: ``D + F·(F + 1) / 2`` (the dense vector plus the dot
    products of every pair among the ``F + 1`` vectors)."""
    return embedding_dim + num_sparse_features * (num_sparse_features + 1) // 2


class _Gram(torch.autograd.Function):
    """``X·Xᵀ`` per row with a one-``bmm`` backward: ``dX = (G + Gᵀ)·X``.

    Autograd's generic ``bmm(X, Xᵀ)`` backward runs two ``bmm`` (one per operand); the Gram matrix is
    symmetric in ``X``, so one suffices. Plain torch ops on both passes (export traces the forward).
    """

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, x.transpose(1, 2))

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return torch.bmm(grad + grad.transpose(1, 2), x)


def _tracked(x: torch.Tensor) -> bool:
    """Whether eager autograd records ``x`` (TorchScript and tracers cannot hold a Python Function)."""
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return False
    return torch.is_grad_enabled() and x.requires_grad


class DotInteraction(nn.Module):
    """Dot products of every pair among ``[dense, sparse_1 … sparse_F]`` (strict upper triangle),
    concatenated after the dense vector.

    One ``bmm`` gives the full ``(F+1) × (F+1)`` Gram matrix per row; the upper triangle is taken with a
    single ``index_select`` on the flattened matrix (cheaper than TorchRec's two-index gather), and the
    backward needs one ``bmm`` instead of two (the Gram matrix is symmetric in its input).
    ``benchmarks/dlrm_interaction.py`` compares it with TorchRec's ``InteractionArch``.

    Args:
        num_sparse_features (int): ``F``.
        device (torch.device | None): device of the index buffer.

    Example::

        inter = DotInteraction(num_sparse_features=26)
        out = inter(torch.randn(8, 16), torch.randn(8, 26, 16))  # dense (B, D), sparse (B, F, D)
        out.shape  # (8, 16 + 26 * 27 / 2) = (8, 367)
    """

    def __init__(self, num_sparse_features: int, device: torch.device | None = None) -> None:
        super().__init__()
        if num_sparse_features < 1:
            raise ValueError(f"DotInteraction needs at least one sparse feature, got {num_sparse_features}")
        self.num_sparse_features = num_sparse_features
        n = num_sparse_features + 1
        self.register_buffer(
            "triu_flat", torch.empty(n * (n - 1) // 2, dtype=torch.long, device=device), False
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Also called by DistributedModelParallel after materializing a meta-built model.
        if self.triu_flat.is_meta:
            return
        n = self.num_sparse_features + 1
        rows, cols = torch.triu_indices(n, n, offset=1, device=self.triu_flat.device)
        self.triu_flat.copy_(rows * n + cols)

    @torch.jit.unused
    def _gram(self, combined):  # unannotated: TorchScript cannot read string annotations of unused methods
        return _Gram.apply(combined)

    def out_features(self, embedding_dim: int) -> int:
        return interaction_width(self.num_sparse_features, embedding_dim)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """
        Args:
            dense (torch.Tensor): ``(B, D)`` bottom-MLP output.
            sparse (torch.Tensor): ``(B, F, D)`` pooled embeddings.

        Returns:
            torch.Tensor: ``(B, D + F·(F+1)/2)``.
        """
        combined = torch.cat([dense.unsqueeze(1), sparse], dim=1)  # (B, F+1, D)
        if _tracked(combined):
            gram = self._gram(combined)  # (B, F+1, F+1)
        else:  # no autograd (inference, no_grad export), TorchScript, jit.trace: a plain bmm
            gram = torch.bmm(combined, combined.transpose(1, 2))
        pairs = gram.flatten(1).index_select(1, self.triu_flat)
        return torch.cat([dense, pairs], dim=1)
