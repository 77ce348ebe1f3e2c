"""A toy ranking model added the way any model is: this folder (``config.py``, ``model.py``) and one registry
line. The line is an entry point of group ``recpipe.models`` (``toy = tests.models.toy``, see
``tests/models/test_toy_model.py``), naming this module: it exposes ``Config`` and ``build``.

``build`` imports the model when called, so loading a config that names the toy imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.models.toy.config import ToyConfig as Config

if TYPE_CHECKING:
    import torch

    from recpipe.features.spec import FeatureSpec
    from tests.models.toy.model import ToyModel

__all__ = ["Config", "build"]


def build(spec: FeatureSpec, cfg: Config, device: torch.device | None = None) -> ToyModel:
    """:func:`tests.models.toy.model.build`."""
    from tests.models.toy import model

    return model.build(spec, cfg, device)
