"""DIN target attention over jagged histories (real items only), its padded reference, and mean pooling.

Every op here is plain torch (no fbgemm, no torchrec) and free of data-dependent Python control flow,
so the dense part of a model can be exported with ``torch.export`` / ``torch.onnx.export`` at dynamic
batch size ``B`` and history value count ``T``.

A history is given as ``values (T, D)`` (all rows' items back to back) and ``offsets (B + 1,)``
(row ``b`` owns ``values[offsets[b]:offsets[b + 1]]``), exactly what an EmbeddingCollection lookup of
a jagged KeyedJaggedTensor key yields.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recpipe.models.blocks.din_shared import shared_history_attention
from recpipe.models.blocks.mlp import MLP

# TorchEasyRec's DIN mask value for padded positions.
PAD_MASK_VALUE = float(-(2**31) + 1)


def segment_ids(offsets: torch.Tensor, num_values: int | torch.SymInt) -> torch.Tensor:
    """Row index of every jagged value: ``(T,)`` int64, ``[0, 0, 0, 2]`` for offsets ``[0, 3, 3, 4]``.

    Computed as a cumulative count of row ends (one scatter-add and one cumsum) rather than
    ``repeat_interleave``: the same cost, and it exports to ONNX at dynamic ``T``.

    Args:
        offsets (torch.Tensor): ``(B + 1,)`` integer row offsets, ``offsets[0] == 0``.
        num_values (int): ``T == offsets[-1]``, passed so the output size is known without a sync.
    """
    ends = offsets[1:].long()
    marks = torch.zeros(num_values + 1, dtype=torch.long, device=offsets.device)
    marks = marks.index_add(0, ends, torch.ones_like(ends))
    return marks.cumsum(0)[:num_values]


def _attention_layers(
    dim: int, attn_hidden_units: list[int], activation: str, device: torch.device | None
) -> tuple[MLP, nn.Linear]:
    # Shared by DinAttention and PaddedDinAttention so their state_dicts are interchangeable.
    attn_mlp = MLP(4 * dim, attn_hidden_units, activation=activation, device=device)
    attn_out = nn.Linear(attn_mlp.out_features, 1, device=device)
    return attn_mlp, attn_out


# The most elements (items x (H₁ + 2·D), 512 MB of float32) of the first layer's inputs and outputs the chunked
# attention keeps from its forward for its backward; above it they are recomputed chunk by chunk (one GEMM more).
KEEP_FIRST_LAYER = 1 << 27

# Items per chunk of the chunked ReLU attention: its (chunk, 256) activations and their gradients, split over
# two threads, fit their cores' 2 MB L2.
SCORE_CHUNK = 4096


def _item_inputs(
    buf: torch.Tensor, query: torch.Tensor, values: torch.Tensor, seg: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[s, q⊙s]`` of a chunk of items written into ``buf`` (``(≥ n, 2·D)``), and the gathered ``q`` ``(n, D)``."""
    n, dim = values.shape
    x = buf[:n]
    q_t = query.index_select(0, seg)
    x[:, :dim].copy_(values)
    # A contiguous product then a strided copy: a strided ``out=`` is several times slower.
    x[:, dim:].copy_(q_t * values)
    return x, q_t


def _first_hidden(
    out: torch.Tensor, per_row: torch.Tensor, x: torch.Tensor, seg: torch.Tensor, w_items: torch.Tensor
) -> torch.Tensor:
    """The first layer's post-ReLU output of a chunk, written into ``out``: ``relu(per_row[seg] + x·w_itemsᵀ)``."""
    h = torch.index_select(per_row, 0, seg, out=out)
    return h.addmm_(x, w_items.t()).relu_()


class _ReluAttention(torch.autograd.Function):
    """DIN attention of a ReLU attention MLP, scored, weighted and pooled a chunk of items at a time.

    Inputs: ``per_row`` ``(B, H₁)`` (the first layer's query term, bias included), ``query``, ``values``,
    ``seg``, ``w_items`` ``(H₁, 2·D)`` (the first layer's weight over ``[s, q⊙s]``), ``chunk``, ``softmax``
    (a softmax over each row's items, else a sigmoid per item), then the later Linears' ``weight, bias`` pairs,
    the score layer's last. Returns the ``(B, D)`` pooled histories (the inputs' dtype).

    Autograd through the plain ops writes every ``(T, H)`` intermediate (the gathered per-row term, the
    ``[s, q⊙s]`` input, each pre- and post-ReLU activation, each gradient) to memory and reads it back op
    by op, and so does the weighting and pooling for every ``(T, D)`` one (the weighted items, the gathered
    output gradient, its products with the items, the two gradients of the items added). Here each chunk's
    activations and gradients stay in cache from one GEMM to the next (bias, ReLU and its mask applied in
    place or in one pass), and the backward of the weighting and pooling is folded into the same chunks:
    with ``a_t`` item ``t``'s weight and ``g_b`` its row's output gradient, the item gets ``a_t·g_b`` and its
    score ``a_t·(⟨g_b, s_t⟩ − ⟨g_b, out_b⟩)`` (softmax) or ``a_t·(1 − a_t)·⟨g_b, s_t⟩`` (sigmoid). The backward
    reads the forward's post-ReLU outputs of every layer, the first layer's inputs ``[s, q⊙s]`` and the weights
    ``(T,)``; where the first layer's inputs and outputs (the widest: ``(T, H₁ + 2·D)``) would pass
    :data:`KEEP_FIRST_LAYER` elements they are recomputed chunk by chunk there instead (its GEMM once more). Kept,
    they save that GEMM and its gathers: one thread, MLP 256-64, batch 1024, 12.9 → 11.2 ms forward+backward at
    4 items a row, 121 → 114 ms at 40.
    """

    @staticmethod
    def forward(ctx, per_row, query, values, seg, w_items, chunk, softmax, *layers):  # noqa: ANN001, ANN205
        with torch.autocast("cpu", enabled=False):
            return _ReluAttention._forward(ctx, per_row, query, values, seg, w_items, chunk, softmax, *layers)

    @staticmethod
    def _forward(ctx, per_row, query, values, seg, w_items, chunk, softmax, *layers):  # noqa: ANN001, ANN205
        total, batch = values.shape[0], query.shape[0]
        kept = [w_items.new_empty(total, w.shape[0]) for w in layers[0:-2:2]]
        scores = w_items.new_empty(total, 1)
        # The first layer's inputs and outputs for every item (kept for the backward), or one chunk's (recomputed).
        keep = total * sum(w_items.shape) <= KEEP_FIRST_LAYER
        rows = total if keep else min(chunk, total)
        buf, first = w_items.new_empty(rows, w_items.shape[1]), w_items.new_empty(rows, w_items.shape[0])
        for start in range(0, total, chunk):
            end = min(start + chunk, total)
            at = slice(start, end) if keep else slice(0, end - start)
            x, _ = _item_inputs(buf[at], query, values[start:end], seg[start:end])
            h = _first_hidden(first[at], per_row, x, seg[start:end], w_items)
            for i, out in enumerate(kept):
                h = torch.addmm(layers[2 * i + 1], h, layers[2 * i].t(), out=out[start:end]).relu_()
            torch.addmm(layers[-1], h, layers[-2].t(), out=scores[start:end])
        # The weights in the items' dtype (float32) whatever the GEMMs' (bfloat16 under autocast).
        weights = scores.squeeze(1).to(values.dtype)
        if softmax:
            # Shifted by the row max (a constant per row); a non-empty row's sum is >= 1, an empty row has none.
            row_max = torch.full((batch,), float("-inf"), dtype=values.dtype, device=values.device)
            row_max = row_max.scatter_reduce(0, seg, weights, reduce="amax", include_self=True)
            weights = weights.sub_(row_max.index_select(0, seg)).exp_()
            denom = torch.zeros(batch, dtype=values.dtype, device=values.device).index_add_(0, seg, weights)
            weights.div_(denom.index_select(0, seg))
        else:
            weights = weights.sigmoid_()
        pooled = torch.zeros(batch, values.shape[1], dtype=values.dtype, device=values.device)
        for start in range(0, total, chunk):
            end = min(start + chunk, total)
            pooled.index_add_(0, seg[start:end], values[start:end] * weights[start:end].unsqueeze(1))
        ctx.chunk, ctx.softmax, ctx.num_layers = chunk, softmax, len(layers)
        first_layer = (buf, first) if keep else (None, None)
        ctx.save_for_backward(
            per_row, query, values, seg, w_items, weights, pooled, *first_layer, *layers, *kept
        )
        return pooled

    @staticmethod
    def backward(ctx, grad_pooled):  # noqa: ANN001, ANN205
        with torch.autocast("cpu", enabled=False):
            return _ReluAttention._backward(ctx, grad_pooled)

    @staticmethod
    def _backward(ctx, grad_pooled):  # noqa: ANN001, ANN205
        per_row, query, values, seg, w_items, weights, pooled, kept_x, kept_first, *rest = ctx.saved_tensors
        layers, kept = rest[: ctx.num_layers], rest[ctx.num_layers :]
        wts, biases = layers[0::2], layers[1::2]
        # Sums over chunks (the parameters' and the per-row gradients) accumulate in the inputs' dtype
        # (float32) whatever the GEMMs' (bfloat16 under autocast): one rounding per chunk, not per added chunk.
        acc = values.dtype
        grad_w = [torch.zeros_like(w, dtype=acc) for w in wts]
        grad_b = [torch.zeros_like(b, dtype=acc) for b in biases]
        grad_per_row = torch.zeros_like(per_row, dtype=acc)
        grad_w_items = torch.zeros_like(w_items, dtype=acc)
        grad_query = torch.zeros_like(query, dtype=acc)
        grad_values = torch.empty_like(values)
        grad_pooled = grad_pooled.to(acc).contiguous()
        # ⟨g_b, out_b⟩: the softmax's per-row centre of the items' ⟨g_b, s_t⟩.
        centre = (grad_pooled * pooled).sum(1) if ctx.softmax else None
        same = acc == w_items.dtype
        total, dim, chunk = values.shape[0], values.shape[1], ctx.chunk
        if kept_first is None:
            rows = min(chunk, total)
            buf, first = w_items.new_empty(rows, w_items.shape[1]), w_items.new_empty(rows, w_items.shape[0])
        for start in range(0, total, chunk):
            end = min(start + chunk, total)
            s, v, a = seg[start:end], values[start:end], weights[start:end]
            # The pooling's backward: the items' gradient through their weights, and the scores' gradient.
            g_items = grad_pooled.index_select(0, s)
            torch.mul(g_items, a.unsqueeze(1), out=grad_values[start:end])
            d = g_items.mul_(v).sum(1)
            d = d.sub_(centre.index_select(0, s)).mul_(a) if centre is not None else d.mul_(a * (1 - a))
            d = d.to(w_items.dtype).unsqueeze(1)
            if kept_first is None:
                x, q_t = _item_inputs(buf, query, v, s)
                acts = [_first_hidden(first[: end - start], per_row, x, s, w_items)]
            else:
                x, q_t = kept_x[start:end], query.index_select(0, s)
                acts = [kept_first[start:end]]
            acts += [k[start:end] for k in kept]
            for i in range(len(acts) - 1, -1, -1):
                if same:
                    grad_w[i].addmm_(d.t(), acts[i])
                else:
                    grad_w[i].add_(torch.mm(d.t(), acts[i]))
                grad_b[i].add_(d.sum(0, dtype=acc))
                # ReLU's backward in one vectorized pass (masked_fill_ with a computed mask is ~15x slower).
                d = torch.ops.aten.threshold_backward(torch.mm(d, wts[i]), acts[i], 0.0)
            if same:
                grad_w_items.addmm_(d.t(), x)
            else:
                grad_w_items.add_(torch.mm(d.t(), x))
            grad_per_row.index_add_(0, s, d.to(acc))
            dx = torch.mm(d, w_items).to(acc)
            grad_values[start:end].add_(dx[:, :dim]).addcmul_(dx[:, dim:], q_t)
            # A contiguous product: index_add_ of a strided (n, D) source is several times slower.
            grad_query.index_add_(0, s, torch.mul(dx[:, dim:], v))
        params = [g for pair in zip(grad_w, grad_b, strict=True) for g in pair]
        params = [g.to(p.dtype) for g, p in zip(params, layers, strict=True)]
        return (
            grad_per_row.to(per_row.dtype), grad_query.to(query.dtype), grad_values, None,
            grad_w_items.to(w_items.dtype), None, None, *params,
        )  # fmt: skip


FIRST_LAYERS = ("auto", "folded", "per_row", "accumulate", "concat")
# How item scores become weights: a softmax over the row's items (TorchEasyRec's DINEncoder), or each
# score through a sigmoid on its own (unnormalized, as the DIN paper argues in its §4.3: the sum of the
# weights then tells how strongly the history matches the candidate).
WEIGHTINGS = ("softmax", "sigmoid")


class DinAttention(nn.Module):
    """DIN target attention computed only over each row's real history items.

    ``score = Linear(MLP([q, s, q − s, q ⊙ s]))`` per item, turned into weights by ``weighting``:
    a softmax over the row's items (default), or ``sigmoid(score)`` per item (unnormalized: a history
    with many items that match the candidate weighs more than one with a single weak match, which a
    softmax cannot express). Output: the weighted sum of the items. An empty history gives a zero vector.

    The first Linear ``W·[q, s, q−s, q⊙s] + b`` (``W = [W_q | W_s | W_d | W_p]``) equals
    ``(W_q + W_d)·q + (W_s − W_d)·s + W_p·(q⊙s) + b``, which ``first_layer`` evaluates as:

    * ``"folded"``: one matmul over ``[q, s, q⊙s]`` per item (``3·D`` inputs instead of ``4·D``);
    * ``"per_row"``: ``(W_q + W_d)·q + b`` once per row, gathered to the items, plus a matmul over
      ``[s, q⊙s]`` per item (``2·D`` inputs, but one more ``(T, H)`` gather and add);
    * ``"accumulate"``: ``per_row``'s gathered per-row term, into which ``(W_s − W_d)·s`` and ``W_p·(q⊙s)`` are
      added in place (two GEMMs of ``D`` inputs): no ``(T, 2·D)`` or ``(T, 3·D)`` concatenation is built;
    * ``"concat"``: the literal ``[q, s, q−s, q⊙s]`` concatenation;
    * ``"auto"`` (default): ``per_row`` while autograd records (training), ``accumulate`` otherwise.

    All use the unsplit layer's parameters, so weights load into :class:`PaddedDinAttention`
    unchanged. ``benchmarks/din_attention.py`` compares them: on CPU the per-row split saves ~10% of
    forward+backward (the backward GEMMs shrink with the input width); without autograd the concatenations
    dominate at a small attention MLP (one user × 500 candidates of 68 items, MLP 64-32, one thread:
    ``accumulate`` 12-17 ms, ``folded`` 38-54 ms, its ``(T, 3·D)`` input a fresh allocation every call),
    hence ``auto``.

    Args:
        dim (int): ``D``, width of the query and of every history item.
        attn_hidden_units (list[int]): attention MLP widths (e.g. ``[256, 64]``); a Linear to one score follows.
        activation (str): attention MLP activation (``relu``, ``gelu``, ``silu``, ``sigmoid``, ``dice``).
        first_layer (str): ``"auto"``, ``"folded"``, ``"per_row"`` or ``"concat"`` (same result, different speed).
        weighting (str): ``"softmax"`` or ``"sigmoid"`` (see above).
        device (torch.device | None): parameter device.

    Example::

        # B = 3 rows, D = 48; histories of 2, 0 and 1 items -> T = 3 values
        attn = DinAttention(48, [256, 64])
        query = torch.randn(3, 48)                       # (B, D)
        values = torch.randn(3, 48)                      # (T, D)
        offsets = torch.tensor([0, 2, 2, 3])             # (B + 1,)
        attn(query, values, offsets).shape               # (B, D); row 1 is all zeros
    """

    def __init__(
        self,
        dim: int,
        attn_hidden_units: list[int],
        activation: str = "relu",
        first_layer: str = "auto",
        weighting: str = "softmax",
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if first_layer not in FIRST_LAYERS:
            raise ValueError(f"unknown first_layer {first_layer!r}; allowed: {list(FIRST_LAYERS)}")
        self.first_layer = first_layer
        _init_attention(self, dim, attn_hidden_units, activation, weighting, device)
        self._relu_mlp = all(
            isinstance(layer.act, nn.ReLU) and layer.norm is None and layer.dropout is None
            for layer in self.attn_mlp.layers
        )

    @property
    def out_features(self) -> int:
        return self.dim

    def _use_chunked(self, device_type: str = "cpu") -> bool:
        """Whether ``auto`` takes the chunked ReLU attention (:class:`_ReluAttention`): eager training of a plain
        ReLU MLP.

        Under CPU autocast to bfloat16 (``train.mixed_precision: bf16``) its GEMMs run in bfloat16 (the CPU's
        bf16 matrix units); the sums over chunks, the weighting and the pooling stay float32. Traced, scripted and
        exported graphs, other autocast types and devices, and the other activations take the plain ops.
        """
        if torch.jit.is_scripting() or torch.jit.is_tracing() or torch.compiler.is_compiling():
            return False
        if torch.is_autocast_enabled(device_type) and not (
            device_type == "cpu" and torch.get_autocast_dtype("cpu") == torch.bfloat16
        ):
            return False
        return self.first_layer == "auto" and self._relu_mlp and torch.is_grad_enabled()

    @torch.jit.unused
    def _chunked_attention(
        self, query: torch.Tensor, values: torch.Tensor, seg: torch.Tensor
    ) -> torch.Tensor:
        """``(B, D)`` pooled histories through :class:`_ReluAttention`, the first layer split as ``per_row``
        splits it."""
        first = self.attn_mlp.layers[0].linear
        w_row, w_items = _folded_first(first.weight, self.dim)
        per_row = F.linear(query, w_row, first.bias)  # (B, H); under autocast its dtype
        layers = [p for layer in self.attn_mlp.layers[1:] for p in (layer.linear.weight, layer.linear.bias)]
        layers += [self.attn_out.weight, self.attn_out.bias]
        # The GEMMs' dtype (bfloat16 under autocast); the query and items stay float32, as the plain ops keep
        # them (the casts are autograd ops: the float32 parameters get float32 gradients).
        cast = [t.to(per_row.dtype) for t in (w_items, *layers)]
        softmax = self.weighting == "softmax"
        return _ReluAttention.apply(per_row, query, values, seg, cast[0], SCORE_CHUNK, softmax, *cast[1:])

    def _hidden(self, query: torch.Tensor, values: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
        """Attention MLP output for every item, ``(T, H_last)``."""
        first = self.attn_mlp.layers[0]
        weight, bias = first.linear.weight, first.linear.bias
        q_t = query.index_select(0, seg)  # (T, D)
        qs = q_t * values
        mode = self.first_layer
        if mode == "auto":
            # A trace-time constant under torch.export, not data-dependent control flow.
            mode = "per_row" if torch.is_grad_enabled() else "accumulate"
        if mode == "concat":
            h = F.linear(torch.cat([q_t, values, q_t - values, qs], dim=1), weight, bias)
        else:
            if mode == "accumulate":
                w_q, w_s, w_d, w_p = weight.split(self.dim, dim=1)
                h = F.linear(query, w_q + w_d, bias).index_select(0, seg)  # (T, H), a fresh tensor
                # In-place GEMMs are not autocast: under mixed precision h is the autocast dtype, the rest not.
                dt = h.dtype
                h.addmm_(values.to(dt), (w_s - w_d).t().to(dt)).addmm_(qs.to(dt), w_p.t().to(dt))
            else:
                w_row, w_items = _folded_first(weight, self.dim)
                if mode == "folded":
                    h = F.linear(torch.cat([q_t, values, qs], dim=1), torch.cat([w_row, w_items], 1), bias)
                else:
                    # The gathered per-row term is the GEMM's accumulator: no separate (T, H) add.
                    h = torch.addmm(
                        F.linear(query, w_row, bias).index_select(0, seg),
                        torch.cat([values, qs], dim=1),
                        w_items.t(),
                    )
        h = first.post(h)
        for layer in self.attn_mlp.layers[1:]:
            h = layer(h)
        return h

    def forward(self, query: torch.Tensor, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """
        Args:
            query (torch.Tensor): ``(B, D)`` target item embedding.
            values (torch.Tensor): ``(T, D)`` history item embeddings, rows back to back.
            offsets (torch.Tensor): ``(B + 1,)`` int64 row offsets into ``values``.

        Returns:
            torch.Tensor: ``(B, D)`` attention-pooled history.
        """
        batch = query.shape[0]
        seg = segment_ids(offsets, values.shape[0])
        if self._use_chunked(values.device.type):
            return self._chunked_attention(query, values, seg)
        scores = self.attn_out(self._hidden(query, values, seg)).squeeze(-1)  # (T,)
        if self.weighting == "sigmoid":
            weights = torch.sigmoid(scores).unsqueeze(1)
            return torch.zeros_like(query).index_add(0, seg, weights * values)
        # Segment softmax: shift by the row max (a constant per row, so it carries no gradient).
        row_max = torch.full((batch,), float("-inf"), dtype=scores.dtype, device=scores.device)
        row_max = row_max.scatter_reduce(0, seg, scores.detach(), reduce="amax", include_self=True)
        expd = torch.exp(scores - row_max.index_select(0, seg))  # (T,), the row max item gives 1
        denom = torch.zeros(batch, dtype=scores.dtype, device=scores.device).index_add(0, seg, expd)
        weighted = torch.zeros_like(query).index_add(0, seg, expd.unsqueeze(1) * values)
        # A non-empty row has denom >= 1; an empty row has 0 / 1 = 0.
        denom = torch.where(denom > 0, denom, torch.ones_like(denom))
        return weighted / denom.unsqueeze(1)

    # The dtype of forward_shared's GEMMs (None: the inputs'); the RTP export sets it while it traces its bf16
    # shared-history program (recpipe.export.shared.gemm_dtype). Not a parameter or buffer: no state_dict entry.
    shared_gemm_dtype: torch.dtype | None = None

    def forward_shared(self, query: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``(B, D)``: every query against ONE history ``values (T, D)``, as :meth:`forward` over that history
        tiled B times (:mod:`~recpipe.models.blocks.din_shared`: one user × B candidates, for inference)."""
        return shared_history_attention(
            self.attn_mlp, self.attn_out, self.weighting, query, values, self.shared_gemm_dtype
        )


class PaddedDinAttention(nn.Module):
    """Reference DIN attention in the padded formulation (TorchEasyRec's ``DINEncoder``).

    Histories are padded to ``max_length`` items, the attention MLP runs on every position, padded
    scores are masked with ``−2³¹ + 1`` before the softmax. Same parameters as :class:`DinAttention`.
    Items past ``max_length`` are dropped (FG already truncates histories to it). With the ``dice``
    activation the batch statistics here include padded positions, so in training mode the two
    formulations differ; with the other activations they compute the same function.

    Args:
        dim (int): ``D``, width of the query and of every history item.
        attn_hidden_units (list[int]): attention MLP widths; a Linear to one score follows.
        activation (str): attention MLP activation.
        max_length (int): ``L``, the padded history length (the sequence's ``max_length``).
        weighting (str): ``"softmax"`` (masked with ``−2³¹ + 1``) or ``"sigmoid"`` (padded positions get weight 0).
        device (torch.device | None): parameter device.

    Example::

        attn = PaddedDinAttention(48, [256, 64], max_length=100)
        attn(torch.randn(3, 48), torch.randn(3, 48), torch.tensor([0, 2, 2, 3])).shape  # (3, 48)
        # internally: (B, L, 4·D) = (3, 100, 192) through the MLP
    """

    def __init__(
        self,
        dim: int,
        attn_hidden_units: list[int],
        activation: str = "relu",
        max_length: int = 100,
        weighting: str = "softmax",
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.max_length = max_length
        _init_attention(self, dim, attn_hidden_units, activation, weighting, device)

    shared_gemm_dtype: torch.dtype | None = None  # as DinAttention's

    @property
    def out_features(self) -> int:
        return self.dim

    def forward(self, query: torch.Tensor, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Same contract as :meth:`DinAttention.forward`."""
        batch, dim, length = query.shape[0], self.dim, self.max_length
        padded = pad_jagged(values, offsets, length)  # (B, L, D)
        lengths = offsets[1:] - offsets[:-1]
        q = query.unsqueeze(1).expand(batch, length, dim)
        h = self.attn_mlp(torch.cat([q, padded, q - padded, q * padded], dim=-1))
        scores = self.attn_out(h).squeeze(-1)  # (B, L)
        mask = torch.arange(length, device=query.device).unsqueeze(0) < lengths.unsqueeze(1)
        if self.weighting == "sigmoid":
            weights = torch.where(mask, torch.sigmoid(scores), torch.zeros_like(scores))
            return torch.bmm(weights.unsqueeze(1), padded).squeeze(1)
        scores = torch.where(mask, scores, torch.full_like(scores, PAD_MASK_VALUE))
        weights = torch.softmax(scores, dim=1)
        return torch.bmm(weights.unsqueeze(1), padded).squeeze(1)

    def forward_shared(self, query: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """As :meth:`DinAttention.forward_shared`, the history truncated to ``max_length`` items as here (a padded
        position's masked score weighs exactly 0, so the real items' attention is the same function)."""
        values = values[: self.max_length]
        return shared_history_attention(
            self.attn_mlp, self.attn_out, self.weighting, query, values, self.shared_gemm_dtype
        )


def _folded_first(weight: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first layer's weight over ``[q, s, q − s, q⊙s]`` folded, since ``q − s`` is linear in both:
    ``W_q + W_d`` ``(H, D)`` over the row's query and ``[W_s − W_d, W_p]`` ``(H, 2·D)`` over each item's
    ``[s, q⊙s]``."""
    w_q, w_s, w_d, w_p = weight.split(dim, dim=1)
    return w_q + w_d, torch.cat([w_s - w_d, w_p], 1)


def _init_attention(
    module: nn.Module,
    dim: int,
    attn_hidden_units: list[int],
    activation: str,
    weighting: str,
    device: torch.device | None,
) -> None:
    """The settings and layers the jagged and the padded attention share: ``dim``, ``weighting`` (checked),
    ``attn_mlp`` and ``attn_out``."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown attention weighting {weighting!r}; allowed: {list(WEIGHTINGS)}")
    module.dim = dim
    module.weighting = weighting
    module.attn_mlp, module.attn_out = _attention_layers(dim, attn_hidden_units, activation, device)


def pad_jagged(values: torch.Tensor, offsets: torch.Tensor, max_length: int) -> torch.Tensor:
    """``to_padded_dense`` in plain torch: ``(T, D)`` jagged rows → ``(B, L, D)`` zero-padded, truncated.

    Args:
        values (torch.Tensor): ``(T, D)`` row values back to back.
        offsets (torch.Tensor): ``(B + 1,)`` row offsets.
        max_length (int): ``L``.
    """
    batch = offsets.shape[0] - 1
    dim = values.shape[1]
    seg = segment_ids(offsets, values.shape[0])
    pos = torch.arange(values.shape[0], device=values.device) - offsets[:-1].index_select(0, seg)
    # Items past max_length land in one scratch row that is sliced off.
    dump = batch * max_length
    index = torch.where(pos < max_length, seg * max_length + pos, torch.full_like(pos, dump))
    out = torch.zeros(dump + 1, dim, dtype=values.dtype, device=values.device).index_copy(0, index, values)
    return out[:dump].view(batch, max_length, dim)


class MeanPoolSequence(nn.Module):
    """Mean of each row's history items (no attention, no parameters): the quality-ablation baseline.

    Args:
        dim (int): ``D``, width of every history item.

    Example::

        MeanPoolSequence(48)(torch.randn(3, 48), torch.randn(3, 48), torch.tensor([0, 2, 2, 3])).shape
        # (3, 48); row 1 (empty) is all zeros; the query is ignored
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    @property
    def out_features(self) -> int:
        return self.dim

    def forward(self, query: torch.Tensor, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        seg = segment_ids(offsets, values.shape[0])
        total = torch.zeros(query.shape[0], values.shape[1], dtype=values.dtype, device=values.device)
        total = total.index_add(0, seg, values)
        lengths = (offsets[1:] - offsets[:-1]).clamp_min(1).to(values.dtype)
        return total / lengths.unsqueeze(1)

    def forward_shared(self, query: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """The mean of ONE history ``values (T, D)`` for each of the B queries (zeros for an empty one)."""
        count = torch.full((), values.shape[0], dtype=values.dtype, device=values.device).clamp_min(1)
        mean = values.sum(0) / count
        return mean.unsqueeze(0).expand(query.shape[0], -1).contiguous()
