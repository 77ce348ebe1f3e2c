"""Ranking models and their building blocks: one folder per model, on one small split-model base.

``recpipe/models/<name>/`` holds ``config.py`` (its ``model:`` section, torch-free: the config imports it),
``model.py`` (the ``nn.Module`` and ``build(spec, cfg, device=None)``) and, for a model with a dense arch of
its own, ``dense.py`` (that arch in plain torch: no torchrec, what export serves). Shared parts live in
:mod:`recpipe.models.blocks` (MLP, DIN attention, dot interaction, FM, multi-task heads, embedding lookups).

Every model is a :class:`~recpipe.models.base.SplitModel`: ``forward(dense, sparse) -> logits (B,)`` (or
``(B, T)``), ``predict(batch)``, split into ``sparse_arch(sparse) -> dict[str, Tensor]`` (embedding lookups)
and ``dense_arch(dense, embeddings) -> logits`` (plain torch ops: what export serves), with
``dense_input_names()`` listing the dense arch's inputs in order and ``dense_module()`` the submodule that
computes it (:class:`~recpipe.models.protocol.DenseArchModule` exposes it with positional inputs).

Models are named in :data:`recpipe.config.catalogue.MODELS` (one line each) and built by
:func:`recpipe.models.registry.build_model`. This package imports nothing: import from the modules.
"""
