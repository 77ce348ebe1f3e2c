"""PEPNet's builder: MultiTowerDIN's towers (the main, domain and uia groups as they are) under a
:class:`~recpipe.models.pepnet.dense.PepnetHead`.

With a ``domain_label`` (TorchEasyRec's ``domain_input_name`` / ``task_domain_num``) the head has a tower per
task and domain, its logits ``(B, T·D)``; the model carries ``task_domains`` (``D``), by which the training
wrapper and evaluation read each row's domain tower
(:func:`~recpipe.models.blocks.domains.select_domain_tasks`)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.multitask.model import build_multitask, tower_spec
from recpipe.models.pepnet.config import PepnetConfig
from recpipe.models.pepnet.dense import PepnetHead


def group_width(spec: FeatureSpec, name: str) -> int:
    """The width of group ``name``'s concatenation: its ids' embedding dims plus its dense columns."""
    group = spec.group(name)
    dims = {f: t.embedding_dim for t in spec.tables() for f in t.feature_names}
    return sum(dims[k] for k in group.sparse) + len(group.dense)


def build(spec: FeatureSpec, cfg: PepnetConfig, device: torch.device | None = None) -> MultiTowerDIN:
    """PEPNet over the spec's groups (see :func:`~recpipe.models.multitask.model.build_multitask`).

    Example::

        model = build(spec, cfg.model)          # towers all, domain, uia
        model(dense, kjt).shape                 # (B, 2): ctr, cvr logits; (B, 6) with 3 domains
    """
    towers = [tower_spec(t, with_relations=False) for t in cfg.task_towers]
    groups = [g for g in (cfg.main_group, cfg.domain_group, cfg.uia_group) if g is not None]
    widths = [group_width(spec, g) for g in groups]

    def head(width: int) -> PepnetHead:
        if width != sum(widths):
            raise ValueError(f"PEPNet: towers' width {width}, groups {groups} are {widths} wide")
        return PepnetHead(
            widths, towers, cfg.domain_group is not None, cfg.uia_group is not None, cfg.epnet_hidden_unit,
            cfg.epnet_gamma, cfg.ppnet_hidden_units, cfg.ppnet_activation, cfg.ppnet_dropout, cfg.ppnet_gamma,
            domain_num, device,
        )  # fmt: skip

    domains = cfg.domains()
    domain_num = 0 if domains is None else domains[1]
    if (spec.domain_label, spec.domain_num) != (domains or (None, 0)):
        raise ValueError(
            f"model pepnet: domain_label / task_domain_num {domains} but the features' are "
            f"{(spec.domain_label, spec.domain_num)} (an fg.json built for another model?)"
        )
    model = build_multitask(spec, cfg, head, device)
    if domain_num:
        model.task_domains = domain_num
    return model
