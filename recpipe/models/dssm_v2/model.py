"""DSSMv2 (TorchEasyRec's ``DSSMV2``, tzrec/models/dssm_v2.py): DSSM's two towers
(:class:`~recpipe.models.dssm.model.DSSM`) over one embedding lookup whose tables both towers share.
"""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.dssm.model import DSSM
from recpipe.models.dssm.model import build as build_dssm
from recpipe.models.dssm_v2.config import DssmV2Config


def build(spec: FeatureSpec, cfg: DssmV2Config, device: torch.device | None = None) -> DSSM:
    """DSSMv2 from the spec's tower groups and pooled histories (as DSSM's), one table per table name.

    Raises:
        ValueError: what :func:`~recpipe.models.dssm.model.tower_parts` refuses.
    """
    return build_dssm(spec, cfg, device, shared_tables=True)
