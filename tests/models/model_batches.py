"""Random-but-learnable Batches built directly with KeyedJaggedTensor (no FG)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.features.spec import FeatureSpec
from recpipe.models.train_model import TrainModel


def make_kjt(keys: list[str], per_key: dict[str, list[list[int]]]) -> KeyedJaggedTensor:
    """A KJT from ``{key: [row values, ...]}`` in ``keys`` order."""
    values, lengths = [], []
    for k in keys:
        for row in per_key[k]:
            values.extend(row)
            lengths.append(len(row))
    return KeyedJaggedTensor(
        keys=keys,
        values=torch.tensor(values, dtype=torch.long),
        lengths=torch.tensor(lengths, dtype=torch.long),
    )


def din_batch(spec: FeatureSpec, batch_size: int, gen: torch.Generator, max_history: int = 30) -> Batch:
    """Taobao-schema rows whose label is learnable: click iff the target's category is in the history.

    Items come from a catalog of 64 (item i: adgroup i, cate i % 12, brand i % 20); every other id
    feature is a small random id; histories have 0..max_history items.
    """
    keys = spec.sparse_keys()
    rows: dict[str, list[list[int]]] = {k: [] for k in keys}
    labels = []
    for _ in range(batch_size):
        target = int(torch.randint(64, (1,), generator=gen))
        n = int(torch.randint(max_history + 1, (1,), generator=gen))
        hist = torch.randint(64, (n,), generator=gen).tolist()
        for k in keys:
            f = spec.feature(k)
            if f.sequence is not None:
                sub = k.split("__", 1)[1]
                rows[k].append([_item_id(i, sub) for i in hist])
            elif k in ("adgroup_id", "cate_id", "brand"):
                rows[k].append([_item_id(target, k)])
            else:
                rows[k].append([int(torch.randint(min(f.mapping.size, 7), (1,), generator=gen))])
        labels.append(float(_item_id(target, "cate_id") in {_item_id(i, "cate_id") for i in hist}))
    return Batch(
        dense=torch.zeros(batch_size, spec.dense_dim),
        sparse=make_kjt(keys, rows),
        labels=torch.tensor(labels),
    )


def _item_id(item: int, sub: str) -> int:
    return {"adgroup_id": item, "cate_id": item % 12, "brand": item % 20}[sub]


def dlrm_batch(spec: FeatureSpec, batch_size: int, gen: torch.Generator) -> Batch:
    """Criteo-schema rows with a learnable label: ``C1 ∈ [0, 8)`` is clicked iff its id is even,
    shifted by the sign of ``I1``; every categorical has 1 id (0 ids for C26 in every 5th row)."""
    keys = spec.sparse_keys()
    ids = torch.randint(8, (len(keys), batch_size), generator=gen)
    dense = torch.randn(batch_size, spec.dense_dim, generator=gen)
    rows = {}
    for i, k in enumerate(keys):
        rows[k] = [[int(v)] for v in ids[i]]
        if k == "C26":
            rows[k] = [r if j % 5 else [] for j, r in enumerate(rows[k])]
    labels = ((ids[0] % 2 == 0) ^ (dense[:, 0] > 1.0)).float()
    return Batch(dense=dense, sparse=make_kjt(keys, rows), labels=labels)


def capped_spec(spec: FeatureSpec, max_rows: int = 1000) -> FeatureSpec:
    """The same FeatureSpec (keys, groups, dims, shared tables) with every table capped at ``max_rows``
    rows: training tests touch ids < 64, and a dense optimizer step over 50M rows costs ~0.5 s."""
    sparse = [
        dataclasses.replace(f, mapping=dataclasses.replace(f.mapping, size=min(f.mapping.size, max_rows)))
        for f in spec.sparse
    ]
    return dataclasses.replace(spec, sparse=sparse)


def train_losses(
    model: torch.nn.Module, batches: list[Batch], steps: int, check_logits: Callable[[torch.Tensor], None]
) -> list[float]:
    """Loss of each of ``steps`` training steps cycling over ``batches`` through :class:`TrainModel`:
    Adam (lr 1e-2) on the dense parameters, Adagrad (lr 0.1) on the tables; ``check_logits`` sees every
    step's logits."""
    train = TrainModel(model)
    sparse = [p for n, p in model.named_parameters() if n.startswith("embeddings.")]
    dense = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")]
    opts = [torch.optim.Adam(dense, lr=1e-2), torch.optim.Adagrad(sparse, lr=0.1)]
    losses = []
    for step in range(steps):
        loss, logits = train(batches[step % len(batches)])
        check_logits(logits)
        for opt in opts:
            opt.zero_grad()
        loss.backward()
        for opt in opts:
            opt.step()
        losses.append(float(loss))
    return losses


def dense_inputs(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]:
    """The positional inputs of ``model``'s dense arch for ``batch``: ``dense``, then each looked-up
    embedding input (detached) in ``model.dense_input_names()`` order."""
    emb = model.sparse_arch(batch.sparse)
    return (batch.dense, *[emb[n].detach() for n in model.dense_input_names()[1:]])
