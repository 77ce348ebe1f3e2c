from __future__ import annotations

import pytest
import torch

from recpipe.config import DlrmConfig, MlpConfig
from recpipe.models import DLRM, MODELS, MultiTowerDIN, RankingModel, build_model
from recpipe.models.build import build_dlrm, build_multi_tower_din


def test_registry_is_explicit() -> None:
    assert MODELS == {"multi_tower_din": build_multi_tower_din, "dlrm": build_dlrm}


def test_build_on_meta(din_spec, din_cfg, dlrm_spec, dlrm_cfg) -> None:
    din = build_model(din_spec, din_cfg.model, device="meta")
    dlrm = build_model(dlrm_spec, dlrm_cfg.model, device=torch.device("meta"))
    assert isinstance(din, MultiTowerDIN) and isinstance(dlrm, DLRM)
    for model in (din, dlrm):
        assert isinstance(model, RankingModel)
        assert all(p.is_meta for p in model.parameters())
    table = din.embeddings.ec.embeddings["adgroup_id"].weight
    assert table.shape == (846812, 16)


def test_dlrm_builder_passes_init_and_checks_dims(dlrm_spec, dlrm_cfg) -> None:
    cfg = dlrm_cfg.model.model_copy(update={"embedding_init": "uniform", "embedding_init_scale": 0.25})
    model = build_dlrm(dlrm_spec, cfg, device=torch.device("meta"))
    configs = model.embeddings.ebc.embedding_bag_configs()
    assert configs[0].init_fn.keywords == {"bound": 0.25}
    bad = cfg.model_copy(update={"dense_mlp": MlpConfig(hidden_units=[64, 32])})
    with pytest.raises(ValueError, match="dense arch output width 32 must equal the embedding dim 16"):
        build_model(dlrm_spec, bad, device="meta")


def test_builder_rejects_wrong_group_types(din_spec, din_cfg, dlrm_spec) -> None:
    swapped = din_cfg.model.model_copy(
        update={"towers": [din_cfg.model.towers[0].model_copy(update={"group": "seq"})]}
    )
    with pytest.raises(ValueError, match="needs a deep group"):
        build_model(din_spec, swapped, device="meta")
    dlrm = DlrmConfig(
        type="dlrm",
        dense_mlp=MlpConfig(hidden_units=[16]),
        over_mlp=MlpConfig(hidden_units=[8]),
        sparse_group="dense",
    )
    with pytest.raises(ValueError, match="lists dense features"):
        build_model(dlrm_spec, dlrm, device="meta")
