"""``recpipe config import-tzrec``: writes validated YAML; exits 2 listing every problem by line."""

from tzrec_fixtures import small_din

from recpipe.cli.main import main
from recpipe.config import load_config
from recpipe.tzrec import import_tzrec_file


def test_import_tzrec_writes_yaml_that_loads_as_the_imported_config(dlrm_config, tmp_path, capsys):
    out = tmp_path / "sub" / "dlrm.yaml"
    assert main(["config", "import-tzrec", str(dlrm_config), "-o", str(out), "--name", "criteo-dlrm"]) == 0
    cfg = load_config(out)
    assert cfg == import_tzrec_file(dlrm_config, name="criteo-dlrm").config
    err = capsys.readouterr().err
    assert f"wrote {out}: dlrm, 39 features, 2 feature groups" in err
    assert "note: line 5: model_dir: ignored" in err


def test_import_tzrec_to_stdout(din_config, capsys):
    assert main(["config", "import-tzrec", str(din_config), "-o", "-"]) == 0
    assert "name: multi_tower_din_taobao\n" in capsys.readouterr().out


def test_import_tzrec_lists_every_problem_and_exits_2(tmp_path, capsys):
    src = tmp_path / "bad.config"
    src.write_text(small_din("use_mask: true", "use_pareto_loss_weight: true"))
    out = tmp_path / "bad.yaml"
    assert main(["config", "import-tzrec", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"recpipe config: error: cannot import TorchEasyRec config {src}: 2 problems")
    assert "  line 27: feature_configs[2].sequence_feature.features[0].id_feature.use_mask: " in err
    assert "  line 45: model_config.use_pareto_loss_weight: " in err
    assert not out.exists()


def test_drop_custom_features_is_an_explicit_option_naming_each_dropped(tmp_path, capsys):
    custom = 'feature_configs { custom_feature { feature_name: "c1" operator_name: "EditDistance" } }\n'
    src = tmp_path / "custom.config"
    src.write_text(small_din().replace("model_config {", custom + "model_config {", 1))
    out = tmp_path / "custom.yaml"
    assert main(["config", "import-tzrec", str(src), "-o", str(out)]) == 2
    assert "custom_feature is not supported" in capsys.readouterr().err and not out.exists()
    assert main(["config", "import-tzrec", str(src), "-o", str(out), "--drop-custom-features"]) == 0
    assert "dropped (--drop-custom-features): custom_feature 'c1'" in capsys.readouterr().err
    assert "c1" not in {f.name for f in load_config(out).features}
