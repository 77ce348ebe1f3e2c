"""Several ids per history item: :func:`pool_items` by hand, and an EmbeddingGroup over FG's multi-value
history key giving each item the sum / mean of its ids' table rows, jagged by items."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.features.fg import FeatureGenerator
from recpipe.models.blocks.embedding import EmbeddingGroup
from recpipe.models.blocks.items import pool_items
from tests.features.test_kind_sequence_multi_value import grouped


def test_pool_items_by_hand() -> None:
    rows = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]])
    counts = torch.tensor([2, 0, 1])
    torch.testing.assert_close(
        pool_items(rows, counts, mean=False), torch.tensor([[4.0, 2.0], [0, 0], [5, 5]])
    )
    torch.testing.assert_close(
        pool_items(rows, counts, mean=True), torch.tensor([[2.0, 1.0], [0, 0], [5, 5]])
    )
    assert pool_items(rows[:0], torch.zeros(0, dtype=torch.int64), mean=True).shape == (0, 2)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_embedding_group_pools_each_item_of_a_multi_value_history(pooling: str) -> None:
    torch.manual_seed(0)
    s = grouped(pooling=pooling)
    column = ["1\x0311\x1d12;2\x0313;3\x03", None, "4\x031;5\x032\x1d3\x1d4"]
    out = FeatureGenerator(s, with_labels=False)(pa.table({"item_id": [1, 2, 3], "clicks": column}))
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=s.sparse_keys(),
        values=torch.from_numpy(np.concatenate(out.values)),
        lengths=torch.from_numpy(np.concatenate(out.lengths)),
    )
    group = EmbeddingGroup(s.tables(), ["item_id"], ["clicks__item_id", "clicks__tags"], dict(s.pooling()))
    got = group(kjt)
    table = group.ec.embeddings["tags"].weight.detach()
    items = [[1, 2], [3], [], [1], [2, 3, 4]]  # ids mod 10, item by item
    want = torch.stack(
        [
            table[i].sum(0) / (max(len(i), 1) if pooling == "mean" else 1) if i else torch.zeros(4)
            for i in items
        ]
    )
    torch.testing.assert_close(got.values["clicks__tags"].detach(), want)
    assert got.offsets["clicks__tags"].tolist() == [0, 3, 3, 5] == got.offsets["clicks__item_id"].tolist()
    assert got.values["clicks__item_id"].shape == (5, 4)
