"""TorchEasyRec's WuKong (``examples/wukong_criteo.config``: DLRM's hashed Criteo features and groups, a
``wukong`` block): mapped field by field, the shipped ``dense_mlp`` refused as TorchEasyRec refuses it, the
config with a dense MLP ending at the embedding dim imported and trained on generated hashed Criteo."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest
from test_train_imported import BATCH, STEPS, _tiny
from tzrec_fixtures import tzrec_dlrm, wukong_model

from recpipe.config import parse_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.tzrec import TzrecImportError, import_tzrec


def _config(dense_mlp: str) -> str:
    return tzrec_dlrm(max_buckets=1000, model=wukong_model(dense_mlp), model_dir="wukong_criteo")


def hashed_criteo(root, train_rows: int = 1000, eval_rows: int = 300) -> tuple[str, str]:
    """Generated Criteo in TorchEasyRec's hashed layout (``int_k``, integer ``cat_k``), split train / eval."""
    generate("criteo", train_rows + eval_rows, root / "all", seed=5, hashed=1, max_vocab=1000)
    table = pq.read_table(root / "all")
    for name, part in (("train", table.slice(0, train_rows)), ("eval", table.slice(train_rows))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    return str(root / "train"), str(root / "eval")


def test_the_shipped_dense_mlp_is_refused_at_its_line_as_torcheasyrec_refuses_it():
    """wukong_criteo.config's dense_mlp ends at 128 but its ids are 16 wide: TorchEasyRec's WuKong.__init__
    raises "dense mlp last hidden_unit must be the same sparse feature dim" on it."""
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(_config("512, 256, 128"))
    problems = {p.path: p.message for p in err.value.problems}
    assert list(problems) == ["model_config.wukong.dense_mlp.hidden_units"]
    assert problems["model_config.wukong.dense_mlp.hidden_units"].startswith(
        "the dense MLP's last width 128 must equal the sparse features' embedding dim 16"
    )


def test_wukong_maps_layers_groups_and_defaults():
    text = _config("512, 256, 16").replace(" compressed_feature_num: 24", "", 1)
    model = import_tzrec(text).config.model
    assert model.type == "wukong" and model.sparse_group == "sparse"
    assert model.dense_mlp.hidden_units == [512, 256, 16] and model.final.hidden_units == [512, 64]
    assert [
        (x.lcb_feature_num, x.fmb_feature_num, x.compressed_feature_num) for x in model.wukong_layers
    ] == [
        (16, 16, 16),  # TorchEasyRec's default compressed_feature_num
        (16, 16, 24),
    ]
    assert model.wukong_layers[0].feature_num_mlp.hidden_units == [512]


def test_a_dense_group_missing_a_dense_feature_is_refused():
    text = _config("64, 16").replace('group_name: "dense" feature_names: "int_0" ', 'group_name: "dense" ')
    with pytest.raises(TzrecImportError, match=r"recpipe's wukong dense MLP reads every dense raw feature"):
        import_tzrec(text)


@pytest.mark.slow
def test_imported_wukong_criteo_trains(tmp_path):
    imported = import_tzrec(_config("64, 16"))
    cfg = parse_config(_tiny(imported.data, lambda n: min(n, 1000)))
    train_uri, eval_uri = hashed_criteo(tmp_path / "data")
    result = train(cfg, build_feature_spec(cfg), train_uri, eval_uri, tmp_path / "run")
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert cfg.model.type == "wukong" and result.steps == STEPS and result.rows_trained == STEPS * BATCH
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert result.eval is not None and result.eval["rows"] == 300 and 0.0 <= result.eval["auc"] <= 1.0
