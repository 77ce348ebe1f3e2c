"""ingest splits by time (or hashed fraction) and down-samples negatives; fit learns what FG needs."""

import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from recpipe.config import SplitConfig, load_config, parse_config
from recpipe.data.sources import open_source
from recpipe.features.fit import fit_feature_spec
from recpipe.features.spec import FeatureSpec, FeatureSpecError
from recpipe.stages import fit, ingest


def test_ingest_time_split_and_negative_downsampling(tmp_path):
    r = ingest.run(
        "synthetic:taobao?rows=20000&seed=2", tmp_path / "d", "clk", SplitConfig(), neg_sample_rate=0.25
    )
    train = pq.read_table(r.train_dir)
    ev = pq.read_table(r.eval_dir)
    assert (train.num_rows, ev.num_rows) == (r.train_rows, r.eval_rows)
    # The eval split is exactly the last day; training keeps every positive and ~25% of negatives.
    last_day = (
        max(train.column("time_stamp").to_numpy().max(), ev.column("time_stamp").to_numpy().max()) // 86400
    )
    assert (ev.column("time_stamp").to_numpy() // 86400 == last_day).all()
    assert (train.column("time_stamp").to_numpy() // 86400 < last_day).all()
    raw = pq.read_table(tmp_path / "d" / "raw")
    raw_train = raw.filter(np.asarray(raw.column("time_stamp").to_numpy() // 86400 < last_day))
    pos = int(raw_train.column("clk").to_numpy().sum())
    neg = raw_train.num_rows - pos
    assert int(train.column("clk").to_numpy().sum()) == pos
    assert r.negatives_dropped == neg - (train.num_rows - pos)
    assert 0.2 < (train.num_rows - pos) / neg < 0.3
    meta = json.loads((tmp_path / "d" / "_meta.json").read_text())
    assert meta["neg_sample_rate"] == 0.25 and meta["train_digest"] == r.train_digest
    assert 0.6 < r.oracle_auc < 0.9


def test_ingest_fraction_split_is_deterministic(tmp_path):
    a = ingest.run(
        "synthetic:criteo?rows=3000",
        tmp_path / "a",
        "label",
        SplitConfig(time_column=None, eval_fraction=0.2),
    )
    b = ingest.run(
        "synthetic:criteo?rows=3000",
        tmp_path / "b",
        "label",
        SplitConfig(time_column=None, eval_fraction=0.2),
    )
    assert a.train_rows + a.eval_rows == 3000 and 450 < a.eval_rows < 750
    assert (a.train_digest, a.eval_digest) == (b.train_digest, b.eval_digest)


@pytest.mark.parametrize(
    "source, message",
    [
        ("synthetic:movies?rows=10", "synthetic kind"),
        ("synthetic:taobao?rows=abc", "rows must be an integer"),
        (
            "synthetic:taobao?rows=100&max_vocab=5",
            r"unknown option\(s\) \['max_vocab'\]; synthetic taobao takes",
        ),
        ("synthetic:criteo?rows=100&users=5", r"unknown option\(s\) \['users'\]"),
        ("synthetic:taobao?rows=100&users=0", r"users must be in \[1, 1141730\]"),
        ("/nonexistent/data", "nonexistent"),
    ],
)
def test_ingest_bad_sources_name_the_parameter(tmp_path, source, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        ingest.run(source, tmp_path, "clk")


def test_synthetic_catalogue_options_reach_the_generator(tmp_path):
    taobao = ingest.run("synthetic:taobao?rows=3000&users=50&ads=40", tmp_path / "t", "clk")
    table = pq.read_table(taobao.train_dir, columns=["user_id", "adgroup_id"])
    assert pc.count_distinct(table["user_id"]).as_py() <= 50
    assert pc.count_distinct(table["adgroup_id"]).as_py() <= 40
    criteo = ingest.run(
        "synthetic:criteo?rows=3000&max_vocab=7",
        tmp_path / "c",
        "label",
        SplitConfig(time_column=None, eval_fraction=0.2),
    )
    c3 = pq.read_table(criteo.train_dir, columns=["C3"])["C3"]
    assert pc.count_distinct(c3).as_py() <= 7


def test_fit_writes_fg_json_roundtrip(tmp_path):
    r = ingest.run("synthetic:taobao?rows=5000", tmp_path / "d", "clk")
    res = fit.run("configs/din_taobao_small.yaml", r.train_dir, tmp_path / "fg.json")
    spec = FeatureSpec.load(tmp_path / "fg.json")
    assert spec.digest() == res.digest and res.tables == 16
    d = json.loads((tmp_path / "fg.json").read_text())
    d["version"] = 99
    (tmp_path / "new.json").write_text(json.dumps(d))
    with pytest.raises(FeatureSpecError, match="newer"):
        FeatureSpec.load(tmp_path / "new.json")


def test_fit_learns_vocab_quantiles_and_zscore(tmp_path):
    r = ingest.run(
        "synthetic:criteo?rows=4000",
        tmp_path / "d",
        "label",
        SplitConfig(time_column=None, eval_fraction=0.1),
    )
    d = yaml.safe_load(open("configs/dlrm_criteo_small.yaml"))
    d["features"][0]["normalizer"] = "log(x+3),zscore"
    d["features"][1] = {"kind": "raw", "name": "I2", "num_quantile_buckets": 8, "embedding_dim": 16}
    d["features"][13] = {"kind": "id", "name": "C1", "min_freq": 5, "embedding_dim": 16}
    d["feature_groups"][0]["features"].remove("I2")
    d["feature_groups"][1]["features"].append("I2")
    cfg = parse_config(d)
    spec = fit_feature_spec(cfg, open_source(r.train_dir))
    train = pq.read_table(r.train_dir)
    # zscore of log(x+3) with the training statistics
    x = train.column("I1").to_numpy(zero_copy_only=False)
    lx = np.log(np.where(np.isnan(x), 0.0, x) + 3)
    i1 = spec.dense[0]
    assert i1.mean == pytest.approx(lx.mean(), rel=1e-6) and i1.std == pytest.approx(lx.std(), rel=1e-6)
    i2 = spec.feature("I2")
    assert 1 <= len(i2.boundaries) <= 7 and i2.mapping.size == len(i2.boundaries) + 1
    c1 = spec.feature("C1")
    vals, counts = np.unique(np.asarray(train.column("C1").drop_null()), return_counts=True)
    assert set(c1.mapping.vocab) == set(vals[counts >= 5].tolist())
    assert c1.mapping.size == len(c1.mapping.vocab) + 1
    assert load_config("configs/dlrm_criteo_small.yaml")  # the shipped file is untouched


def test_ingest_and_fit_refuse_data_without_the_configs_columns_before_reading_rows(tmp_path):
    # Issue 17: ingest and fit accepted a Taobao config on Criteo rows; train failed ~35 s later.
    from recpipe.features.build import build_feature_spec
    from recpipe.features.schema_check import SchemaMismatch

    root = Path(__file__).resolve().parents[2]
    taobao = root / "configs" / "din_taobao_small.yaml"
    spec = build_feature_spec(load_config(taobao))
    with pytest.raises(SchemaMismatch, match=r"missing columns \['user_id', 'cms_segid'") as err:
        ingest.run("synthetic:criteo?rows=5000", tmp_path / "d", "clk", SplitConfig(), spec=spec)
    assert "the data has 41 columns" in str(err.value)
    assert not (tmp_path / "d" / "train").exists()  # nothing was generated or written
    criteo = ingest.run("synthetic:criteo?rows=500", tmp_path / "c", "label", SplitConfig(eval_fraction=0.2))
    with pytest.raises(SchemaMismatch, match=r"missing columns \['user_id'"):
        fit.run(taobao, criteo.train_dir, tmp_path / "fg.json")
    assert not (tmp_path / "fg.json").exists()


def test_ingest_shows_progress_on_a_terminal(tmp_path, monkeypatch):
    import io
    import sys

    import recpipe.data.types as types

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(types, "PROGRESS_DELAY_S", 0.0)
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    ingest.run("synthetic:criteo?rows=3000", tmp_path / "d", "label", SplitConfig(eval_fraction=0.2))
    assert "ingest: " in err.getvalue() and "rows" in err.getvalue()
