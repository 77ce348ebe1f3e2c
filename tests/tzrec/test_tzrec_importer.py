"""TorchEasyRec configs for MultiTowerDIN/Taobao and DLRM/Criteo import to the shipped recpipe configs;
unsupported fields and values are all reported by line."""

import pytest
from tzrec_fixtures import small_din

from recpipe.config import ConfigError, flatten, load_config
from recpipe.features.build import build_feature_spec
from recpipe.tzrec import TzrecImportError, import_tzrec, import_tzrec_file


def _differences(a, b) -> set[str]:
    x, y = flatten(a.to_dict()), flatten(b.to_dict())
    return {k for k in x.keys() | y.keys() if x.get(k) != y.get(k)}


# The shipped configs checkpoint by time (every 600 s, written in the background: issue 28); an import keeps
# TorchEasyRec's step cadence (save_checkpoints_steps: 2000 in both examples).
SHIPPED_CADENCE = {"checkpoint_every_steps": None, "checkpoint_every_seconds": 600.0}
CADENCE_KEYS = {"train.checkpoint_every_steps", "train.checkpoint_every_seconds"}


def test_din_taobao_imports_to_the_shipped_config(din_config):
    imported = import_tzrec_file(din_config, name="taobao-multi_tower_din")
    shipped = load_config("configs/din_taobao.yaml")
    cfg = imported.config
    assert len(cfg.features) == 17 and sum(f.kind == "id" for f in cfg.features) == 15
    assert cfg.features == shipped.features  # feature by feature, in order
    assert cfg.feature_groups == shipped.feature_groups
    assert cfg.model == shipped.model
    assert cfg.train.checkpoint_every_steps == 2000 and cfg.train.checkpoint_every_seconds is None
    assert cfg.train.model_copy(update=SHIPPED_CADENCE) == shipped.train
    # Everything else equal too, but for what TorchEasyRec does not carry (recpipe defaults) and the
    # inputs the shipped config leaves to `recpipe ingest`.
    assert _differences(cfg, shipped) == {
        "data.train",
        "data.eval",
        "data.group_column",  # recpipe-only; grouped_auc's key became eval.gauc_group
        "data.split.time_column",  # TorchEasyRec names no time column: a hashed split at ingest
        "data.split.eval_fraction",
        "eval.gate.min_auc",
        "tracking.registered_model",
        *CADENCE_KEYS,
    }
    assert cfg.data.train == "odps://{PROJECT}/tables/taobao_multitask_sample_v1_train"
    assert cfg.data.eval == "odps://{PROJECT}/tables/taobao_multitask_sample_v1/ds=20170513"
    assert cfg.data.params == {"PROJECT": None}
    # Each sub-feature of click_50_seq has its own table, as in TorchEasyRec: 19 tables, 4.46M rows.
    tables = {t.name for t in build_feature_spec(cfg).tables()}
    assert len(tables) == 19 and "click_50_seq__brand" in tables
    assert cfg.eval.gauc_group == "user_id"
    assert [(n.line, n.path) for n in imported.notes] == [(7, "model_dir")]


def test_dlrm_criteo_imports_to_the_shipped_config(dlrm_config):
    imported = import_tzrec_file(dlrm_config, name="criteo-dlrm")
    shipped = load_config("configs/dlrm_criteo.yaml")
    cfg = imported.config
    assert [f.normalizer for f in cfg.features[:13]] == ["log(x+3)"] * 13
    assert [f.hash_bucket_size for f in cfg.features[13:]] == [1_000_000] * 26
    assert cfg.features == shipped.features
    assert cfg.feature_groups == shipped.feature_groups
    assert cfg.model == shipped.model
    assert cfg.train.checkpoint_every_steps == 2000 and cfg.train.checkpoint_every_seconds is None
    assert cfg.train.model_copy(update=SHIPPED_CADENCE) == shipped.train
    assert _differences(cfg, shipped) == {
        "data.train",
        "data.eval",
        "eval.gate.min_auc",
        "tracking.registered_model",
        *CADENCE_KEYS,
    }


def test_name_defaults_to_model_dir_and_yaml_round_trips(din_config, tmp_path):
    imported = import_tzrec_file(din_config)
    assert imported.config.name == "multi_tower_din_taobao"
    out = tmp_path / "din.yaml"
    out.write_text(imported.to_yaml())
    assert load_config(out) == imported.config
    text = out.read_text()
    assert text.startswith(f"# Imported from {din_config}")
    assert "#   line 7: model_dir: ignored" in text
    assert "- {kind: id, name: pid, hash_bucket_size: 20, embedding_dim: 16}" in text


def test_two_unsupported_fields_are_both_listed_with_their_lines():
    # line 27 inside the sequence's sub-feature, line 45 inside model_config (lines 1-13: HEAD)
    text = small_din("use_mask: true", "use_pareto_loss_weight: true")
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text, source="two.config")
    problems = err.value.problems
    assert [(p.line, p.path) for p in problems] == [
        (27, "feature_configs[2].sequence_feature.features[0].id_feature.use_mask"),
        (45, "model_config.use_pareto_loss_weight"),
    ]
    message = str(err.value)
    assert message.startswith("cannot import TorchEasyRec config two.config: 2 problems")
    assert "line 27: " in message and "'use_mask'" in message
    assert "line 45: " in message and "'use_pareto_loss_weight'" in message


def test_values_recpipe_cannot_honour_are_all_listed():
    text = (
        small_din()
        .replace("fg_mode: FG_DAG", "fg_mode: FG_BUCKETIZE")
        .replace("adam_optimizer { lr: 0.001 }", "sgd_optimizer { lr: 0.1 }")
        .replace('expression: "user:user_id"', 'expression: "feature:user_id"')
        .replace("final { hidden_units: [8] }", 'final { hidden_units: [8] activation: "nn.PReLU" }')
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    found = {(p.line, p.path.rsplit(".", 1)[-1]) for p in err.value.problems}
    assert found == {
        (6, "momentum"),  # TorchEasyRec's dense SGD defaults to 0.9; not written, so its parent's line
        (11, "fg_mode"),
        (14, "expression"),
        (43, "activation"),
    }


def test_dlrm_arch_with_sparse_defaults_to_true_as_in_tzrec(dlrm_config):
    text = dlrm_config.read_text()
    assert import_tzrec(text).config.model.arch_with_sparse is False
    assert import_tzrec(text.replace("arch_with_sparse: false", "")).config.model.arch_with_sparse is True


def test_dlrm_needs_raw_normalizers_it_can_apply(dlrm_config):
    text = dlrm_config.read_text().replace(
        'normalizer: "method=expression,expr=log(x+3)"',
        'normalizer: "method=zscore,mean=0,standard_deviation=1"',
        1,
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    paths = [p.path for p in err.value.problems]
    assert paths == ["feature_configs[0].raw_feature.normalizer"]


def test_missing_required_fields_and_undefined_group_features_are_located():
    text = (
        small_din()
        .replace(' expression: "user:user_id"', "")
        .replace('feature_names: "click_50_seq__adgroup_id"', 'feature_names: "click_50_seq__brand"')
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    assert [(p.line, p.path, p.message) for p in err.value.problems] == [
        (14, "feature_configs[0].id_feature.expression", "required field 'expression' is missing"),
        (
            37,
            "model_config.feature_groups[1].feature_names[1]",
            "feature 'click_50_seq__brand' is not defined in feature_configs",
        ),
    ]


def test_type_errors_come_from_protobufs_parser_with_their_line():
    with pytest.raises(TzrecImportError, match=r"line 9: .*batch_size.*Couldn't parse integer"):
        import_tzrec(small_din().replace("batch_size: 64", 'batch_size: "many"'))


def test_csv_input_maps_to_csv_options_and_odps_uris_are_checked():
    text = (
        small_din()
        .replace("dataset_type: ParquetDataset", "dataset_type: CsvDataset")
        .replace(
            'label_fields: "clk"',
            'label_fields: "clk"\n    delimiter: "\\t"\n    input_fields { input_name: "clk" input_type: INT32 }\n'
            '    input_fields { input_name: "user_id" }',
        )
    )
    csv = import_tzrec(text).config.data.csv
    assert (csv.delimiter, csv.header, csv.columns, csv.column_types) == (
        "\t",
        False,
        ["clk", "user_id"],
        {"clk": "int64"},
    )
    bad = (
        small_din()
        .replace("ParquetDataset", "OdpsDataset")
        .replace('"data/train"', '"odps://{PROJECT}/views/t"')  # a placeholder is fine, "views" not
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(bad)
    assert [(p.line, p.path) for p in err.value.problems] == [(1, "train_input_path"), (2, "eval_input_path")]
    assert "bad ODPS URI" in err.value.problems[0].message


def test_recpipe_validation_still_applies():
    text = small_din().replace("hidden_units: [16, 8]", "hidden_units: []")
    with pytest.raises(
        ConfigError, match=r"model\.towers\.0\.mlp\.hidden_units: List should have at least 1 item"
    ):
        import_tzrec(text)


def test_unsupported_fields_and_values_are_reported_in_one_error():
    text = small_din("use_mask: true").replace("fg_mode: FG_DAG", "fg_mode: FG_BUCKETIZE")
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    assert [(p.line, p.path) for p in err.value.problems] == [
        (11, "data_config.fg_mode"),
        (27, "feature_configs[2].sequence_feature.features[0].id_feature.use_mask"),
    ]


def test_optimizers_schedule_and_mlp_options():
    text = (
        small_din()
        .replace("adagrad_optimizer { lr: 0.01 }", "rowwise_adagrad_optimizer { lr: 0.05 }")
        .replace("adam_optimizer { lr: 0.001 }", "sgd_optimizer { lr: 0.1 momentum: 0 weight_decay: 0.0001 }")
        .replace("constant_learning_rate {} }\n}", "constant_learning_rate {} }\n    num_steps: 500\n}", 1)
        .replace(
            "mlp { hidden_units: [16, 8] }",
            'mlp { hidden_units: [16, 8] activation: "nn.GELU" use_bn: true dropout_ratio: [0.1, 0.1] }',
        )
    )
    cfg = import_tzrec(text).config
    assert cfg.train.sparse_optimizer.model_dump() == {
        "type": "rowwise_adagrad",
        "lr": 0.05,
        "eps": 1e-8,
        "weight_decay": 0.0,
        "betas": (0.9, 0.999),  # adam's setting, at its default
        "initial_accumulator_value": 0.0,
        "gradient_clipping": False,
        "max_gradient": 1.0,
    }
    assert (cfg.train.dense_optimizer.type, cfg.train.dense_optimizer.weight_decay) == ("sgd", 0.0001)
    assert (cfg.train.max_steps, cfg.train.epochs) == (500, 1)
    assert (cfg.train.log_every_steps, cfg.train.checkpoint_every_steps) == (100, 1000)  # TorchEasyRec's
    mlp = cfg.model.towers[0].mlp
    assert (mlp.activation, mlp.batch_norm, mlp.dropout) == ("gelu", True, 0.1)
    assert cfg.model.final.activation == "relu"
