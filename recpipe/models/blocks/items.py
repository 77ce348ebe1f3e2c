"""Several ids per history item (TorchEasyRec's ``value_dim: 0`` history): the item's embedding is the sum or
mean of its ids' rows (tzrec/modules/embedding.py: ``segment_reduce`` by the item's id count, a mean's empty
item ``nan_to_num`` → 0). Plain torch (``index_add`` over ``repeat_interleave``), so the model, the table lookup
of every export backend, a scripted module and ``torch.export`` pool one way.

Example::

    rows = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]])    # three ids' embeddings (N, D)
    pool_items(rows, torch.tensor([2, 0, 1]), mean=True)        # [[2., 1.], [0., 0.], [5., 5.]]  (items, D)
"""

from __future__ import annotations

import torch


def pool_items(rows: torch.Tensor, per_item: torch.Tensor, mean: bool) -> torch.Tensor:
    """Embeddings of the ids ``(N, D)`` → one per item ``(I, D)``, ``per_item`` ``(I,)`` ids each (summing to N);
    ``mean`` divides by the count (an item of no ids is zeros either way)."""
    counts = per_item.to(torch.int64)
    item_of_id = torch.repeat_interleave(
        torch.arange(counts.size(0), dtype=torch.int64, device=rows.device), counts, output_size=rows.size(0)
    )
    out = torch.zeros(counts.size(0), rows.size(1), dtype=rows.dtype, device=rows.device)
    out = out.index_add(0, item_of_id, rows)
    if mean:
        out = out / counts.clamp_min(1).to(rows.dtype).unsqueeze(1)
    return out
