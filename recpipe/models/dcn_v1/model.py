"""DCNv1's builder (Wang et al. 2017; TorchEasyRec's ``tzrec/models/dcn.py``): DCNv2's
:class:`~recpipe.models.dcn_v2.model.DCN` with DCN's cross network
(:class:`~recpipe.models.blocks.cross.CrossNet`), no backbone and a deep MLP."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.cross import CrossNet
from recpipe.models.blocks.group_input import group_columns
from recpipe.models.blocks.mlp import mlp_spec
from recpipe.models.dcn_v1.config import DcnV1Config
from recpipe.models.dcn_v2.model import DCN


def build(spec: FeatureSpec, cfg: DcnV1Config, device: torch.device | None = None) -> DCN:
    """DCNv1 over ``cfg.group``: ``cfg.cross.num_layers`` cross layers beside ``cfg.deep``, then ``cfg.final``."""
    return DCN(
        spec.tables(),
        group_columns(spec, cfg.group, "dcn_v1"),
        lambda width: CrossNet(width, cfg.cross.num_layers, device=device),
        mlp_spec(cfg.final),
        deep=mlp_spec(cfg.deep),
        dense_in_features=spec.dense_dim,
        pooling=spec.pooling(),
        device=device,
    )
