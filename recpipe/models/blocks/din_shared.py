"""DIN target attention of B candidate queries over ONE shared history (one user × B candidates).

When every candidate has the same ``T`` history items, the jagged attention's ``(B·T, ·)`` gathers and segment
reductions are regular: the items are ``(T, D)``, the item scores ``(B, T)``, the softmax is over a dense axis
and the pooling is one ``(B, T) @ (T, D)`` matmul. The first Linear folds too: it is linear in ``q`` for a fixed
item ``s_t``,

    W·[q, s_t, q − s_t, q⊙s_t] + b = q·(W_q + W_d + W_p·diag(s_t))ᵀ + (W_s − W_d)·s_t + b,

so the whole first layer of every (candidate, item) pair is one ``(B, D + 1) @ (D + 1, T·H)`` GEMM (the per-item
bias a row against a column of ones): no ``q`` gathered to the pairs, no ``q⊙s`` built, no per-row term added. The result is the jagged
attention's over the history tiled B times (:class:`~recpipe.models.blocks.din.DinAttention`), up to float32
rounding (the sums are grouped differently).

Example::

    attn = DinAttention(48, [64, 32])
    query, history = torch.randn(500, 48), torch.randn(68, 48)    # (B, D), (T, D)
    attn.forward_shared(query, history).shape                      # (500, 48)
    # == attn(query, history.repeat(500, 1), torch.arange(501) * 68)

``gemm_dtype=torch.bfloat16`` runs the attention MLP's GEMMs in bfloat16 (a CPU's AMX / avx512_bf16 units: at 500 ×
68 pairs of MLP 64-32, one thread, ~1.4 ms against ~3.2 ms in float32), for a plain ReLU MLP only
(:func:`low_precision_ok`); the weights are built in float32 and cast, the score layer, softmax and pooling stay
float32.
The RTP export traces it as a second program and uses it only where it scores within the export's tolerance
(:mod:`recpipe.export.shared`).
"""

from __future__ import annotations

import torch
from torch import nn

from recpipe.models.blocks.mlp import MLP


def shared_first_layer(
    weight: torch.Tensor,
    bias: torch.Tensor,
    query: torch.Tensor,
    values: torch.Tensor,
    gemm_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The attention MLP's first Linear (before its activation) for every (candidate, item) pair: ``(B, T·H)``,
    pair ``(b, t)`` at columns ``[t·H, (t + 1)·H)``.

    Args:
        weight (torch.Tensor): ``(H, 4·D)``, the Linear over ``[q, s, q − s, q⊙s]``.
        bias (torch.Tensor): ``(H,)``.
        query (torch.Tensor): ``(B, D)`` candidate queries.
        values (torch.Tensor): ``(T, D)`` the one history's items.
        gemm_dtype (torch.dtype | None): the GEMM's dtype (and the output's) when not the inputs' (the weights
            built in the inputs' dtype, then cast).
    """
    dim = values.shape[1]
    items = values.shape[0]
    hidden = weight.shape[0]
    w_q, w_s, w_d, w_p = weight.split(dim, dim=1)
    # (D, T, H): W_q + W_d + W_p·diag(s_t) for every item, the query's weight of each pair.
    per_item_weight = torch.addcmul(
        (w_q + w_d).t().unsqueeze(1), values.t().unsqueeze(2), w_p.t().unsqueeze(1)
    )
    per_item_bias = torch.addmm(bias, values, (w_s - w_d).t())  # (T, H)
    # The bias as one more input row against a column of ones: addmm's broadcast bias is a separate pass over the
    # (B, T·H) output (at 500 × 68 × 64, 8.2 ms against 6.0 for the wider GEMM; one thread).
    weights = torch.cat([per_item_weight, per_item_bias.unsqueeze(0)]).view(dim + 1, items * hidden)
    ones = torch.ones(query.shape[0], 1, dtype=query.dtype, device=query.device)
    rows = torch.cat([query, ones], dim=1)
    if gemm_dtype is not None:
        rows, weights = rows.to(gemm_dtype), weights.to(gemm_dtype)
    return rows @ weights


def low_precision_ok(attn_mlp: MLP) -> bool:
    """Whether :func:`shared_history_attention` can take a ``gemm_dtype``: every layer a Linear then a plain ReLU
    with a bias (no norm, no dropout; the ReLU is applied to the low-precision activations by :func:`relu_low`)."""
    return all(
        isinstance(layer.act, nn.ReLU)
        and layer.norm is None
        and layer.dropout is None
        and layer.linear.bias is not None
        for layer in attn_mlp.layers
    )


def relu_low(h: torch.Tensor) -> torch.Tensor:
    """ReLU of a bfloat16 / float16 tensor in place (returned), through its bits as int16: a negative number (sign
    bit set) is a negative int16, clamped to 0, the bits of +0.0. The same values as ``torch.relu`` (but a NaN with
    the sign bit set gives 0), ~4x faster on CPU, whose bf16 ``relu`` converts each element to float32 and back;
    in place, as ``torch.export`` keeps it, so no second ``(B·T, H)`` buffer is allocated and written."""
    h.view(torch.int16).clamp_min_(0)
    return h


def shared_history_attention(
    attn_mlp: MLP,
    attn_out: nn.Linear,
    weighting: str,
    query: torch.Tensor,
    values: torch.Tensor,
    gemm_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(B, D)``: the DIN attention of ``query (B, D)`` over one history ``values (T, D)`` (an empty one gives
    zeros), with the layers of a :class:`~recpipe.models.blocks.din.DinAttention` (or its padded reference).

    Args:
        attn_mlp (MLP): the attention MLP over ``[q, s, q − s, q⊙s]``.
        attn_out (nn.Linear): its score layer (to one score).
        weighting (str): ``"softmax"`` over the items, or ``"sigmoid"`` per item.
        query (torch.Tensor): ``(B, D)``.
        values (torch.Tensor): ``(T, D)``.
        gemm_dtype (torch.dtype | None): the attention MLP's GEMMs in this dtype (``torch.bfloat16``) instead of
            the inputs'; a plain ReLU MLP only (:func:`low_precision_ok`; ValueError otherwise).
    """
    batch, items = query.shape[0], values.shape[0]
    first = attn_mlp.layers[0]
    if gemm_dtype is not None:
        if not low_precision_ok(attn_mlp):
            raise ValueError("a low-precision shared attention needs a plain ReLU attention MLP")
        h = shared_first_layer(first.linear.weight, first.linear.bias, query, values, gemm_dtype)
        h = relu_low(h.view(batch * items, first.linear.out_features))
        for layer in attn_mlp.layers[1:]:
            w, b = layer.linear.weight, layer.linear.bias
            h = relu_low(torch.addmm(b.to(gemm_dtype), h, w.t().to(gemm_dtype)))
        # The score layer (to one number) in float32 from the low-precision activations: the scores go through
        # exp, so their rounding weighs most (on a 300k-row model's logits: 6.9e-4 with a bf16 score layer alone,
        # 4.2e-4 for bf16 hidden layers with this float32 one, 8.3e-4 for both).
        scores = attn_out(h.to(query.dtype)).view(batch, items)
    else:
        h = shared_first_layer(first.linear.weight, first.linear.bias, query, values)
        # One row per pair for the activation and the later layers (a Dice or a BatchNorm reads (N, H)); explicit
        # sizes, not -1: with no item the tensor is empty and -1 would be ambiguous.
        h = first.post(h.view(batch * items, first.linear.out_features))
        for layer in attn_mlp.layers[1:]:
            h = layer(h)
        scores = attn_out(h).view(batch, items)
    if weighting == "sigmoid":
        weights = torch.sigmoid(scores)
    else:
        # A dense softmax: every candidate has all T items (none padded); over no item it is (B, 0) and the
        # pooled history below is zeros, as the jagged attention gives an empty row.
        weights = torch.softmax(scores, dim=1)
    return weights @ values
