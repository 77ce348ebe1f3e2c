"""Embeddings of numeric features (TorchEasyRec's ``raw_feature { autodis {...} }`` / ``mlp {}``,
docs/source/feature/autodis.md, tzrec/modules/dense_embedding_collection.py): a dense column becomes an
``embedding_dim``-wide vector inside the dense arch, so the feature enters its group as an embedding. Plain torch
(the dense arch exports to jit, onnx, aoti and rtp with it).

- AutoDis (https://arxiv.org/pdf/2012.08986, TorchEasyRec's ``AutoDisEmbedding``): ``h = LeakyReLU(w · x)``
  over ``num_channels`` channels, ``x̄ = M h + keep_prob · h`` (the skip connection, weighted by ``keep_prob``),
  ``x̂ = softmax(x̄ / temperature)``, the embedding ``Σ_c x̂_c · meta_c`` of the channels' meta-embeddings.
- MLP (TorchEasyRec's ``MLPEmbedding``): ``x · w``, one weight vector per feature (no bias).

:func:`expand_dense` gives the models the spec they are built on: each embedded column stands for its
``embedding_dim`` columns, in place; :class:`EmbeddedDense` wraps the built dense arch, turning ``Batch.dense``
into that wider input first.

Example::

    emb = AutoDis(embedding_dim=8, num_channels=3)
    emb(torch.tensor([0.5, 2.0])).shape          # (2, 8)
    model = build_model(spec, cfg.model)          # spec with a raw feature ``price`` with autodis
    model.dense(batch.dense, model.sparse_arch(batch.sparse))   # price's column is an AutoDis embedding
"""

from __future__ import annotations

import dataclasses
from math import sqrt
from typing import Any

import torch
from torch import nn

from recpipe.features.spec import FeatureSpec

EMBEDDED_SUFFIX = "__emb"


class AutoDis(nn.Module):
    """AutoDis embedding of one numeric feature: ``(B,)`` values → ``(B, embedding_dim)``.

    Args:
        embedding_dim (int): the embedding width.
        num_channels (int): meta-embeddings (TorchEasyRec's ``num_channels``).
        temperature (float): softmax temperature (default 0.1).
        keep_prob (float): weight of the skip connection (default 0.8).
    """

    def __init__(
        self, embedding_dim: int, num_channels: int, temperature: float = 0.1, keep_prob: float = 0.8
    ) -> None:
        super().__init__()
        self.temperature = float(temperature)
        self.keep_prob = float(keep_prob)
        # TorchEasyRec's initialization (reset_parameters): N(0, 1), glorot-normal-like projections.
        self.meta_emb = nn.Parameter(torch.randn(num_channels, embedding_dim))
        self.proj_w = nn.Parameter(torch.randn(num_channels) * sqrt(2 / (1 + num_channels)))
        self.proj_m = nn.Parameter(torch.randn(num_channels, num_channels) * sqrt(1 / num_channels))
        self.leaky_relu = nn.LeakyReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.leaky_relu(x.unsqueeze(1) * self.proj_w)  # (B, C)
        x_bar = hidden @ self.proj_m.t() + self.keep_prob * hidden  # (B, C): Σ_j M_ij h_j + keep_prob · h_i
        x_hat = torch.softmax(x_bar / self.temperature, dim=-1)
        return x_hat @ self.meta_emb  # (B, D)


class MlpEmbedding(nn.Module):
    """TorchEasyRec's MLP embedding of one numeric feature: ``x · w`` → ``(B, embedding_dim)``."""

    def __init__(self, embedding_dim: int) -> None:
        super().__init__()
        self.proj_w = nn.Parameter(torch.randn(embedding_dim) * sqrt(2 / (1 + embedding_dim)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(1) * self.proj_w


def dense_embedding(settings: dict[str, Any]) -> nn.Module:
    """The module of a DenseFeature's ``embedding`` settings."""
    if settings["type"] == "autodis":
        return AutoDis(
            settings["dim"], settings["num_channels"], settings["temperature"], settings["keep_prob"]
        )
    if settings["type"] == "mlp":
        return MlpEmbedding(settings["dim"])
    raise ValueError(f"unknown dense embedding {settings['type']!r}; known: autodis, mlp")


class DenseEmbeddings(nn.Module):
    """``Batch.dense`` ``(B, D)`` → ``(B, D')``: each embedded column replaced, in place, by its embedding.

    Args:
        spec (FeatureSpec): the dense columns and their ``embedding`` settings.
    """

    def __init__(self, spec: FeatureSpec) -> None:
        super().__init__()
        self.width = spec.dense_dim
        self.embeddings = nn.ModuleDict(
            {d.name: dense_embedding(d.embedding) for d in spec.dense if d.embedding}
        )
        names = spec.dense_names()
        self.columns = [names.index(n) for n in self.embeddings]
        # Runs of plain columns between the embedded ones: (start, end) slices of Batch.dense.
        cuts = [-1, *self.columns, self.width]
        self.plain = [(a + 1, b) for a, b in zip(cuts, cuts[1:])]

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        parts: list[torch.Tensor] = []
        for i, emb in enumerate(self.embeddings.values()):
            start, end = self.plain[i]
            if end > start:
                parts.append(dense[:, start:end])
            parts.append(emb(dense[:, self.columns[i]]))
        start, end = self.plain[-1]
        if end > start:
            parts.append(dense[:, start:end])
        return torch.cat(parts, dim=1)


class EmbeddedDense(nn.Module):
    """A model's dense arch after :class:`DenseEmbeddings`: ``forward(dense, embeddings) =
    inner(DenseEmbeddings(dense), embeddings)``; every other attribute is the inner arch's."""

    def __init__(self, inner: nn.Module, embed: DenseEmbeddings) -> None:
        super().__init__()
        self.inner = inner
        self.embed = embed

    def forward(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.inner(self.embed(dense), embeddings)

    def forward_shared(self, dense: torch.Tensor, embeddings: dict[str, torch.Tensor]) -> torch.Tensor:
        """The inner arch's shared-history form (``dense_shared.pt2``) over the embedded columns too: without it
        ``__getattr__`` would hand the inner one the raw ``(B, D)`` columns."""
        return self.inner.forward_shared(self.embed(dense), embeddings)

    def input_names(self) -> list[str]:
        return self.inner.input_names()

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("inner"), name)


def expand_dense(spec: FeatureSpec) -> FeatureSpec:
    """The spec a model is built on: each embedded dense column ``price`` (embedding_dim D) as D columns
        ``price__emb0 … price__emb{D-1}`` in its place, in the dense list and in every group listing it (a sequence
    group's query order too); ``spec``
        itself when no column is embedded."""
    if not any(d.embedding for d in spec.dense):
        return spec
    names: dict[str, list[str]] = {}
    dense = []
    for d in spec.dense:
        if d.embedding:
            expanded = [f"{d.name}{EMBEDDED_SUFFIX}{i}" for i in range(d.embedding["dim"])]
            dense += [dataclasses.replace(d, name=n, embedding=None) for n in expanded]
            names[d.name] = expanded
        else:
            dense.append(d)
    groups = [
        dataclasses.replace(
            g,
            dense=[x for n in g.dense for x in names.get(n, [n])],
            query_order=[x for n in g.query_order for x in names.get(n, [n])],
        )
        for g in spec.groups
    ]
    return dataclasses.replace(spec, dense=dense, groups=groups)


def embed_dense(model: nn.Module, spec: FeatureSpec) -> nn.Module:
    """``model`` (built on :func:`expand_dense` of ``spec``) taking ``spec``'s ``Batch.dense``: its dense arch
    wrapped in :class:`EmbeddedDense`."""
    if not any(d.embedding for d in spec.dense):
        return model
    model.dense = EmbeddedDense(model.dense, DenseEmbeddings(spec))
    model.dense_in_features = spec.dense_dim
    return model
