"""MaskNet's config section (TorchEasyRec's ``mask_net``, tzrec/models/masknet.py and modules/masknet.py):
instance-guided mask blocks over one deep group, parallel or serial, a top MLP, a Linear without bias to the
logit (:mod:`recpipe.models.mask_net.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import MlpConfig, ModelSection, Strict
from recpipe.models.dcn_v2.config import check_one_deep_group


class MaskBlockConfig(Strict):
    """One mask block (TorchEasyRec's ``MaskBlock`` message): the mask generator's hidden width is
    ``int(input width · reduction_ratio)``, or ``aggregation_dim`` when the ratio is null (TorchEasyRec's ratio,
    default 1.0, wins when both are set); the block outputs ``hidden_dim``."""

    hidden_dim: int = Field(ge=1)
    reduction_ratio: float | None = Field(1.0, gt=0.0)
    aggregation_dim: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _width(self) -> MaskBlockConfig:
        if self.reduction_ratio is None and self.aggregation_dim is None:
            raise ValueError("a mask block needs reduction_ratio or aggregation_dim")
        return self


class MaskNetConfig(ModelSection):
    """``model:`` of a MaskNet config.

    Args:
        group (str): the one deep group it reads (TorchEasyRec: the model's first group).
        num_blocks (int): mask blocks (``n_mask_blocks``).
        mask_block (MaskBlockConfig): each block's widths.
        top_mlp (MlpConfig | None): the MLP over the blocks (TorchEasyRec's model needs one: its logit
            Linear reads ``top_mlp.hidden_units[-1]``).
        parallel (bool): ``use_parallel`` (default true): every block over the normalized group, outputs
            concatenated; false: each block over the previous one's output.

    Example::

        model:
          type: mask_net
          group: all_features
          num_blocks: 3
          mask_block: {reduction_ratio: 3, hidden_dim: 512}
          top_mlp: {hidden_units: [256, 128, 64]}

        # B = 2: x (2, 429) -> LayerNorm -> 3 blocks (2, 512) each -> concat (2, 1536) -> 256-128-64 -> logit (2,)
    """

    type: Literal["mask_net"]
    group: str = "all"
    num_blocks: int = Field(ge=1)
    mask_block: MaskBlockConfig
    top_mlp: MlpConfig | None = None
    parallel: bool = True

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """``group`` must be a defined deep group."""
        check_one_deep_group(self.group, groups)
