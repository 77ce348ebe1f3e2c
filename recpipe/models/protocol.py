"""The contracts models meet, as Protocols: what export and training read. The ranking models meet
:class:`RankingModel` by :class:`~recpipe.models.base.SplitModel`, which writes it once (a model may meet it
without); a two-tower retrieval model meets :class:`RetrievalModel` instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:  # annotations only: DenseArchModule imports without torchrec (issue 20's GPU check)
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from recpipe.batch import Batch


@runtime_checkable
class RankingModel(Protocol):
    """``forward == dense_arch(dense, sparse_arch(sparse))``; ``dense_arch`` is plain torch (exportable)
    and equals ``dense_module()(dense, embeddings)``, a submodule without embedding tables.

    Example::

        emb = model.sparse_arch(batch.sparse)               # {name: Tensor}, names = dense_input_names()[1:]
        logits = model.dense_arch(batch.dense, emb)          # (B,)
    """

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor: ...

    def predict(self, batch: Batch) -> torch.Tensor: ...

    def sparse_arch(self, sparse: KeyedJaggedTensor) -> dict[str, torch.Tensor]: ...

    def dense_arch(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def dense_input_names(self) -> list[str]: ...

    def dense_module(self) -> torch.nn.Module: ...


class DenseArchModule(torch.nn.Module):
    """A model's dense arch as a module of positional tensors, in ``dense_input_names()`` order: the
    graph ``torch.export`` / ONNX / RTP serve behind the embedding lookup. It holds only the dense
    submodule (parameters shared with the model), so no embedding table ends up in an export.

    Args:
        model (RankingModel): the model whose dense arch to expose.

    Example::

        dense_part = DenseArchModule(model)
        emb = model.sparse_arch(kjt)
        inputs = [dense] + [emb[n] for n in model.dense_input_names()[1:]]
        dense_part(*inputs)            # (B,) logits, == model(dense, kjt)
    """

    def __init__(self, model: RankingModel) -> None:
        super().__init__()
        self.dense = model.dense_module()
        self.input_names = model.dense_input_names()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != len(self.input_names):
            raise ValueError(f"expected {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        return self.dense(inputs[0], dict(zip(self.input_names[1:], inputs[1:])))


@runtime_checkable
class SharedHistoryDense(Protocol):
    """A dense arch that can score B rows sharing ONE history per sequence input (one user × B candidates):
    ``forward_shared`` takes the inputs ``shared_history_input_names()`` names (``dense_input_names()`` without
    the ``<group>__offsets``; each ``<group>__values`` one history's ``(T, D)`` items) and returns ``forward``'s
    logits for those rows with every history tiled B times. ``[]`` names: no history to share."""

    def shared_history_input_names(self) -> list[str]: ...

    def forward_shared(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor: ...


class SharedHistoryArchModule(torch.nn.Module):
    """:class:`DenseArchModule`'s shared-history form: ``forward_shared`` of a :class:`SharedHistoryDense` as a
    module of positional tensors in ``shared_history_input_names()`` order (what the RTP export traces as its
    second dense program, ``dense_shared.pt2``).

    Args:
        dense (SharedHistoryDense): the model's dense submodule (``model.dense_module()``).

    Example::

        shared = SharedHistoryArchModule.of(model.dense_module())   # None without a history to share
        # B = 500 candidates, one history of T = 68 items, D = 48
        shared(dense, *pooled, query, history)                      # (500,) logits; query (500, 48), history (68, 48)
    """

    def __init__(self, dense: SharedHistoryDense) -> None:
        super().__init__()
        self.dense = dense
        self.input_names = dense.shared_history_input_names()

    @classmethod
    def of(cls, dense: torch.nn.Module) -> SharedHistoryArchModule | None:
        """The shared-history module of ``dense``, or None when it has no shared form (no DIN tower)."""
        if not isinstance(dense, SharedHistoryDense) or not dense.shared_history_input_names():
            return None
        return cls(dense)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != len(self.input_names):
            raise ValueError(f"expected {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        return self.dense.forward_shared(inputs[0], dict(zip(self.input_names[1:], inputs[1:])))


@runtime_checkable
class RetrievalModel(Protocol):
    """The contract of a two-tower retrieval model, apart from :class:`RankingModel`: a user embedding of
    every row and an item embedding of every row, in one space, scored by their inner product over
    ``temperature`` (export of the user tower and an item index read nothing else).

    Example::

        user = model.user_embedding(batch.dense, batch.sparse)        # (B, D)
        items = model.item_embedding(catalogue.dense, catalogue.sparse)  # (N, D)
        scores = user @ items.T / model.temperature                    # (B, N)
    """

    temperature: float

    def user_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor: ...

    def item_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor: ...


@runtime_checkable
class MultiInterestModel(Protocol):
    """The contract of a multi-interest retrieval model (MIND): several interests per user with their mask, an
    item embedding in the same space, and ``attend``, training's one user vector per positive item (the
    label-aware attention). Retrieval scores an item by its best real interest
    (:func:`recpipe.eval.retrieval.top_k_items` with a mask).

    Example::

        interests, mask = model.user_interests(batch.dense, batch.sparse)   # (B, K, D), (B, K) bool
        item = model.item_embedding(batch.dense, batch.sparse)              # (B, D)
        user = model.attend(interests, mask, item)                           # (B, D), for the softmax loss
    """

    temperature: float

    def user_interests(
        self, dense: torch.Tensor, sparse: KeyedJaggedTensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def item_embedding(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor: ...

    def attend(self, interests: torch.Tensor, mask: torch.Tensor, item: torch.Tensor) -> torch.Tensor: ...
