"""DeepFM's builder: :class:`~recpipe.models.wide_and_deep.model.WideDeep` with a factorization machine's
second-order term."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.deepfm.config import DeepFMConfig
from recpipe.models.wide_and_deep.model import WideDeep, wide_deep


def build(spec: FeatureSpec, cfg: DeepFMConfig, device: torch.device | None = None) -> WideDeep:
    """DeepFM over the spec's wide, deep and FM groups (the FM group defaults to the deep group).

    Raises:
        ValueError: FM over dense features or over embeddings of different dims.
    """
    return wide_deep(spec, cfg, cfg.fm_group or cfg.deep_group, device)
