"""Explicit feature-crossing layers in plain torch: DCN's cross network (v1), DCNv2's low-rank cross network
and xDeepFM's compressed interaction network (TorchEasyRec's ``Cross``, ``CrossV2`` and ``CIN``,
tzrec/modules/interaction.py: the same parameters, initializations and formulas)."""

from __future__ import annotations

import torch
from torch import nn


class CrossNet(nn.Module):
    """DCN's cross network (Wang et al. 2017): ``x_{l+1} = x_0 · (x_l · w_l) + b_l + x_l``, a scalar
    ``x_l · w_l`` per row scaling ``x_0``; ``w_l`` Xavier-uniform, ``b_l`` zeros (TorchEasyRec's ``Cross``).

    Args:
        in_features (int): ``D``, the width of ``x_0`` and of the output.
        num_layers (int): cross layers (TorchEasyRec's ``cross_num``, default 3).
        device (torch.device | None): parameter device.

    Example::

        cross = CrossNet(429, num_layers=3)
        cross(torch.randn(8, 429)).shape   # (8, 429)
    """

    def __init__(self, in_features: int, num_layers: int = 3, device: torch.device | None = None) -> None:
        super().__init__()
        if in_features < 1 or num_layers < 1:
            raise ValueError(
                f"CrossNet needs in_features >= 1 and num_layers >= 1, got {in_features}, {num_layers}"
            )
        self.out_features = in_features
        self.w = nn.ModuleList(
            nn.Linear(in_features, 1, bias=False, device=device) for _ in range(num_layers)
        )
        self.b = nn.ParameterList(
            nn.Parameter(torch.empty(in_features, device=device)) for _ in range(num_layers)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w, b in zip(self.w, self.b):
            if w.weight.is_meta:
                return
            nn.init.xavier_uniform_(w.weight)
            nn.init.zeros_(b)

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        """``(B, D) -> (B, D)``."""
        x = x0
        for w, b in zip(self.w, self.b):
            x = w(x) * x0 + b + x
        return x


class CrossNetV2(nn.Module):
    """DCNv2's cross network (Wang et al. 2021) with TorchEasyRec's low-rank weight:
    ``x_{l+1} = x_0 ⊙ (V_l (U_l x_l) + c_l) + x_l``, ``U_l`` ``(r, D)`` without bias, ``V_l`` ``(D, r)`` with one
    (TorchEasyRec's ``CrossV2``: one low-rank matrix per layer, no mixture of experts; torch's default Linear
    initialization).

    Args:
        in_features (int): ``D``.
        num_layers (int): cross layers (``cross_num``, default 3).
        low_rank (int): ``r`` (``low_rank``, default 32).
        device (torch.device | None): parameter device.

    Example::

        cross = CrossNetV2(429, num_layers=3, low_rank=32)
        cross(torch.randn(8, 429)).shape   # (8, 429)
    """

    def __init__(
        self, in_features: int, num_layers: int = 3, low_rank: int = 32, device: torch.device | None = None
    ) -> None:
        super().__init__()
        if in_features < 1 or num_layers < 1 or low_rank < 1:
            raise ValueError(
                "CrossNetV2 needs in_features, num_layers and low_rank >= 1, got "
                f"{in_features}, {num_layers}, {low_rank}"
            )
        self.out_features = in_features
        self.u = nn.ModuleList(
            nn.Linear(in_features, low_rank, bias=False, device=device) for _ in range(num_layers)
        )
        self.v = nn.ModuleList(nn.Linear(low_rank, in_features, device=device) for _ in range(num_layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        """``(B, D) -> (B, D)``."""
        x = x0
        for u, v in zip(self.u, self.v):
            x = x0 * v(u(x)) + x
        return x


class CompressedInteraction(nn.Module):
    """xDeepFM's compressed interaction network (Lian et al. 2018; TorchEasyRec's ``CIN``): layer ``k`` takes
    the outer products ``z[b, h, f, d] = x_{k-1}[b, h, d] · x_0[b, f, d]`` of its input's ``H_{k-1}`` maps with
    the ``F`` fields, a 1×1 convolution (with bias) compresses the ``H_{k-1}·F`` products to ``H_k`` maps, and
    each layer's maps summed over ``d`` are concatenated: ``(B, Σ_k H_k)``. Every layer feeds the next (no
    split half, as in TorchEasyRec).

    Args:
        num_fields (int): ``F``.
        layer_sizes (list[int]): ``H_k`` of each layer (``cin_layer_size``).
        device (torch.device | None): parameter device.

    Example::

        cin = CompressedInteraction(26, [64, 64, 64])
        cin(torch.randn(8, 26, 16)).shape   # (8, 192)
    """

    def __init__(
        self, num_fields: int, layer_sizes: list[int] | tuple[int, ...], device: torch.device | None = None
    ) -> None:
        super().__init__()
        if num_fields < 1 or not layer_sizes or any(h < 1 for h in layer_sizes):
            raise ValueError(
                f"CIN needs at least one field and positive layer sizes, got {num_fields} fields, {list(layer_sizes)}"
            )
        self.num_fields = num_fields
        self.out_features = sum(layer_sizes)
        widths = [num_fields, *layer_sizes]
        self.layers = nn.ModuleList(
            nn.Conv1d(h * num_fields, k, kernel_size=1, device=device) for h, k in zip(widths, widths[1:])
        )

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        """``(B, F, D) -> (B, Σ H_k)``."""
        b, f, d = x0.shape
        x = x0
        out = []
        for conv in self.layers:
            z = (x.unsqueeze(2) * x0.unsqueeze(1)).reshape(b, x.shape[1] * f, d)
            x = conv(z)  # (B, H_k, D)
            out.append(x.sum(dim=2))
        return torch.cat(out, dim=1)
