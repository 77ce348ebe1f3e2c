"""Config validation: shipped configs load; errors name the key path and the allowed values."""

from pathlib import Path

import pytest
import yaml

from recpipe.config import ConfigError, load_config, parse_config
from recpipe.features.build import build_feature_spec

CONFIGS = sorted(Path("configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load(path):
    cfg = load_config(path)
    spec = build_feature_spec(cfg)
    assert spec.sparse


def test_din_taobao_reproduces_the_seed():
    cfg = load_config("configs/din_taobao.yaml")
    spec = build_feature_spec(cfg)
    ids = [f for f in cfg.features if f.kind == "id"]
    assert len(ids) == 15
    buckets = {f.name: f.num_buckets for f in ids if f.num_buckets}
    assert buckets["user_id"] == 1141730 and buckets["adgroup_id"] == 846812 and buckets["cate_id"] == 12961
    assert buckets["brand"] == 461498 and buckets["campaign_id"] == 423438 and buckets["customer"] == 255877
    pid = next(f for f in ids if f.name == "pid")
    assert pid.hash_bucket_size == 20
    price = next(f for f in cfg.features if f.name == "price")
    assert price.kind == "raw" and len(price.boundaries) == 100
    seq = next(f for f in cfg.features if f.kind == "sequence")
    assert (seq.name, seq.sequence_length, seq.delimiter, seq.sub_delimiter) == (
        "click_50_seq",
        100,
        "|",
        "\x03",
    )
    assert [s.name for s in seq.sub_features] == ["adgroup_id", "cate_id", "brand"]
    tables = {t.name: t for t in spec.tables()}
    # As in TorchEasyRec, the history's sub-features have their own tables (no embedding_name shares one).
    assert tables["adgroup_id"].feature_names == ["adgroup_id"]
    assert tables["click_50_seq__adgroup_id"].feature_names == ["click_50_seq__adgroup_id"]
    assert tables["click_50_seq__adgroup_id"].sequence and not tables["user_id"].sequence
    # 3,142,478 id rows, 1,321,271 more for the three history tables (+ the 101 price buckets).
    rows = sum(t.num_embeddings for t in spec.tables())
    assert rows - tables["price"].num_embeddings == 3_142_478 + 1_321_271
    m = cfg.model
    assert m.towers[0].mlp.hidden_units == [512, 256, 128]
    assert m.din_towers[0].attn_mlp.hidden_units == [256, 64]
    assert m.final.hidden_units == [64]
    assert (cfg.train.sparse_optimizer.type, cfg.train.sparse_optimizer.lr) == ("adagrad", 0.001)
    assert (cfg.train.dense_optimizer.type, cfg.train.dense_optimizer.lr) == ("adam", 0.001)
    assert cfg.data.batch_size == 8192 and cfg.data.label == "clk"
    assert [g.name for g in cfg.feature_groups] == ["deep", "seq"]


def test_dlrm_criteo_shape():
    cfg = load_config("configs/dlrm_criteo.yaml")
    spec = build_feature_spec(cfg)
    assert len(spec.dense) == 13 and all(d.log_offset == 3.0 for d in spec.dense)
    assert len(spec.sparse) == 26
    assert cfg.model.dense_mlp.hidden_units[-1] == 16


def _raw(path="configs/din_taobao_small.yaml"):
    return yaml.safe_load(Path(path).read_text())


def test_error_names_key_path_and_allowed_values():
    d = _raw()
    d["train"]["sparse_optimizer"]["type"] = "adadelta"
    with pytest.raises(ConfigError) as e:
        parse_config(d, "x.yaml")
    msg = str(e.value)
    assert "x.yaml" in msg and "train.sparse_optimizer.type" in msg
    assert "'adagrad'" in msg and "adadelta" in msg


def test_error_unknown_key_and_bad_group_reference():
    d = _raw()
    d["data"]["batchsize"] = 3
    with pytest.raises(ConfigError, match=r"data\.batchsize"):
        parse_config(d)
    d = _raw()
    d["feature_groups"][0]["features"].append("nope")
    with pytest.raises(ConfigError, match="unknown features.*nope"):
        parse_config(d)


def test_error_two_id_mappings_and_bad_normalizer():
    d = _raw()
    d["features"][0]["hash_bucket_size"] = 10
    with pytest.raises(ConfigError, match="exactly one id mapping"):
        parse_config(d)
    d = _raw("configs/dlrm_criteo_small.yaml")
    d["features"][0]["normalizer"] = "sqrt(x)"
    with pytest.raises(ConfigError, match="normalizer"):
        parse_config(d)
    d = _raw("configs/dlrm_criteo_small.yaml")
    d["features"][0]["default"] = -3.0  # log(-3 + 3) is undefined: every null row would fail FG
    with pytest.raises(ConfigError, match=r"features\.0.*default -3 is outside the domain of log\(x\+3\)"):
        parse_config(d)
    d["features"][0]["default"] = -2.5
    assert parse_config(d).features[0].default == -2.5


def test_missing_file_and_overrides(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    cfg = load_config("configs/din_taobao_small.yaml", overrides={"data.batch_size": 7})
    assert cfg.data.batch_size == 7
    assert cfg.digest() != load_config("configs/din_taobao_small.yaml").digest()


def test_drift_limits_name_known_features_and_are_set_once():
    d = _raw()
    d["eval"]["gate"].update({"max_psi": 0.25, "max_psi_per_feature": {"price": 0.1, "click_50_seq": 0.2}})
    gate = parse_config(d).eval.gate
    assert (gate.max_psi, gate.max_psi_per_feature) == (0.25, {"price": 0.1, "click_50_seq": 0.2})
    d["eval"]["gate"]["max_psi_per_feature"] = {"prize": 0.1}
    with pytest.raises(
        ConfigError, match=r"max_psi_per_feature names unknown features \['prize'\]; known: .*'price'"
    ):
        parse_config(d)
    d["eval"]["gate"]["max_psi_per_feature"] = {"price": -0.1}
    with pytest.raises(ConfigError, match=r"eval\.gate\.max_psi_per_feature\.price"):
        parse_config(d)
    d = _raw()
    d["eval"]["task_gates"] = {"clk": {"max_psi": 0.2}}
    with pytest.raises(
        ConfigError, match=r"eval\.task_gates \['clk'\] set max_psi.*set them once, in eval\.gate"
    ):
        parse_config(d)


def test_gate_overrides_take_max_psi_as_a_number_at_least_zero():
    from recpipe.config import ParameterError, gate_overrides

    assert gate_overrides(max_psi="0.3", min_auc="") == {"max_psi": 0.3}
    assert gate_overrides(max_psi=2.5) == {"max_psi": 2.5}  # PSI is not bounded by 1
    for bad in ("-0.1", "lots", "nan"):
        with pytest.raises(ParameterError, match="max_psi"):
            gate_overrides(max_psi=bad)
    with pytest.raises(ParameterError, match=r"min_auc.*in \[0, 1\]"):
        gate_overrides(min_auc="1.5")


def test_gate_fields_of_the_other_kind_of_model_are_refused() -> None:
    # A ranking model's gate ignores recall, a retrieval model's AUC: either set is probably a mistake.
    retrieval = Path(__file__).resolve().parents[1] / "configs" / "dssm_retrieval_small.yaml"
    with pytest.raises(ConfigError, match=r"eval.gate.min_auc.*'dssm' is a retrieval model.*min_recall_at_k"):
        load_config(retrieval, {"eval.gate.min_auc": 0.6})
    with pytest.raises(ConfigError, match=r"eval.threshold.*retrieval model"):
        load_config(retrieval, {"eval.threshold": 0.3})
    with pytest.raises(ConfigError, match=r"eval.gate.recall_k 20 is not one of eval.recall_at_k \[10, 50\]"):
        load_config(retrieval, {"eval.gate.recall_k": 20})
    cfg = load_config(retrieval, {"eval.gate.recall_k": 10, "eval.gate.max_recall_drop": 0.0})
    assert (cfg.eval.gate.recall_k, cfg.eval.gate.min_recall_at_k, cfg.eval.gate.max_recall_drop) == (
        10,
        0.2,
        0.0,
    )
    din = Path(__file__).resolve().parents[0] / "pipelines" / "data" / "tiny_din.yaml"
    with pytest.raises(ConfigError, match=r"eval.gate.max_recall_drop.*is a ranking model.*min_auc"):
        load_config(din, {"eval.gate.max_recall_drop": 0.1})
    with pytest.raises(ConfigError, match=r"eval.task_gates.clk.min_recall_at_k"):
        load_config(din, {"eval.task_gates": {"clk": {"min_recall_at_k": 0.1}}})
