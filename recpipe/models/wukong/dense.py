"""WuKong's dense arch in plain torch (TorchEasyRec's ``tzrec/modules/interaction.py``: ``LinearCompressBlock``,
``FactorizationMachineBlock``, ``WuKongLayer``; Zhang et al. 2024, "Wukong: Towards a Scaling Law for
Large-Scale Recommendation")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from recpipe.models.blocks.mlp import MLP, MlpSpec


@dataclass(frozen=True)
class WukongLayerSpec:
    """One layer's shape: see :class:`~recpipe.models.wukong.config.WukongLayerConfig`."""

    lcb_feature_num: int
    fmb_feature_num: int
    compressed_feature_num: int
    feature_num_mlp: MlpSpec


class LinearCompressBlock(nn.Module):
    """``(B, F_in, D) -> (B, F_out, D)``: every output feature a linear mix of the input features,
    ``out[b, :, d] = x[b, :, d] @ W`` with ``W`` ``(F_in, F_out)`` (kaiming-uniform, as TorchEasyRec's).

    Example::

        LinearCompressBlock(27, 16)(torch.randn(2, 27, 8)).shape   # (2, 16, 8)
    """

    def __init__(self, feature_num_in: int, feature_num_out: int, device: torch.device | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(feature_num_in, feature_num_out, device=device))
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.transpose(1, 2) @ self.weight).transpose(1, 2)


class FactorizationMachineBlock(nn.Module):
    """The optimized FM block: ``x · (xᵀ W)`` ``(B, F, C)`` (every feature's dot products with ``C`` learned
    mixes of the features), flattened, LayerNorm, the MLP, then ``Linear`` to ``(B, F_out, D)``.

    Args:
        dim (int): the embedding dim ``D``.
        feature_num_in (int): ``F``.
        feature_num_out (int): ``F_out``.
        compressed_feature_num (int): ``C``.
        mlp (MlpSpec): the MLP over the ``F · C`` interactions.

    Example::

        FactorizationMachineBlock(8, 27, 16, 4, MlpSpec((32,)))(torch.randn(2, 27, 8)).shape   # (2, 16, 8)
    """

    def __init__(
        self,
        dim: int,
        feature_num_in: int,
        feature_num_out: int,
        compressed_feature_num: int,
        mlp: MlpSpec,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.dim, self.feature_num_out = dim, feature_num_out
        width = feature_num_in * compressed_feature_num
        self.weight = nn.Parameter(torch.empty(feature_num_in, compressed_feature_num, device=device))
        nn.init.kaiming_uniform_(self.weight)
        self.norm = nn.LayerNorm(width, device=device)
        self.mlp = MLP.from_spec(width, mlp, device)
        self.out = nn.Linear(self.mlp.out_features, feature_num_out * dim, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inter = torch.matmul(x, torch.matmul(x.transpose(1, 2), self.weight))  # (B, F, C)
        h = self.mlp(self.norm(inter.flatten(1)))
        return self.out(h).reshape(-1, self.feature_num_out, self.dim)


class WukongLayer(nn.Module):
    """``LayerNorm(concat(FMB(x), LCB(x)) + residual(x))`` over the last dim, ``(B, F, D) -> (B, F_fmb + F_lcb, D)``;
    the residual is ``x`` itself when the feature count is kept, else a :class:`LinearCompressBlock`.

    Example::

        layer = WukongLayer(8, 27, WukongLayerSpec(16, 16, 4, MlpSpec((32,))))
        layer(torch.randn(2, 27, 8)).shape   # (2, 32, 8)
    """

    def __init__(
        self, dim: int, feature_num: int, spec: WukongLayerSpec, device: torch.device | None = None
    ) -> None:
        super().__init__()
        self.out_features = spec.lcb_feature_num + spec.fmb_feature_num
        self.lcb = LinearCompressBlock(feature_num, spec.lcb_feature_num, device)
        self.fmb = FactorizationMachineBlock(
            dim, feature_num, spec.fmb_feature_num, spec.compressed_feature_num, spec.feature_num_mlp, device
        )
        self.norm = nn.LayerNorm(dim, device=device)
        self.residual = (
            nn.Identity()
            if feature_num == self.out_features
            else LinearCompressBlock(feature_num, self.out_features, device)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.cat([self.fmb(x), self.lcb(x)], dim=1) + self.residual(x))


class WukongDense(nn.Module):
    """WuKong's dense arch: ``[dense_mlp(dense)] + sparse embeddings`` stacked ``(B, F, D)``, the layers, the
    final MLP over ``(B, F_L · D)``, ``Linear(·, 1)``.

    Args:
        sparse_keys (list[str]): the sparse keys, in stack order (after the dense feature).
        dense_in_features (int): width of ``Batch.dense``.
        dim (int): the embedding dim ``D``.
        layers (Sequence[WukongLayerSpec]): the stack.
        final (MlpSpec): the final MLP.
        dense_mlp (MlpSpec | None): the MLP over ``Batch.dense`` (its last width ``D``); None: unused.

    Example::

        keys = [f"C{i}" for i in range(1, 27)]
        arch = WukongDense(keys, 13, 16, [WukongLayerSpec(16, 16, 24, MlpSpec((64,)))], MlpSpec((32,)),
                           MlpSpec((64, 16)))
        arch(torch.randn(4, 13), {k: torch.randn(4, 16) for k in keys}).shape   # (4,)
    """

    def __init__(
        self,
        sparse_keys: list[str],
        dense_in_features: int,
        dim: int,
        layers: Sequence[WukongLayerSpec],
        final: MlpSpec,
        dense_mlp: MlpSpec | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not layers:
            raise ValueError("WuKong needs at least one wukong layer")
        self.sparse_keys = list(sparse_keys)
        self.bottom = MLP.from_spec(dense_in_features, dense_mlp, device) if dense_mlp is not None else None
        if self.bottom is not None and self.bottom.out_features != dim:
            raise ValueError(
                f"WuKong dense_mlp's last width {self.bottom.out_features} must equal the embedding dim {dim}: "
                "its output is one more feature of the stack"
            )
        features = len(sparse_keys) + (1 if self.bottom is not None else 0)
        self.layers = nn.ModuleList()
        for spec in layers:
            layer = WukongLayer(dim, features, spec, device)
            self.layers.append(layer)
            features = layer.out_features
        self.final = MLP.from_spec(features * dim, final, device)
        self.logit = nn.Linear(self.final.out_features, 1, device=device)

    def input_names(self) -> list[str]:
        """``dense`` then one ``(B, D)`` per sparse key."""
        return ["dense", *self.sparse_keys]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        x = torch.stack([embeddings[k] for k in self.sparse_keys], dim=1)  # (B, F, D)
        if self.bottom is not None:
            x = torch.cat([self.bottom(dense).unsqueeze(1), x], dim=1)
        for layer in self.layers:
            x = layer(x)
        return self.logit(self.final(x.flatten(1))).squeeze(-1)
