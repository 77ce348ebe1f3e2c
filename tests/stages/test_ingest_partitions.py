"""ingest over partitions (eval = the newest selected one) and over a split the user already has (kept as
given), with the partition run tags recorded on a real sqlite MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from recpipe import tracking
from recpipe.cli.main import main
from recpipe.config import DataConfig, SplitConfig, load_config
from recpipe.data.synthetic import generate
from recpipe.stages import ingest

DAYS = ("20260101", "20260102", "20260103")
TAOBAO = "configs/din_taobao_small.yaml"


def _rows(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    return pa.table(
        {"row": np.arange(start, start + n), "clk": rng.integers(0, 2, n), "true_prob": rng.random(n)}
    )


def _days(root: Path, sizes=(40, 70, 25)) -> dict[str, list[int]]:
    owned, start = {}, 0
    for day, n in zip(DAYS, sizes, strict=True):
        (root / f"dt={day}").mkdir(parents=True)
        pq.write_table(_rows(start, n), root / f"dt={day}" / "part-0.parquet")
        owned[day] = list(range(start, start + n))
        start += n
    return owned


def _rows_of(folder: str) -> pa.Table:
    return pq.read_table(folder).sort_by("row")


def test_partitions_train_on_the_older_ones_and_evaluate_on_the_newest(tmp_path):
    owned = _days(tmp_path / "logs")
    r = ingest.run(str(tmp_path / "logs"), tmp_path / "d", "clk", partitions="dt=20260101..20260103")
    train, ev = _rows_of(r.train_dir), _rows_of(r.eval_dir)
    assert train.column("row").to_pylist() == owned["20260101"] + owned["20260102"]
    assert ev.column("row").to_pylist() == owned["20260103"]
    assert set(train.column("dt").to_pylist()) == {"20260101", "20260102"}
    assert ev.column("dt").to_pylist() == ["20260103"] * 25
    assert (r.split, r.partitions, r.eval_partitions) == (
        "partitions",
        ["dt=20260101", "dt=20260102"],
        ["dt=20260103"],
    )
    assert sorted(r.partition_digests) == r.partitions and r.oracle_auc is not None
    meta = json.loads((tmp_path / "d" / "_meta.json").read_text())
    assert meta["partition_digests"] == r.partition_digests
    # The digest is of each partition's rows: the same rows give the same one; a changed day changes its own.
    again = ingest.run(str(tmp_path / "logs"), tmp_path / "d2", "clk", partitions="last:3")
    assert again.partition_digests == r.partition_digests
    pq.write_table(_rows(1000, 40), tmp_path / "logs" / "dt=20260101" / "part-0.parquet")
    changed = ingest.run(str(tmp_path / "logs"), tmp_path / "d3", "clk", partitions="last:3")
    assert changed.partition_digests["dt=20260101"] != r.partition_digests["dt=20260101"]
    assert changed.partition_digests["dt=20260102"] == r.partition_digests["dt=20260102"]


def test_one_partition_alone_is_refused_unless_the_split_says_otherwise(tmp_path):
    owned = _days(tmp_path / "logs")
    with pytest.raises(ValueError, match=r"selects only dt=20260102; the eval split is the newest .* last:2"):
        ingest.run(str(tmp_path / "logs"), tmp_path / "d", "clk", partitions="dt=20260102")
    # A hashed fraction of the selected rows instead: both splits come from every selected partition.
    r = ingest.run(
        str(tmp_path / "logs"),
        tmp_path / "f",
        "clk",
        SplitConfig(eval_fraction=0.3),
        partitions="dt=20260102",
    )
    assert (
        sorted(_rows_of(r.train_dir)["row"].to_pylist() + _rows_of(r.eval_dir)["row"].to_pylist())
        == owned["20260102"]
    )
    assert (r.split, r.partitions, r.eval_partitions) == ("fraction", ["dt=20260102"], ["dt=20260102"])


def test_a_given_eval_source_is_kept_as_it_is(tmp_path):
    owned = _days(tmp_path / "logs")
    (tmp_path / "eval").mkdir()
    pacsv.write_csv(_rows(500, 33), tmp_path / "eval" / "held_out.csv")  # any format the readers take
    r = ingest.run(
        str(tmp_path / "logs"),
        tmp_path / "d",
        "clk",
        neg_sample_rate=0.5,
        partitions="dt=20260103",  # one partition is fine: eval comes from elsewhere
        eval_source=str(tmp_path / "eval"),
    )
    assert r.split == "given" and r.eval_source == str(tmp_path / "eval")
    assert _rows_of(r.eval_dir).column("row").to_pylist() == list(range(500, 533))  # whole, not sampled
    train = _rows_of(r.train_dir)
    kept = pa.table({"row": owned["20260103"], "clk": _rows(110, 25)["clk"]})
    positives = [row for row, y in zip(kept["row"].to_pylist(), kept["clk"].to_pylist(), strict=True) if y]
    assert set(positives) <= set(train["row"].to_pylist()) <= set(owned["20260103"])
    assert r.train_rows + r.negatives_dropped == 25 and (r.partitions, r.eval_partitions) == (
        ["dt=20260103"],
        [],
    )
    # Without partitions: every training row is kept for training (no time or fraction split).
    whole = ingest.run(str(tmp_path / "logs"), tmp_path / "w", "clk", eval_source=str(tmp_path / "eval"))
    assert (whole.train_rows, whole.eval_rows) == (135, 33)
    with pytest.raises(ValueError, match=r"is generated but the eval split .*\(--set data.eval=null\)"):
        ingest.run("synthetic:taobao?rows=100", tmp_path / "s", "clk", eval_source=str(tmp_path / "eval"))
    with pytest.raises(ValueError, match="eval source .* has no label column 'clk'"):
        pq.write_table(pa.table({"row": [1]}), tmp_path / "nolabel.parquet")
        ingest.run(
            str(tmp_path / "logs"), tmp_path / "n", "clk", eval_source=str(tmp_path / "nolabel.parquet")
        )


def test_configured_sources_prefer_the_given_source_and_resolve_placeholders():
    data = DataConfig(
        label="clk",
        train="odps://{PROJECT}/tables/t",
        eval="odps://{PROJECT}/tables/e",
        params={"PROJECT": None},
    )
    env = {"ODPS_PROJECT": "ads"}
    assert ingest.configured_sources(data, None, env) == ("odps://ads/tables/t", "odps://ads/tables/e")
    assert ingest.configured_sources(data, "data/logs", env) == ("data/logs", "odps://ads/tables/e")
    assert ingest.configured_sources(DataConfig(label="clk"), "data/logs", env) == ("data/logs", None)
    with pytest.raises(ValueError, match="give --source .* or set data.train"):
        ingest.configured_sources(DataConfig(label="clk"), None, env)


def test_ingest_records_the_partition_tags(tmp_path):
    _days(tmp_path / "logs")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    log = tracking.open_run_log(run_id, uri)
    r = ingest.run(str(tmp_path / "logs"), tmp_path / "d", "clk", partitions="last:3", log=log)
    tags = tracking.run_summary(run_id, uri=uri)["tags"]
    assert tags["data_partitions"] == "dt=20260101,dt=20260102"
    assert tags["eval_partitions"] == "dt=20260103"
    assert json.loads(tags["data_partition_digests"]) == r.partition_digests
    assert len(r.partition_digests["dt=20260101"]) == 64


def _taobao_days(root: Path) -> None:
    for i, day in enumerate(DAYS):
        generate("taobao", 400, root / f"dt={day}", seed=i)


def test_recpipe_ingest_partitions_flag_and_the_configs_own_split(tmp_path, capsys):
    _taobao_days(tmp_path / "logs")
    out = tmp_path / "d"
    args = ["ingest", "--config", TAOBAO, "--source", str(tmp_path / "logs"), "--out", str(out)]
    assert main([*args, "--partitions", "dt=20260102..20260103"]) == 0
    meta = json.loads((out / "_meta.json").read_text())
    assert (meta["partitions"], meta["eval_partitions"]) == (["dt=20260102"], ["dt=20260103"])
    assert (meta["train_rows"], meta["eval_rows"]) == (400, 400)
    assert main([*args, "--partitions", "dt=2026..0103"]) == 2  # a malformed selector: a usage error
    assert "partition selector 'dt=2026..0103'" in capsys.readouterr().err
    # data.train + data.eval in the config: no --source, and the eval split kept as given.
    kept = tmp_path / "k"
    train, held_out = tmp_path / "logs" / "dt=20260101", tmp_path / "logs" / "dt=20260103"
    sets = ["--set", f"data.train={train}", "--set", f"data.eval={held_out}"]
    assert main(["ingest", "--config", TAOBAO, "--out", str(kept), *sets]) == 0
    meta = json.loads((kept / "_meta.json").read_text())
    assert (meta["split"], meta["train_rows"], meta["eval_rows"]) == ("given", 400, 400)
    assert meta["eval_source"] == str(held_out)


def test_days_whose_schema_evolved_are_read_together_unless_a_read_column_is_missing(tmp_path):
    """The newest day's log gained a column and narrowed an id's type: ingest reads all days in one schema and
    says so (result, _meta.json, run tag). A column the config reads missing from a day is refused, naming the
    file, unless the selected partitions all have it."""
    from recpipe.features.build import build_feature_spec
    from recpipe.features.schema_check import SchemaMismatch

    _taobao_days(tmp_path / "logs")
    newest = tmp_path / "logs" / "dt=20260103" / "part-00000.parquet"
    table = pq.read_table(newest)
    table = table.set_column(
        table.schema.get_field_index("brand"), "brand", table.column("brand").cast(pa.int32())
    )
    pq.write_table(table.append_column("app_version", pa.array(["9.1"] * table.num_rows)), newest)
    spec = build_feature_spec(load_config(TAOBAO))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    log = tracking.open_run_log(tracking.start_or_resume_run(uri, "recpipe-tests"), uri)
    r = ingest.run(str(tmp_path / "logs"), tmp_path / "d", "clk", partitions="last:3", spec=spec, log=log)
    assert (r.train_rows, r.eval_rows) == (800, 400)
    assert r.schema_notes == [
        "column 'brand' is int32 in some files: read as int64",
        f"column 'app_version' is absent from 2 of 3 files (first {tmp_path / 'logs' / 'dt=20260101' / 'part-00000.parquet'}): "
        "read as null there",
    ]
    assert json.loads((tmp_path / "d" / "_meta.json").read_text())["schema_notes"] == r.schema_notes
    assert (
        json.loads(tracking.run_summary(log.run_id, uri=uri)["tags"]["data_schema_notes"]) == r.schema_notes
    )
    assert pq.read_table(r.eval_dir).column("app_version").to_pylist() == ["9.1"] * 400
    # The newest day lost a column a feature reads: refused, naming the file; the days that have it still read.
    pq.write_table(table.drop_columns(["cate_id"]), newest)
    with pytest.raises(
        SchemaMismatch,
        match=r"column 'cate_id' \(feature 'cate_id'\) is missing from 1 file\(s\), e\.g\. .*dt=20260103",
    ):
        ingest.run(str(tmp_path / "logs"), tmp_path / "e", "clk", partitions="last:3", spec=spec)
    ok = ingest.run(
        str(tmp_path / "logs"), tmp_path / "f", "clk", partitions="dt=20260101..20260102", spec=spec
    )
    assert (ok.train_rows, ok.eval_rows, ok.schema_notes) == (400, 400, [])
