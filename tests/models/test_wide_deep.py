"""DeepFM and WideAndDeep (TorchEasyRec's ``deepfm`` and ``wide_and_deep``) and the WIDE group they read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_batches import capped_spec, dlrm_batch, make_kjt, train_losses

from recpipe.batch import Batch
from recpipe.config import ConfigError, load_config, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.spec import FeatureSpecError
from recpipe.models.blocks.fm import FactorizationMachine
from recpipe.models.protocol import DenseArchModule, RankingModel
from recpipe.models.registry import build_model
from recpipe.models.wide_and_deep.model import WideDeep

ROOT = Path(__file__).resolve().parents[2]
DEEPFM = ROOT / "configs" / "deepfm_criteo_small.yaml"
WIDE_AND_DEEP = ROOT / "configs" / "wide_and_deep_criteo_small.yaml"


def _batch(spec, n: int, seed: int) -> Batch:
    """dlrm_batch's learnable rows, with each wide key carrying its feature's ids (what FG emits)."""
    b = dlrm_batch(spec, n, torch.Generator().manual_seed(seed))
    per = b.sparse.to_dict()
    rows = {
        k: [jt.values()[s:e].tolist() for s, e in zip(jt.offsets()[:-1], jt.offsets()[1:])]
        for k, jt in per.items()
    }
    keys = spec.sparse_keys()
    full = {k: rows.get(k) or rows[k.removesuffix("__wide")] for k in keys}
    return Batch(dense=b.dense, sparse=make_kjt(keys, full), labels=b.labels)


def test_fm_is_the_sum_of_pairwise_products() -> None:
    """TorchEasyRec's FactorizationMachine: 0.5 · ((Σ v)² − Σ v²) = Σ_{i<j} v_i ⊙ v_j."""
    v = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    pairs = sum(v[:, i] * v[:, j] for i in range(5) for j in range(i + 1, 5))
    torch.testing.assert_close(FactorizationMachine()(v), pairs)


def test_wide_group_gets_its_own_dim_4_tables() -> None:
    """TorchEasyRec's WIDE group: each feature's table ``<emb_name>_wide`` of ``wide_embedding_dim`` (4)."""
    spec = build_feature_spec(load_config(DEEPFM))
    tables = {t.name: t for t in spec.tables()}
    assert tables["C1_wide"].embedding_dim == 4 and tables["C1"].embedding_dim == 16
    assert tables["C1_wide"].num_embeddings == tables["C1"].num_embeddings
    assert tables["C1_wide"].feature_names == ["C1__wide"]
    assert spec.group("wide").sparse == [f"C{i}__wide" for i in range(1, 27)]
    assert spec.feature("C7__wide").mapping == spec.feature("C7").mapping  # the same ids


def test_deepfm_is_wide_plus_fm_plus_deep_without_final() -> None:
    """Without ``final``: logit = Σ wide + Σ FM + Linear(deep) (TorchEasyRec's DeepFM.predict)."""
    data = load_config(DEEPFM).to_dict()
    data["model"].pop("final")
    cfg = parse_config(data)
    spec = capped_spec(build_feature_spec(cfg))
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    assert isinstance(model, WideDeep) and isinstance(model, RankingModel)
    batch = _batch(spec, 6, 1)
    emb = model.sparse_arch(batch.sparse)
    wide = sum(emb[f"C{i}__wide"].sum(1) for i in range(1, 27))
    fm = FactorizationMachine()(torch.stack([emb[f"C{i}"] for i in range(1, 27)], 1)).sum(1)
    deep_in = torch.cat([emb[f"C{i}"] for i in range(1, 27)] + [batch.dense], dim=1)
    deep = model.dense.logit(model.dense.deep(deep_in)).squeeze(-1)
    with torch.no_grad():
        torch.testing.assert_close(model(batch.dense, batch.sparse), wide + fm + deep)


def test_final_mlp_takes_wide_fm_and_deep(tmp_path) -> None:
    """With ``final``: its input is ``1 + D + deep`` wide (TorchEasyRec: ``1 + fm dim + final_dim``); the
    dense arch alone (what export serves) gives the model's logits."""
    cfg = load_config(DEEPFM)
    spec = capped_spec(build_feature_spec(cfg))
    model = build_model(spec, cfg.model)
    assert model.dense.final.in_features == 1 + 16 + 32
    batch = _batch(spec, 5, 2)
    emb = model.sparse_arch(batch.sparse)
    dense_part = DenseArchModule(model)
    with torch.no_grad():
        torch.testing.assert_close(
            dense_part(batch.dense, *[emb[n] for n in model.dense_input_names()[1:]]),
            model(batch.dense, batch.sparse),
        )


@pytest.mark.parametrize("config", [DEEPFM, WIDE_AND_DEEP])
def test_it_learns(config) -> None:
    cfg = load_config(config)
    spec = capped_spec(build_feature_spec(cfg))
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    batches = [_batch(spec, 128, s) for s in range(4)]
    losses = train_losses(model, batches, 40, lambda logits: None)
    assert losses[-1] < 0.7 * losses[0]


def test_wide_and_deep_has_no_fm() -> None:
    cfg = load_config(WIDE_AND_DEEP)
    model = build_model(capped_spec(build_feature_spec(cfg)), cfg.model)
    assert model.dense.fm is None and model.dense.final is None
    assert model.dense.deep.in_features == 26 * 16 + 13


def _with(config, **changes):
    data = load_config(config).to_dict()
    for key, value in changes.items():
        if key == "groups":
            data["feature_groups"] = value(data["feature_groups"])
        else:
            data["model"][key] = value
    return parse_config(data)


def test_config_and_group_errors() -> None:
    """Wrong group types, an unknown group, dense features in a wide group (TorchEasyRec: "dense feature
    [..] should not be configured in wide group") and an FM group of mixed dims are refused by name."""
    with pytest.raises(ConfigError, match="'deep' is deep, not wide"):
        _with(DEEPFM, wide_group="deep")
    with pytest.raises(ConfigError, match="'nowhere'"):
        _with(WIDE_AND_DEEP, deep_group="nowhere")
    with pytest.raises(ConfigError, match="embedding_dim is a setting of wide groups"):
        _with(DEEPFM, groups=lambda g: [{**g[1], "embedding_dim": 2}, g[0], g[2]])
    cfg = _with(DEEPFM, groups=lambda g: [{**g[0], "features": ["I1", "C1"]}, *g[1:]])
    with pytest.raises(FeatureSpecError, match=r"wide group 'wide' lists dense features \['I1'\]"):
        build_feature_spec(cfg)
    cfg = _with(DEEPFM, fm_group="deep")
    with pytest.raises(ValueError, match="FM group 'deep' lists dense features"):
        build_model(capped_spec(build_feature_spec(cfg)), cfg.model)


def test_wide_embedding_dim_is_the_groups() -> None:
    cfg = _with(WIDE_AND_DEEP, groups=lambda g: [{**g[0], "embedding_dim": 8}, *g[1:]])
    spec = build_feature_spec(cfg)
    assert {t.embedding_dim for t in spec.tables() if t.name.endswith("_wide")} == {8}
