"""One feature group as one ``(B, D)`` tensor: its pooled embeddings in the group's order, then its columns of
``Batch.dense`` (TorchEasyRec's ``build_input(batch)[group]`` of a DEEP group, the input of DCN, DCNv2 and
MaskNet)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:  # the dense arch imports nothing of recpipe.features
    from recpipe.features.spec import FeatureSpec


@dataclass(frozen=True)
class GroupColumns:
    """The keys and dense columns of one group.

    Args:
        keys (tuple[str, ...]): the group's pooled KJT keys, concatenated in this order.
        dense_columns (tuple[int, ...]): its columns of ``Batch.dense``, appended after them.
    """

    keys: tuple[str, ...]
    dense_columns: tuple[int, ...] = ()


def group_columns(spec: FeatureSpec, group: str, model: str) -> GroupColumns:
    """The :class:`GroupColumns` of ``spec``'s group ``group``.

    Raises:
        ValueError: the group has no feature (naming ``model``).
    """
    g = spec.group(group)
    names = spec.dense_names()
    cols = GroupColumns(tuple(g.sparse), tuple(names.index(n) for n in g.dense))
    if not cols.keys and not cols.dense_columns:
        raise ValueError(f"{model}: feature group {group!r} has no features")
    return cols


class GroupConcat(nn.Module):
    """``concat(embeddings[k] for k in keys, dense[:, dense_columns])`` ``(B, D)``.

    Args:
        columns (GroupColumns): what to concatenate.
        key_dims (dict[str, int]): embedding width of every key.
        dense_in_features (int): width of ``Batch.dense`` (each dense column is checked against it).

    Example::

        cat = GroupConcat(GroupColumns(("C1", "C2"), (0, 1, 2)), {"C1": 16, "C2": 16}, 13)
        cat(torch.randn(4, 13), {"C1": torch.randn(4, 16), "C2": torch.randn(4, 16)}).shape  # (4, 35)
    """

    def __init__(self, columns: GroupColumns, key_dims: dict[str, int], dense_in_features: int) -> None:
        super().__init__()
        bad = [c for c in columns.dense_columns if not 0 <= c < dense_in_features]
        if bad:
            raise ValueError(f"group dense columns {bad} outside [0, {dense_in_features})")
        self.keys = list(columns.keys)
        self.dense_columns = list(columns.dense_columns)
        self.out_features = sum(key_dims[k] for k in self.keys) + len(self.dense_columns)

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [embeddings[k] for k in self.keys]
        if self.dense_columns:
            parts.append(dense[:, self.dense_columns])
        return torch.cat(parts, dim=1)
