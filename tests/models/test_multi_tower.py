"""MultiTower (TorchEasyRec's ``multi_tower``): MultiTowerDIN's deep towers and final MLP, no DIN tower."""

from __future__ import annotations

import pytest
import torch
from model_batches import capped_spec, din_batch, train_losses

from recpipe.config import ConfigError, parse_config
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.registry import build_model

TOWERS = [{"group": "deep", "mlp": {"hidden_units": [32, 16]}}]


def _cfg(din_cfg, **model):
    data = din_cfg.to_dict()
    data["model"] = {"type": "multi_tower", "towers": TOWERS, "final": {"hidden_units": [8]}, **model}
    return parse_config(data)


def test_towers_and_final_without_din(din_cfg, din_spec) -> None:
    cfg = _cfg(din_cfg)
    torch.manual_seed(0)
    model = build_model(capped_spec(din_spec), cfg.model)
    assert isinstance(model, MultiTowerDIN) and model.dense.din_towers_spec == []
    deep = din_spec.group("deep").sparse
    assert model.dense_input_names() == ["dense", *deep]  # no query/values/offsets of a history
    assert model.dense.final.in_features == 16
    batch = din_batch(capped_spec(din_spec), 8, torch.Generator().manual_seed(3))
    logits = model(batch.dense, batch.sparse)
    assert logits.shape == (8,)
    torch.testing.assert_close(logits, model.dense_arch(batch.dense, model.sparse_arch(batch.sparse)))


def test_it_learns(din_cfg, din_spec) -> None:
    spec = capped_spec(din_spec)
    torch.manual_seed(0)
    model = build_model(spec, _cfg(din_cfg).model)
    batches = [din_batch(spec, 64, torch.Generator().manual_seed(s)) for s in range(4)]
    losses = train_losses(model, batches, 40, lambda logits: None)
    assert losses[-1] < 0.8 * losses[0]


def test_config_errors(din_cfg) -> None:
    with pytest.raises(ConfigError, match=r"model\.towers: List should have at least 1 item"):
        _cfg(din_cfg, towers=[])
    with pytest.raises(ConfigError, match="'nowhere'"):
        _cfg(din_cfg, towers=[{"group": "nowhere", "mlp": {"hidden_units": [4]}}])
    with pytest.raises(ConfigError, match="din_towers"):
        _cfg(din_cfg, din_towers=[])  # MultiTower has no DIN towers to configure
