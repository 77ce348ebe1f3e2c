"""Several labels (TorchEasyRec's data_config.label_fields: clk and buy): FG reads each, checks each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rowwise import rowwise_fg

from recpipe.config import load_config, parse_overrides
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.spec import FeatureSpec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> pa.Table:
    out = tmp_path_factory.mktemp("tb")
    generate("taobao", 3000, out, seed=2)
    return pq.read_table(out)


def _spec(config: str = "dbmtl_taobao_small.yaml", **over) -> FeatureSpec:
    overrides = parse_overrides([f"{k}={v}" for k, v in over.items()])
    return build_feature_spec(load_config(ROOT / "configs" / config, overrides))


def test_label_fields_give_one_label_column_per_task(rows):
    spec = _spec()
    assert spec.labels == ["clk", "buy"] and spec.label == "clk"
    assert FeatureSpec.from_dict(spec.to_dict()).labels == ["clk", "buy"]
    out = FeatureGenerator(spec)(rows)
    assert out.labels.shape == (rows.num_rows, 2)
    np.testing.assert_array_equal(out.labels[:, 0], rows["clk"].to_numpy())
    np.testing.assert_array_equal(out.labels[:, 1], rows["buy"].to_numpy())
    slow, skipped = rowwise_fg(spec, rows.slice(0, 200))
    assert skipped == 0
    np.testing.assert_array_equal(slow.labels, out.labels[:200])
    serving = FeatureGenerator(spec, with_labels=False)(rows.drop_columns(["clk", "buy"]))
    assert serving.num_rows == rows.num_rows  # labels are not needed to score


def test_a_single_label_spec_is_unchanged_by_multi_label_support():
    spec = _spec("din_taobao_small.yaml")
    assert spec.labels == ["clk"] and "extra_labels" not in spec.to_dict()


def test_a_bad_second_label_names_its_column_and_row(rows):
    spec = _spec()
    buy = rows["buy"].to_pylist()
    buy[7] = 2
    bad = rows.set_column(rows.schema.get_field_index("buy"), "buy", pa.array(buy))
    with pytest.raises(BadRowError, match=r"row 7.*'buy'.*a label of 0 or 1|'buy'.*row 7"):
        FeatureGenerator(spec)(bad)


def test_label_and_label_fields_must_agree():
    with pytest.raises(ValueError, match="must be the first of data.label_fields"):
        _spec(**{"data.label": "buy"})  # the YAML's label_fields are [clk, buy]


def test_a_domain_label_ends_the_labels_and_is_a_feature_column_serving_still_needs(rows):
    spec = _spec("pepnet_domains_taobao_small.yaml")
    assert (spec.labels, spec.task_labels, spec.domain_label, spec.domain_num) == (
        ["clk", "buy", "occupation"],
        ["clk", "buy"],
        "occupation",
        3,
    )
    back = FeatureSpec.from_dict(spec.to_dict())
    assert (back.domain_label, back.domain_num, back.digest()) == ("occupation", 3, spec.digest())
    assert "domain_label" not in _spec().to_dict()  # a spec without domain towers reads as before
    # occupation is the id feature's column too: serving rows keep it, only clk and buy may be left out
    assert spec.label_only_columns() == {"clk", "buy"}
    out = FeatureGenerator(spec)(rows)
    np.testing.assert_array_equal(out.labels[:, 2], rows["occupation"].to_numpy())
    serving = FeatureGenerator(spec, with_labels=False)
    assert serving(rows.drop_columns(["clk", "buy"])).num_rows == rows.num_rows
    with pytest.raises(ValueError, match="domain_label 'buy' must be the last of the labels"):
        FeatureSpec.from_dict({**spec.to_dict(), "domain_label": "buy"})
