"""The model registry: each model declared by one module (config section, group check, builder)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from recpipe.config import ConfigError, MlpConfig, parse_config
from recpipe.config.catalogue import MODELS, Declared
from recpipe.config.root import config_class, model_names
from recpipe.models.dlrm import model as dlrm_model
from recpipe.models.dlrm.config import DlrmConfig
from recpipe.models.dlrm.model import DLRM
from recpipe.models.multi_tower_din.config import MultiTowerDinConfig
from recpipe.models.multi_tower_din.model import MultiTowerDIN
from recpipe.models.protocol import RankingModel
from recpipe.models.registry import build_model, builder

ROOT = Path(__file__).resolve().parents[2]


def _raw(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


def test_registry_is_explicit() -> None:
    assert list(MODELS) == [
        "multi_tower_din",
        "dlrm",
        "multi_tower",
        "deepfm",
        "wide_and_deep",
        "mmoe",
        "dbmtl",
        "ple",
        "dcn_v2",
        "dcn_v1",
        "mask_net",
        "xdeepfm",
        "wukong",
        "pepnet",
        "simple_multi_task",
        "rocket_launching",
        "dssm",
        "dssm_v2",
        "mind",
    ]
    assert config_class("dlrm") is DlrmConfig and config_class("multi_tower_din") is MultiTowerDinConfig


def test_config_loading_imports_no_torch() -> None:
    code = (
        "import sys; from recpipe.config import load_config; "
        "[load_config(f'configs/{n}.yaml') for n in ('din_taobao_small', 'dlrm_criteo_small')]; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_model_section_errors_name_the_key_path() -> None:
    d = _raw("dlrm_criteo_small.yaml")
    d["model"]["type"] = "wide_deep"
    with pytest.raises(
        ConfigError,
        match=r"model: Value error, unknown model type 'wide_deep'; known: \['dbmtl', 'dcn_v1', 'dcn_v2', 'deepfm', 'dlrm'",
    ):
        parse_config(d)
    d = _raw("dlrm_criteo_small.yaml")
    d["model"]["over_mlp"]["activation"] = "tanh"
    d["model"]["towers"] = []
    with pytest.raises(ConfigError) as e:
        parse_config(d, "x.yaml")
    assert "model.over_mlp.activation: Input should be 'relu'" in str(e.value)
    assert "model.towers: Extra inputs are not permitted" in str(e.value)
    d = _raw("din_taobao_small.yaml")
    del d["model"]["type"]
    with pytest.raises(ConfigError, match="model: Value error, must be a mapping with a model type"):
        parse_config(d)


def test_each_model_checks_its_group_references() -> None:
    d = _raw("din_taobao_small.yaml")
    d["model"]["din_towers"][0]["group"] = "history"
    with pytest.raises(
        ConfigError, match=r"model refers to unknown feature groups \['history'\]; defined: \['deep', 'seq'\]"
    ):
        parse_config(d)
    d = _raw("dlrm_criteo_small.yaml")
    d["model"]["sparse_group"] = "cats"
    with pytest.raises(ConfigError, match=r"unknown feature groups \['cats'\]"):
        parse_config(d)


def test_models_declared_by_entry_points_and_incomplete_declarations(
    declare_model: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown model type 'half'; known: \['dbmtl', 'dcn_v1', 'dcn_v2', 'deepfm', 'dlrm', 'dssm', 'dssm_v2', 'mask_net', 'mind', 'mmoe', 'multi_tower', "
        r"'multi_tower_din', 'pepnet', 'ple', 'rocket_launching', 'simple_multi_task', 'wide_and_deep', 'wukong', 'xdeepfm'\]",
    ):
        builder("half")
    declare_model("half = recpipe.models.blocks.mlp")  # a module that declares no model
    assert model_names() == sorted([*MODELS, "half"])
    with pytest.raises(
        ValueError,
        match=r"recpipe.models.blocks.mlp:Config: module recpipe.models.blocks.mlp has no 'Config'",
    ):
        config_class("half")
    with pytest.raises(
        ValueError, match=r"recpipe.models.blocks.mlp:build: module recpipe.models.blocks.mlp has no 'build'"
    ):
        builder("half")
    entry = Declared("recpipe.models.dlrm.config:DlrmConfig", "recpipe.models.dlrm.model:build")
    monkeypatch.setitem(MODELS, "half", entry)  # the in-tree line wins
    assert builder("half") is dlrm_model.build


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
    model = dlrm_model.build(dlrm_spec, cfg, device=torch.device("meta"))
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
