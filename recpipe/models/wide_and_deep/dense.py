"""The dense arch of WideAndDeep and DeepFM in plain torch: the wide sum, the deep MLP, the FM term and the
logit. Imports neither torchrec nor fbgemm."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recpipe.models.blocks.fm import FactorizationMachine
from recpipe.models.blocks.mlp import MLP, MlpSpec


@dataclass(frozen=True)
class WideDeepGroups:
    """The KJT keys each part reads.

    Args:
        wide_keys (tuple[str, ...]): the wide group's ``<feature>__wide`` keys (small per-feature tables).
        deep_keys (tuple[str, ...]): the deep group's pooled keys, concatenated in this order.
        dense_columns (tuple[int, ...]): the deep group's columns of ``Batch.dense``, appended after them.
        fm_keys (tuple[str, ...] | None): DeepFM's FM group (all of one dim); None: WideAndDeep.
    """

    wide_keys: tuple[str, ...]
    deep_keys: tuple[str, ...]
    dense_columns: tuple[int, ...] = ()
    fm_keys: tuple[str, ...] | None = None


class WideDeepDense(nn.Module):
    """The dense arch of :class:`~recpipe.models.wide_and_deep.model.WideDeep`: the wide sum, the deep MLP, the FM term and the logit.

    Args:
        groups (WideDeepGroups): the keys of each part.
        deep (MlpSpec): the deep MLP.
        final (MlpSpec | None): the MLP over ``concat(y_wide, y_fm, y_deep)``, or None to add the parts.
        key_dims (dict[str, int]): embedding width of every key.
        dense_in_features (int): width of ``Batch.dense``.
        device (torch.device | None): parameter device.

    Example::

        dense_arch = model.dense_module()
        dense_arch(torch.randn(2, 13), model.sparse_arch(kjt)).shape  # (2,)
    """

    def __init__(
        self,
        groups: WideDeepGroups,
        deep: MlpSpec,
        final: MlpSpec | None,
        key_dims: dict[str, int],
        dense_in_features: int = 0,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        if not groups.wide_keys:
            raise ValueError("the wide group has no sparse features")
        if not groups.deep_keys and not groups.dense_columns:
            raise ValueError("the deep group has no features")
        bad = [c for c in groups.dense_columns if not 0 <= c < dense_in_features]
        if bad:
            raise ValueError(f"deep group dense columns {bad} outside [0, {dense_in_features})")
        fm_dim = 0
        if groups.fm_keys is not None:
            fm_dims = {key_dims[k] for k in groups.fm_keys}
            if len(groups.fm_keys) < 2 or len(fm_dims) != 1:
                # TorchEasyRec: "embedding dimension of fm features must be same"
                raise ValueError(
                    f"the FM group needs at least two sparse features of one embedding dim, got "
                    f"{ {k: key_dims[k] for k in groups.fm_keys} }"
                )
            fm_dim = fm_dims.pop()
        self.groups = groups
        self.wide_keys = list(groups.wide_keys)
        self.deep_keys = list(groups.deep_keys)
        self.fm_keys = list(groups.fm_keys or ())
        self.dense_columns = list(groups.dense_columns)
        self.fm = FactorizationMachine() if groups.fm_keys is not None else None
        deep_in = sum(key_dims[k] for k in groups.deep_keys) + len(groups.dense_columns)
        self.deep = MLP.from_spec(deep_in, deep, device=device)
        width = self.deep.out_features
        self.final = None
        if final is not None:
            self.final = MLP.from_spec(1 + fm_dim + width, final, device=device)
            width = self.final.out_features
        self.logit = nn.Linear(width, 1, device=device)

    def input_names(self) -> list[str]:
        return ["dense", *dict.fromkeys([*self.wide_keys, *self.deep_keys, *self.fm_keys])]

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        y_wide = torch.cat([embeddings[k] for k in self.wide_keys], dim=1).sum(dim=1, keepdim=True)
        parts = [embeddings[k] for k in self.deep_keys]
        if self.dense_columns:
            parts.append(dense[:, self.dense_columns])
        y_deep = self.deep(torch.cat(parts, dim=1))
        if self.final is not None:
            mixed = [y_wide]
            if self.fm is not None:
                mixed.append(self.fm(torch.stack([embeddings[k] for k in self.fm_keys], dim=1)))
            mixed.append(y_deep)
            return self.logit(self.final(torch.cat(mixed, dim=1))).squeeze(-1)
        y = y_wide + self.logit(y_deep)
        if self.fm is not None:
            y = y + self.fm(torch.stack([embeddings[k] for k in self.fm_keys], dim=1)).sum(
                dim=1, keepdim=True
            )
        return y.squeeze(-1)
