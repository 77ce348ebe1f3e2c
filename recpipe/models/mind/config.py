"""MIND's config section (TorchEasyRec's ``mind``, tzrec/protos/models/match_model.proto ``MIND``, tower.proto
``MINDUserTower``, module.proto ``B2ICapsule``): a user tower of a user MLP and capsule routing over a history
group, an item tower as DSSM's, the label-aware attention's power, similarity and temperature, and the
negatives (:mod:`recpipe.models.mind.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from recpipe.config.features import FeatureGroupConfig
from recpipe.config.sections import ConfigSection, MlpConfig, ModelSection, check_group_refs
from recpipe.models.multi_tower_din.config import TowerConfig


class CapsuleConfig(ConfigSection):
    """The interest capsules (TorchEasyRec's ``B2ICapsule``, its defaults).

    Args:
        max_k (int): most interests per user (5).
        max_seq_len (int): history items routed, the first ones (required).
        high_dim (int): an interest's width before the concat MLP (required).
        num_iters (int): routing rounds (3).
        routing_logits_scale (float): the routing logits' factor in the softmax (20).
        routing_logits_stddev (float): stddev of the initial routing logits (1).
        squash_pow (float): power of the squash (1).
        const_caps_num (bool): every user gets ``max_k`` interests; else ``max(1, min(max_k, log2 n))`` for a
            history of ``n`` items.
        routing_init (str): ``normal`` (TorchEasyRec's default) or ``zeros`` initial routing logits.
    """

    max_k: int = Field(5, ge=1)
    max_seq_len: int = Field(ge=1)
    high_dim: int = Field(ge=1)
    num_iters: int = Field(3, ge=1)
    routing_logits_scale: float = Field(20.0, gt=0)
    routing_logits_stddev: float = Field(1.0, ge=0)
    squash_pow: float = Field(1.0, gt=0)
    const_caps_num: bool = False
    routing_init: Literal["normal", "zeros"] = "normal"


class ConcatMlpConfig(MlpConfig):
    """The MLP over each interest joined with the user features; ``bias: false`` drops its Linears' biases
    (TorchEasyRec's ``MLP.bias``)."""

    bias: bool = True


class MindUserTowerConfig(ConfigSection):
    """MIND's user tower (TorchEasyRec's ``MINDUserTower``).

    Args:
        group (str): the ``deep`` group of user features (TorchEasyRec's ``input``).
        history_group (str): the ``sequence`` group of the click history, sub-features only
            (``history_input``).
        user_mlp (MlpConfig): over the user features; its last width is a plain Linear (no activation).
        hist_seq_mlp (MlpConfig | None): over each history item before routing, without biases, its last width
            a plain Linear; None: the items as they are.
        capsule (CapsuleConfig): the routing (TorchEasyRec's ``capsule_config``).
        concat_mlp (ConcatMlpConfig): over each interest joined with the user MLP's output.
    """

    group: str
    history_group: str
    user_mlp: MlpConfig
    hist_seq_mlp: MlpConfig | None = None
    capsule: CapsuleConfig
    concat_mlp: ConcatMlpConfig


class MindConfig(ModelSection):
    """``model:`` of a MIND config.

    Args:
        user_tower (MindUserTowerConfig): interests from the user group and the history group.
        item_tower (TowerConfig): an MLP over the item group, then the Linear to ``output_dim`` (as DSSM's).
        output_dim (int): both towers end in a Linear to this width (the user's without bias, as
            TorchEasyRec's); 0: none, the concat MLP's and the item MLP's last widths must agree.
        simi_pow (float): the label-aware attention's sharpness: an interest's weight is
            ``softmax(simi_pow · <interest, positive item>)`` (TorchEasyRec's default 10).
        similarity (str): ``cosine`` (TorchEasyRec's default for MIND: interests and items L2-normalised) or
            ``inner_product``.
        temperature (float): the similarity is divided by it (1.0).
        in_batch_negative (bool): the batch's other positives are the negatives; False: the sampled negatives
            of ``data.negative_sampler``.
        log_q_correction (bool): recpipe's log-Q correction, as DSSM's.

    Example::

        model:
          type: mind
          user_tower:
            group: user
            history_group: hist
            user_mlp: {hidden_units: [256, 128]}
            hist_seq_mlp: {hidden_units: [256, 128]}
            capsule: {max_k: 8, max_seq_len: 50, high_dim: 64, squash_pow: 0.2}
            concat_mlp: {hidden_units: [256, 128], bias: false}
          item_tower: {group: item, mlp: {hidden_units: [256, 128]}}
          output_dim: 32
          simi_pow: 20
          temperature: 0.01

        # B = 2: user features (2, 80) → user MLP (2, 128); history items T = 7 of (7, 32) → (7, 128)
        # → routing (2, 8, 64) + mask (2, 8) → concat (2, 8, 192) → concat MLP (2, 8, 128) → (2, 8, 32)
        # training: the interests attended by each row's positive item → (2, 32); items (2 + N, 32)
    """

    type: Literal["mind"]
    user_tower: MindUserTowerConfig
    item_tower: TowerConfig
    output_dim: int = Field(ge=0)
    simi_pow: float = 10.0
    similarity: Literal["inner_product", "cosine"] = "cosine"
    temperature: float = Field(1.0, gt=0)
    in_batch_negative: bool = False
    log_q_correction: bool = False

    def check_groups(self, groups: Sequence[FeatureGroupConfig]) -> None:
        """The three groups defined: the user and item groups ``deep`` and different, the history a
        ``sequence`` group."""
        user, item, hist = self.user_tower.group, self.item_tower.group, self.user_tower.history_group
        check_group_refs([user, item, hist], groups)
        if user == item:
            raise ValueError(f"mind: user_tower and item_tower both read group {user!r}")
        types = {g.name: g.type for g in groups}
        for name, want in ((user, "deep"), (item, "deep"), (hist, "sequence")):
            if types[name] != want:
                raise ValueError(f"mind: group {name!r} is a {types[name]} group; it needs a {want} group")
