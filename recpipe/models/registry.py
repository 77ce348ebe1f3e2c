"""Build the model a config names: the catalogue line (:data:`recpipe.config.catalogue.MODELS`, or an entry
point of group ``recpipe.models``) gives its builder.

A model is declared by its folder ``recpipe/models/<name>/``:

- ``config.py``: its config section (a :class:`~recpipe.config.sections.ModelSection` with ``type:
  Literal["<name>"]`` and ``check_groups(groups)``), a file that imports only ``recpipe.config.*`` modules;
  ``recpipe.config`` validates the ``model:`` section with it;
- ``model.py``: ``build(spec, cfg, device=None) -> nn.Module``, the model, a
  :class:`~recpipe.models.base.SplitModel` (so it meets :class:`~recpipe.models.protocol.RankingModel`:
  export needs nothing else); ``dense.py``: its dense arch in plain torch, when it has its own.

Adding a model is that folder plus one line in the catalogue. This module imports no torch at the top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recpipe.config.root import declared, resolve

if TYPE_CHECKING:
    import torch
    from torch import nn

    from recpipe.config.sections import ModelSection
    from recpipe.features.spec import FeatureSpec


def builder(name: str) -> Any:
    """The ``build`` function of model ``name``.

    Raises:
        ValueError: an unknown model, or a declaration whose builder is missing or not callable.
    """
    entry = declared("MODELS", name)
    fn = resolve(entry.code)
    if not callable(fn):
        raise ValueError(f"model {name!r}: {entry.code} is not callable")
    return fn


def build_model(
    spec: FeatureSpec, model_cfg: ModelSection, device: torch.device | str | None = None
) -> nn.Module:
    """Build the model ``model_cfg.type`` names on ``device`` (default ``cpu``; ``meta`` builds without
    allocating, for DistributedModelParallel to shard).

    Args:
        spec (FeatureSpec): the features, tables and groups.
        model_cfg (ModelSection): the config's ``model`` section.
        device (torch.device | str | None): where the parameters go.

    Returns:
        nn.Module: the model (a :class:`~recpipe.models.protocol.RankingModel`).

    Example::

        cfg = load_config("configs/din_taobao_small.yaml")
        model = build_model(build_feature_spec(cfg), cfg.model)   # MultiTowerDIN
    """
    import torch

    from recpipe.models.blocks.dense_embedding import embed_dense, expand_dense

    # Numeric features with an embedding (autodis / mlp): the model is built on their embedded width and
    # its dense arch embeds Batch.dense first, so every model (and every export of it) takes them alike.
    model = builder(model_cfg.type)(
        expand_dense(spec), model_cfg, device=torch.device(device) if device is not None else None
    )
    return embed_dense(model, spec)
