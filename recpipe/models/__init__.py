"""Ranking models and their building blocks.

Every model has ``forward(dense, sparse) -> logits (B,)``, ``predict(batch)``, and is split into
``sparse_arch(sparse) -> dict[str, Tensor]`` (embedding lookups) and
``dense_arch(dense, embeddings) -> logits`` (plain torch ops: what export serves), with
``dense_input_names()`` listing the dense arch's inputs in order and ``dense_module()`` the submodule
that computes it (no embedding tables; :class:`~recpipe.models.protocol.DenseArchModule` exposes it with
positional inputs).

Models are named in :data:`recpipe.config.catalogue.MODELS` and built by
:func:`recpipe.models.registry.build_model`. This package imports nothing: import from the modules.
"""
