"""MaskNet's instance-guided mask blocks in plain torch (TorchEasyRec's ``MaskBlock`` and ``MaskNetModule``,
tzrec/modules/masknet.py; Wang et al. 2021)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recpipe.models.blocks.mlp import MLP, MlpSpec


class MaskBlock(nn.Module):
    """``ReLU(LayerNorm(W · (x ⊙ mask(m))))`` with ``mask(m) = Linear(ReLU(Linear(m)))``: the instance-guided
    mask, computed from the feature embedding ``m``, scales the block's input ``x`` element-wise.

    Args:
        in_features (int): width of ``x`` (the embedding's in parallel mode, the previous block's in serial).
        mask_in_features (int): width of ``m`` (always the embedding's).
        hidden_dim (int): the output width (``hidden_dim``).
        aggregation_dim (int): the mask generator's hidden width: TorchEasyRec's ``aggregation_dim``, or
            ``int(in_features · reduction_ratio)`` when a ratio is set (TorchEasyRec's ratio wins).
        device (torch.device | None): parameter device.

    Example::

        block = MaskBlock(429, 429, hidden_dim=512, aggregation_dim=1287)
        block(torch.randn(8, 429), torch.randn(8, 429)).shape   # (8, 512)
    """

    def __init__(
        self,
        in_features: int,
        mask_in_features: int,
        hidden_dim: int,
        aggregation_dim: int,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if aggregation_dim < 1 or hidden_dim < 1:
            raise ValueError(
                f"MaskBlock needs aggregation_dim >= 1 and hidden_dim >= 1, got {aggregation_dim}, {hidden_dim} "
                "(check reduction_ratio or aggregation_dim)"
            )
        self.mask_generator = nn.Sequential(
            nn.Linear(mask_in_features, aggregation_dim, device=device),
            nn.ReLU(),
            nn.Linear(aggregation_dim, in_features, device=device),
        )
        self.ffn = nn.Sequential(
            nn.Linear(in_features, hidden_dim, device=device),
            nn.LayerNorm(hidden_dim, device=device),
            nn.ReLU(),
        )
        self.out_features = hidden_dim

    def forward(self, x: torch.Tensor, mask_input: torch.Tensor) -> torch.Tensor:
        return self.ffn(x * self.mask_generator(mask_input))


def aggregation_width(in_features: int, reduction_ratio: float | None, aggregation_dim: int | None) -> int:
    """TorchEasyRec's choice: ``int(in_features · reduction_ratio)`` when a ratio is set, else
    ``aggregation_dim``."""
    if reduction_ratio:
        return int(in_features * reduction_ratio)
    if aggregation_dim:
        return aggregation_dim
    raise ValueError("a mask block needs reduction_ratio or aggregation_dim")


@dataclass(frozen=True)
class MaskNetSpec:
    """A MaskNet's blocks (TorchEasyRec's ``MaskNetModule`` message).

    Args:
        num_blocks (int): ``n_mask_blocks``.
        hidden_dim (int): each block's output width.
        reduction_ratio (float | None): the mask generator's width over its block's input width.
        aggregation_dim (int | None): the mask generator's width when no ratio is set.
        top_mlp (MlpSpec | None): the MLP over the blocks' output.
        parallel (bool): ``use_parallel`` (TorchEasyRec's default: true).
    """

    num_blocks: int
    hidden_dim: int
    reduction_ratio: float | None
    aggregation_dim: int | None
    top_mlp: MlpSpec | None = None
    parallel: bool = True


class MaskNetModule(nn.Module):
    """LayerNorm over the embedding, then ``n`` :class:`MaskBlock` s, in parallel (each over the normalized
    embedding, outputs concatenated) or serial (the first over it, each next over the previous output), all
    masked by the raw embedding; then an optional top MLP.

    Args:
        in_features (int): the embedding width ``D``.
        spec (MaskNetSpec): the blocks and the top MLP.
        device (torch.device | None): parameter device.

    Example::

        net = MaskNetModule(429, MaskNetSpec(3, 512, 3.0, None, MlpSpec((256, 128, 64))))
        net(torch.randn(8, 429)).shape   # (8, 64)
    """

    def __init__(self, in_features: int, spec: MaskNetSpec, device: torch.device | None = None) -> None:
        super().__init__()
        if spec.num_blocks < 1:
            raise ValueError(f"MaskNet needs at least one mask block, got {spec.num_blocks}")
        self.norm = nn.LayerNorm(in_features, device=device)
        self.parallel = spec.parallel
        hidden_dim = spec.hidden_dim
        blocks = []
        width = in_features
        for _ in range(spec.num_blocks):
            block_in = in_features if spec.parallel else width
            agg = aggregation_width(block_in, spec.reduction_ratio, spec.aggregation_dim)
            blocks.append(MaskBlock(block_in, in_features, hidden_dim, agg, device=device))
            width = hidden_dim
        self.blocks = nn.ModuleList(blocks)
        width = hidden_dim * spec.num_blocks if spec.parallel else hidden_dim
        top = spec.top_mlp
        self.top = MLP.from_spec(width, top, device=device) if top is not None else None
        self.out_features = self.top.out_features if self.top is not None else width

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        """``(B, D) -> (B, out_features)``."""
        normed = self.norm(emb)
        if self.parallel:
            hidden = torch.cat([block(normed, emb) for block in self.blocks], dim=-1)
        else:
            hidden = normed
            for block in self.blocks:
                hidden = block(hidden, emb)
        return self.top(hidden) if self.top is not None else hidden
