"""The split-model base: the :class:`~recpipe.models.protocol.RankingModel` contract written once.

A model is two submodules: ``embeddings`` (the sparse arch, the lookups: TorchRec tables) and ``dense`` (the
dense arch, plain torch: what export serves, no embedding table). A model on :class:`SplitModel` gives those
two and, when its dense arch reads more than pooled embeddings, its own :meth:`SplitModel.sparse_arch`.
Imports neither torchrec nor fbgemm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:  # annotations only: no torchrec at import
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from recpipe.batch import Batch


class SplitModel(nn.Module):
    """``forward(dense, sparse) == dense(dense, sparse_arch(sparse))``, with ``sparse_arch`` the
    ``embeddings`` lookup and ``dense`` a module without tables.

    The parameters are ``embeddings.…`` and ``dense.…`` (checkpoints and exports key on these names).

    Args:
        embeddings (nn.Module): the lookup, ``kjt -> EmbeddingLookup`` (an
            :class:`~recpipe.models.blocks.embedding.EmbeddingGroup`).
        dense (nn.Module): the dense arch: ``forward(dense, embeddings) -> logits`` in plain torch, and
            ``input_names()``, the names of its inputs (``"dense"`` first, then the embedding keys).
        dense_in_features (int): width of ``Batch.dense`` (export checks it against the FeatureSpec).

    Example::

        # B = 2, keys C1, C2 (dim 4), 3 dense floats
        #   C1  [7]  [1]
        #   C2  [3]  []
        class Toy(SplitModel):
            def __init__(self, tables, keys):
                embeddings = EmbeddingGroup(tables, keys, [])
                super().__init__(embeddings, ToyDense(keys, 3 + 4 * len(keys)), dense_in_features=3)

        model = Toy(spec.tables(), ["C1", "C2"])
        model.sparse_arch(kjt)               # {"C1": (2, 4), "C2": (2, 4)}: pooled lookups
        model.dense_input_names()            # ["dense", "C1", "C2"]
        model(torch.zeros(2, 3), kjt).shape  # (2,) logits; (2, T) for a multi-task model
    """

    def __init__(self, embeddings: nn.Module, dense: nn.Module, dense_in_features: int) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.dense = dense
        self.dense_in_features = dense_in_features

    def dense_input_names(self) -> list[str]:
        """Inputs of :meth:`dense_arch`, in order: ``dense`` ``(B, D_dense)`` then the keys of
        :meth:`sparse_arch`'s output."""
        return self.dense.input_names()

    def dense_module(self) -> nn.Module:
        """The dense arch as a module ``(dense, embeddings) -> logits`` holding no embedding table."""
        return self.dense

    def sparse_arch(self, sparse: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        """The dense arch's embedding inputs: here the pooled ``(B, D)`` lookup of every pooled key; a
        model that reads sequences or concatenations overrides it."""
        return self.embeddings(sparse).pooled

    def dense_arch(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits from ``Batch.dense`` and :meth:`sparse_arch`'s output (plain torch ops only)."""
        return self.dense(dense, embeddings)

    def regularization(self, batch_size: int) -> torch.Tensor | None:
        """The dense arch's training-only loss term for ``batch_size`` rows (a variational dropout's), None
        when it has none; the training loss adds it."""
        term = getattr(self.dense, "regularization", None)
        return None if term is None else term(batch_size)

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense_arch(dense, self.sparse_arch(sparse))

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.forward(batch.dense, batch.sparse)
