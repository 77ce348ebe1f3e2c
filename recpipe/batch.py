"""The one batch type. Only :func:`to_batch` builds it (from FG output); models, training,
evaluation and export take nothing else."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.features.fg import FGOutput


@dataclass
class Batch:
    """A training/eval batch: dense floats, every id and sequence feature jagged, labels.

    Args:
        dense (torch.Tensor): ``(B, D)`` float32 dense features (``D`` may be 0).
        sparse (KeyedJaggedTensor): one key per FeatureSpec sparse feature, in spec order; single-valued
            id features have length 0 or 1 per row, sequence sub-features their real history length.
        labels (torch.Tensor): ``(B,)`` float32 0/1.
        weights (torch.Tensor | None): ``(B,)`` float32 sample weights.
        groups (torch.Tensor | None): ``(B,)`` int64 GAUC group ids (e.g. user), never fed to the model.

    Example::

        # B = 2, keys [user_id, click_50_seq__cate_id]; row 0 has a 3-item history, row 1 none
        #            row 0        row 1
        # user_id    [7]          [9]
        # seq cate   [4, 4, 11]   []
        sparse = KeyedJaggedTensor(
            keys=["user_id", "click_50_seq__cate_id"],
            values=torch.tensor([7, 9, 4, 4, 11]),
            lengths=torch.tensor([1, 1, 3, 0]),
        )
        batch = Batch(dense=torch.zeros(2, 0), sparse=sparse, labels=torch.tensor([1.0, 0.0]))
    """

    dense: torch.Tensor
    sparse: KeyedJaggedTensor
    labels: torch.Tensor
    weights: torch.Tensor | None = None
    groups: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.labels.shape[0])

    # TorchRec's train pipelines treat a batch as ``Pipelineable``: to / record_stream / pin_memory.
    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device=device, non_blocking=non_blocking)

        return Batch(
            dense=self.dense.to(device=device, non_blocking=non_blocking),
            sparse=self.sparse.to(device=device, non_blocking=non_blocking),
            labels=self.labels.to(device=device, non_blocking=non_blocking),
            weights=mv(self.weights),
            groups=mv(self.groups),
        )

    def record_stream(self, stream: torch.Stream) -> None:
        self.dense.record_stream(stream)
        self.sparse.record_stream(stream)
        self.labels.record_stream(stream)
        for t in (self.weights, self.groups):
            if t is not None:
                t.record_stream(stream)

    def pin_memory(self) -> Batch:
        return Batch(
            dense=self.dense.pin_memory(),
            sparse=self.sparse.pin_memory(),
            labels=self.labels.pin_memory(),
            weights=None if self.weights is None else self.weights.pin_memory(),
            groups=None if self.groups is None else self.groups.pin_memory(),
        )

    def __getstate__(self) -> dict:
        # KJT caches (offsets, length-per-key) are rebuilt on the other side; ship the plain tensors.
        return {
            "dense": self.dense,
            "keys": self.sparse.keys(),
            "values": self.sparse.values(),
            "lengths": self.sparse.lengths(),
            "labels": self.labels,
            "weights": self.weights,
            "groups": self.groups,
        }

    def __setstate__(self, state: dict) -> None:
        self.dense = state["dense"]
        self.sparse = KeyedJaggedTensor(keys=state["keys"], values=state["values"], lengths=state["lengths"])
        self.labels = state["labels"]
        self.weights = state["weights"]
        self.groups = state["groups"]


def to_batch(out: FGOutput, keys: list[str]) -> Batch:
    """Build the Batch: dense ``(B, D)``, one jagged KJT over ``keys``, labels ``(B,)``."""
    values = np.concatenate(out.values) if out.values else np.zeros(0, np.int64)
    lengths = np.concatenate(out.lengths) if out.lengths else np.zeros(0, np.int32)
    sparse = KeyedJaggedTensor(
        keys=list(keys),
        values=torch.from_numpy(values),
        lengths=torch.from_numpy(lengths),
        stride=out.num_rows,
    )
    return Batch(
        dense=torch.from_numpy(out.dense),
        sparse=sparse,
        labels=torch.from_numpy(out.labels),
        weights=None if out.weights is None else torch.from_numpy(out.weights),
        groups=None if out.groups is None else torch.from_numpy(out.groups),
    )
