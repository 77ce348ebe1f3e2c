"""MIND's behaviour-to-interest (B2I) capsule routing over a jagged history (TorchEasyRec's ``CapsuleLayer``,
tzrec/modules/capsule.py; Li et al., "Multi-Interest Network with Dynamic Routing", CIKM 2019).

Each history item (a low capsule) is mapped by one shared bilinear matrix ``S`` to ``H`` dims; ``num_iters``
rounds route the items to at most ``max_k`` interests (high capsules): each round a softmax over the interests
of every item's routing logits (times ``routing_logits_scale``), each interest the weighted sum of its items,
and — between rounds — the logits become those weights plus each item's agreement with each interest (the
items' normalised vectors, gradients stopped, as TorchEasyRec's). The last round's interests are squashed.

A row of ``n`` items has ``max(1, min(max_k, log2 n))`` interests (a fractional count rounds up, as
TorchEasyRec's mask ``k < count`` does; an empty history has one, all zeros), or ``max_k`` with
``const_caps_num``; the interests past it are zeros and masked. Only the first ``max_seq_len`` items route.

The history arrives jagged; the routing pads it to the batch's longest row (capped at ``max_seq_len``) for two
batched matrix products per round. Padded items carry zero vectors and zero weight, and the initial routing
logits are a fixed buffer per position, so a row's interests depend on its own items only, never on the other
rows' lengths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROUTING_INITS = ("normal", "zeros")


def squash(x: torch.Tensor, power: float = 1.0) -> torch.Tensor:
    """``(|x|² / (1 + |x|²))^power · x / |x|`` over the last dim, ``|x|`` floored at 1e-7 (TorchEasyRec's
    ``squash_pow``: a power below 1 keeps short vectors from shrinking to nothing).

    Example::

        squash(torch.tensor([[3.0, 4.0]]))        # |x| = 5: 25/26 · (0.6, 0.8) = [[0.5769, 0.7692]]
        squash(torch.zeros(1, 2))                 # [[0., 0.]]
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-7)
    sq = norm * norm
    return torch.pow(sq / (1.0 + sq), power) / norm * x


def padded_history(
    values: torch.Tensor, offsets: torch.Tensor, max_len: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first ``max_len`` items of every row, padded with zeros to the longest row's kept length.

    Args:
        values (torch.Tensor): ``(T, L)`` items back to back.
        offsets (torch.Tensor): ``(B + 1,)`` int64 row offsets.
        max_len (int): items kept per row (the first ones).

    Returns:
        tuple: ``(B, S, L)`` items, ``(B, S)`` bool mask of real items, ``(B,)`` int64 full lengths.

    Example::

        padded_history(torch.arange(3.0).unsqueeze(1), torch.tensor([0, 2, 2, 3]), 50)
        # items [[[0], [1]], [[0], [0]], [[2], [0]]], mask [[T, T], [F, F], [T, F]], lengths [2, 0, 1]
    """
    lengths = offsets[1:] - offsets[:-1]
    rows = lengths.shape[0]
    kept = lengths.clamp_max(max_len)
    width = int(kept.max()) if rows else 0
    row = torch.repeat_interleave(torch.arange(rows, device=values.device), lengths)
    pos = torch.arange(values.shape[0], device=values.device) - offsets[:-1][row]
    keep = pos < max_len
    out = values.new_zeros(rows, width, values.shape[1])
    out[row[keep], pos[keep]] = values[keep]
    mask = torch.arange(width, device=values.device).unsqueeze(0) < kept.unsqueeze(1)
    return out, mask, lengths


class CapsuleRouting(nn.Module):
    """Dynamic routing of a jagged history into at most ``max_k`` interests of ``high_dim`` dims.

    Args:
        input_dim (int): an item's width ``L``.
        max_k (int): most interests (TorchEasyRec's default 5).
        max_seq_len (int): items routed per row, the first ones.
        high_dim (int): an interest's width ``H``.
        num_iters (int): routing rounds (default 3).
        routing_logits_scale (float): the logits' factor inside the softmax (default 20).
        routing_logits_stddev (float): stddev of the initial logits (default 1).
        squash_pow (float): power of the squash (default 1).
        const_caps_num (bool): every row has ``max_k`` interests, however short its history.
        routing_init (str): ``normal`` or ``zeros`` initial logits (zeros leave the interests alike).
        device (torch.device | None): parameter device.

    Example::

        caps = CapsuleRouting(24, max_k=4, max_seq_len=50, high_dim=8)
        # B = 2: row 0 has 5 items, row 1 none → T = 5
        interests, mask = caps(torch.randn(5, 24), torch.tensor([0, 5, 5]))
        interests.shape, mask.tolist()   # (2, 4, 8); [[T, T, T, F], [T, F, F, F]]  (log2 5 = 2.3 → 3)
    """

    def __init__(
        self,
        input_dim: int,
        max_k: int = 5,
        max_seq_len: int = 50,
        high_dim: int = 64,
        num_iters: int = 3,
        routing_logits_scale: float = 20.0,
        routing_logits_stddev: float = 1.0,
        squash_pow: float = 1.0,
        const_caps_num: bool = False,
        routing_init: str = "normal",
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("input_dim", input_dim), ("max_k", max_k), ("max_seq_len", max_seq_len)):
            if value < 1:
                raise ValueError(f"capsule {name} must be >= 1, got {value}")
        if high_dim < 1 or num_iters < 1:
            raise ValueError(f"capsule high_dim and num_iters must be >= 1, got {high_dim}, {num_iters}")
        if routing_init not in ROUTING_INITS:
            raise ValueError(f"routing_init must be one of {list(ROUTING_INITS)}, got {routing_init!r}")
        self.max_k, self.max_seq_len, self.high_dim = max_k, max_seq_len, high_dim
        self.num_iters = num_iters
        self.scale = float(routing_logits_scale)
        self.squash_pow = float(squash_pow)
        self.const_caps_num = const_caps_num
        self.bilinear = nn.Parameter(torch.randn(input_dim, high_dim, device=device))
        init = torch.randn(max_seq_len, max_k, device=device) if routing_init == "normal" else None
        if init is None:
            init = torch.zeros(max_seq_len, max_k, device=device)
        # Fixed per position and saved with the model: the same user gets the same interests at every call.
        self.register_buffer("routing_logits", init * float(routing_logits_stddev))

    def interest_mask(self, lengths: torch.Tensor) -> torch.Tensor:
        """``(B, max_k)`` bool: interest ``k`` of a row of ``n`` items is real when ``k < max(1, min(max_k,
        log2 n))`` (all ``max_k`` with ``const_caps_num``)."""
        k = torch.arange(self.max_k, device=lengths.device).unsqueeze(0)
        if self.const_caps_num:
            return (k < self.max_k).expand(lengths.shape[0], -1)
        count = torch.log2(lengths.float()).clamp(1.0, float(self.max_k))  # log2 0 = -inf → 1
        return k < count.unsqueeze(1)

    def forward(self, values: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, max_k, high_dim)`` interests (zeros where masked) and their ``(B, max_k)`` bool mask.

        Args:
            values (torch.Tensor): ``(T, input_dim)`` the items, back to back.
            offsets (torch.Tensor): ``(B + 1,)`` int64 row offsets.
        """
        items, seq_mask, lengths = padded_history(values, offsets, self.max_seq_len)
        caps_mask = self.interest_mask(lengths)
        low = items @ self.bilinear  # (B, S, H); padded items stay 0
        low_fixed = low.detach()
        low_norm = F.normalize(low_fixed, p=2.0, dim=-1)
        width = items.shape[1]
        logits = self.routing_logits[:width].unsqueeze(0).expand(items.shape[0], -1, -1)
        closed = ~caps_mask.unsqueeze(1)  # (B, 1, K)
        keep = seq_mask.unsqueeze(2).to(low.dtype)  # (B, S, 1)
        high = low.new_zeros(items.shape[0], self.max_k, self.high_dim)
        for it in range(self.num_iters):
            weights = torch.softmax((logits * self.scale).masked_fill(closed, float("-inf")), dim=2) * keep
            if it + 1 < self.num_iters:
                high = weights.transpose(1, 2) @ low_fixed  # (B, K, H)
                logits = weights + low_norm @ high.transpose(1, 2)  # TorchEasyRec's: weights + agreement
            else:
                high = squash(weights.transpose(1, 2) @ low, self.squash_pow)
        return high * caps_mask.unsqueeze(2).to(high.dtype), caps_mask
