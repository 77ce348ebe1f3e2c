"""The model registry: each model's name → the module that declares it. The only list of models.

A model module declares three things:

- ``Config``: the pydantic class of its config section, a :class:`recpipe.config.ModelSection` with
  ``type: Literal["<name>"]``; ``recpipe.config`` validates the ``model:`` section with it.
- ``Config.check_groups(groups)``: raises ``ValueError`` when the section names a feature group the
  config does not define (``RecpipeConfig`` calls it with ``feature_groups``).
- ``build(spec, cfg, device=None) -> nn.Module``: the model, meeting
  :class:`~recpipe.models.protocol.RankingModel` (export needs nothing else).

Adding a model is that one file plus one line in :data:`MODELS`. A package outside recpipe declares its
models with the same one line as an entry point in group ``recpipe.models`` (``[project.entry-points.
"recpipe.models"]`` ``my_model = "my_package.my_model"`` in its ``pyproject.toml``): every process that
loads a config finds it, training workers and cluster pods included.

This module imports no torch, and neither do the shipped models' modules at the top: their builders
import the ``nn.Module`` s, so loading a config (ingest, fit, the pipeline's parameter check) never
imports torch. A model module that imports torch at the top still works; loading a config that names
it then imports torch (about 4 s and 400 MB with torchrec).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from recpipe.features.spec import FeatureSpec

MODELS: dict[str, str] = {
    "multi_tower_din": "recpipe.models.zoo.multi_tower_din",
    "dlrm": "recpipe.models.zoo.dlrm",
    "multi_tower": "recpipe.models.zoo.multi_tower",
    "deepfm": "recpipe.models.zoo.deepfm",
    "wide_and_deep": "recpipe.models.zoo.wide_and_deep",
    "mmoe": "recpipe.models.zoo.mmoe",
    "dbmtl": "recpipe.models.zoo.dbmtl",
    "ple": "recpipe.models.zoo.ple",
}
ENTRY_POINT_GROUP = "recpipe.models"


def _declared(name: str) -> str | None:
    """The module declaring ``name``: :data:`MODELS`, else an installed package's entry point."""
    if name in MODELS:
        return MODELS[name]
    found = [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    return found[0] if found else None


def model_names() -> list[str]:
    """Every declared model: :data:`MODELS` and the entry points of group ``recpipe.models``."""
    return sorted(set(MODELS) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def model_module(name: str) -> ModuleType:
    """The module that declares model ``name``.

    Raises:
        ValueError: an unknown name, or a module that lacks ``Config``, ``Config.check_groups`` or ``build``.
    """
    path = _declared(name)
    if path is None:
        raise ValueError(f"unknown model type {name!r}; known: {model_names()}")
    module = importlib.import_module(path)
    missing = [
        attr
        for attr, ok in (
            ("Config", hasattr(module, "Config")),
            ("Config.check_groups", hasattr(getattr(module, "Config", None), "check_groups")),
            ("build", callable(getattr(module, "build", None))),
        )
        if not ok
    ]
    if missing:
        raise ValueError(f"model {name!r}: module {path} does not declare {missing}")
    return module


def config_class(name: str) -> type:
    """The pydantic class of model ``name``'s config section."""
    return model_module(name).Config


def build_model(spec: FeatureSpec, model_cfg: Any, device: torch.device | str | None = None) -> nn.Module:
    """Build the model ``model_cfg.type`` names on ``device`` (default ``cpu``; ``meta`` builds without
    allocating, for DistributedModelParallel to shard).

    Args:
        spec (FeatureSpec): the features, tables and groups.
        model_cfg (ModelSection): the config's ``model`` section (typed ``Any`` here: naming
            ``recpipe.config`` would make an import circle, as the config validates through this registry).
        device (torch.device | str | None): where the parameters go.

    Returns:
        nn.Module: the model (a :class:`~recpipe.models.protocol.RankingModel`).

    Example::

        cfg = load_config("configs/din_taobao_small.yaml")
        model = build_model(build_feature_spec(cfg), cfg.model)   # MultiTowerDIN
    """
    import torch

    return model_module(model_cfg.type).build(
        spec, model_cfg, device=torch.device(device) if device is not None else None
    )
