"""TorchEasyRec's MIND (``configs/mind_taobao.config``, written with ``examples/mind_taobao.config``'s constructs):
the mind block → ``model: {type: mind}``, its groups (user, item, the SEQUENCE group ``hist`` of three
sequence_id_features), what is refused; a singular field given twice (TorchEasyRec's ``text_format.Merge`` keeps
the last): the same value a note, a different value a problem at its line; and the imported config trains with
sampled negatives from a graph-learn item table of generated Taobao rows, to a recall@K well above chance."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from tzrec_fixtures import CONFIGS

from recpipe.config import parse_config
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import evaluate_retrieval_from_config
from recpipe.export.manifest import ExportError
from recpipe.export.retrieval import export_retrieval_checkpoint
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.models.mind.model import MIND
from recpipe.stages import train
from recpipe.train.checkpoint import load_model_for_inference
from recpipe.train.retrieval import rows_batch, train_retrieval
from recpipe.tzrec import import_tzrec, import_tzrec_file
from recpipe.tzrec.problems import TzrecImportError
from recpipe.tzrec.render import render_yaml

MIND_CONFIG = CONFIGS / "mind_taobao.config"
ATTRS = ["adgroup_id", "cate_id", "campaign_id", "customer", "brand", "price"]
HISTORY = ["adgroup_id", "cate_id", "brand"]


def _problems(text: str) -> str:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text, "x.config")
    return str(err.value)


def test_mind_imports_with_its_groups_capsule_and_sampler() -> None:
    imported = import_tzrec_file(MIND_CONFIG)
    cfg = imported.config
    m = cfg.model
    assert m.type == "mind" and m.output_dim == 32 and m.similarity == "cosine"
    assert (m.simi_pow, m.temperature, m.in_batch_negative) == (20.0, 0.01, False)
    ut = m.user_tower
    assert (ut.group, ut.history_group) == ("user", "hist")
    assert ut.user_mlp.hidden_units == [256, 128] and ut.user_mlp.dropout == 0.2
    assert ut.hist_seq_mlp is not None and ut.hist_seq_mlp.hidden_units == [256, 128]
    c = ut.capsule
    assert (c.max_k, c.max_seq_len, c.high_dim, c.num_iters, c.squash_pow) == (8, 50, 64, 3, 0.2)
    assert (c.routing_logits_scale, c.routing_logits_stddev, c.const_caps_num, c.routing_init) == (
        20.0,
        1.0,
        False,
        "normal",
    )
    assert ut.concat_mlp.bias is False and ut.concat_mlp.hidden_units == [256, 128]
    assert m.item_tower.group == "item" and m.item_tower.mlp.hidden_units == [256, 128]
    groups = {g.name: (g.type, g.features) for g in cfg.feature_groups}
    assert groups["hist"] == ("sequence", [f"click_50_seq__{n}" for n in HISTORY])
    assert cfg.eval.recall_at_k == [1, 5] and cfg.data.negative_sampler.attr_delimiter == "\x02"
    assert [n.path for n in imported.notes] == [
        "model_dir",
        "data_config.negative_sampler.num_eval_sample",
        "train_config.save_checkpoints_steps",  # the proto's default, not applied: one checkpoint, at the end
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("similarity: COSINE", "similarity: EUCLID", "similarity EUCLID is not supported"),
        ("recall_at_k { top_k: 1 }", "auc {}", "mind is evaluated by recall_at_k only"),
        (
            "mlp { hidden_units: [256, 128] dropout_ratio: 0.2 } }",
            "mlp { hidden_units: [256, 128] bias: false } }",
            "bias: false is not supported here",
        ),
        ("const_caps_num: false", 'routing_init_method: "uniform"', "routing_init_method 'uniform'"),
        ("max_seq_len: 50 ", "", "required field 'max_seq_len' is missing"),
    ],
    ids=["euclid", "auc", "item_bias", "routing_init", "max_seq_len"],
)
def test_mind_refusals(old: str, new: str, expected: str) -> None:
    text = MIND_CONFIG.read_text()
    assert old in text
    assert expected in _problems(text.replace(old, new, 1))


def test_a_field_given_twice_same_value_is_a_note_different_is_a_problem() -> None:
    text = MIND_CONFIG.read_text()
    line = text.splitlines().index('        attr_delimiter: "\\x02"') + 1
    same = text.replace(
        'attr_delimiter: "\\x02"', "attr_delimiter: \"\\x02\"\n        attr_delimiter: '\\x02'"
    )
    imported = import_tzrec(same, "x.config")  # the same value, quoted otherwise
    note = next(n for n in imported.notes if n.path == "data_config.negative_sampler.attr_delimiter")
    assert note.line == line + 1 and f"first at line {line}" in note.message
    assert imported.config.data.negative_sampler.attr_delimiter == "\x02"
    different = text.replace(
        'attr_delimiter: "\\x02"', 'attr_delimiter: "\\x02"\n        attr_delimiter: ":"'
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(different, "x.config")
    [problem] = err.value.problems
    assert (problem.line, problem.path) == (line + 1, "data_config.negative_sampler.attr_delimiter")
    assert f"given twice with different values ('\\x02' at line {line}, ':' here)" in problem.message
    # a float written as 20 and 20.0 is one value; a block given twice is refused
    twice = text.replace("simi_pow: 20\n", "simi_pow: 20\n        simi_pow: 20.0\n")
    assert [n.path for n in import_tzrec(twice).notes if "same value" in n.message] == [
        "model_config.mind.simi_pow"
    ]
    blocks = text.replace("eval_config {\n}", "eval_config {\n}\neval_config {\n}")
    assert "'eval_config' is given twice (lines 16 and 18)" in _problems(blocks)
    both = text.replace(
        "adagrad_optimizer { lr: 0.001 }", "adagrad_optimizer { lr: 0.001 } adam_optimizer { lr: 0.1 }"
    )
    assert (
        "'adam_optimizer' and 'adagrad_optimizer' (line 12) are both set, members of one oneof"
        in _problems(both)
    )


def _history_columns(rows: pa.Table) -> pa.Table:
    """The generated ``click_50_seq`` (items by ``|``, sub-values by ``\\x03``) as TorchEasyRec's Taobao table's
    three columns ``click_50_seq__<sub>``, items by ``|`` (a missing brand ``0``: every column has every item)."""
    seqs = rows.column("click_50_seq").to_pylist()
    for i, name in enumerate(HISTORY):
        col = [s and "|".join(item.split("\x03")[i] or "0" for item in s.split("|")) for s in seqs]
        rows = rows.append_column(f"click_50_seq__{name}", pa.array(col, pa.string()))
    return rows


def _gl_item_table(rows: pa.Table, path) -> int:
    """graph-learn's ``id | weight | attrs`` of the rows' distinct ads (uniform weights); the catalogue size."""
    ids, first = np.unique(rows.column("adgroup_id").to_numpy(), return_index=True)
    firsts = rows.take(pa.array(first))
    parts = [pc.fill_null(pc.cast(firsts.column(a), pa.string()), "") for a in ATTRS]
    attrs = pc.binary_join_element_wise(*parts, "\x02")
    pq.write_table(pa.table({"id": ids, "weight": np.ones(len(ids)), "attrs": attrs}), path)
    return len(ids)


def _tiny(data: dict, items: str) -> dict:
    data = copy.deepcopy(data)
    for f in data["features"]:
        if f.get("num_buckets", 0) > 1000:
            f["num_buckets"] //= 100
    data["data"].update(batch_size=64, num_workers=0, params={"PROJECT": "unused"})
    data["data"]["negative_sampler"].update(input_path=items, num_sample=32)
    ut = data["model"]["user_tower"]
    for part in ("user_mlp", "hist_seq_mlp", "concat_mlp"):
        ut[part]["hidden_units"] = [32, 16]
    ut["capsule"].update(max_k=4, high_dim=16)
    data["model"]["item_tower"]["mlp"]["hidden_units"] = [32, 16]
    data["model"].update(output_dim=16, temperature=0.1)
    data["train"]["sparse_optimizer"]["lr"] = 0.1
    data["train"]["dense_optimizer"]["lr"] = 0.003
    data["train"]["max_steps"] = 40
    data["eval"]["recall_at_k"] = [5, 50]
    return data


@pytest.fixture(scope="module")
def taobao(tmp_path_factory):
    root = tmp_path_factory.mktemp("mind_taobao")
    generate("taobao", 2000, root / "rows", seed=3)
    rows = _history_columns(pq.read_table(root / "rows"))
    return rows, _gl_item_table(rows, root / "items.parquet"), root


def test_imported_mind_trains_with_sampled_negatives(taobao) -> None:
    rows, catalogue, tmp_path = taobao
    cfg = parse_config(_tiny(import_tzrec_file(MIND_CONFIG).data, str(tmp_path / "items.parquet")))
    spec = build_feature_spec(cfg)
    torch.set_num_threads(1)
    run = train_retrieval(cfg, spec, rows.slice(0, 1700))  # items, num_sample and steps from the config
    assert isinstance(run.model, MIND) and run.model.max_interests == 4
    assert len(run.losses) == 40 and all(math.isfinite(x) for x in run.losses)
    # 1 positive among 1 + 32 negatives: log(33) = 3.50 at chance
    assert abs(run.losses[0] - math.log(33)) < 1.0 and np.mean(run.losses[-10:]) < run.losses[0] - 0.15
    tables = [n for n, _ in run.model.named_parameters() if "embeddings." in n]
    assert any(n.startswith("user_embeddings.") and "click_50_seq__adgroup_id" in n for n in tables)
    scores = evaluate_retrieval_from_config(cfg, run.model, spec, rows.slice(1700))
    assert sorted(scores) == [5, 50] and scores[5].queries == 300
    # chance is K / catalogue (0.005 and 0.048 over its 1,031 ads); 0.090 and 0.183 here (uniform negatives: the
    # popular ads the rows click are learnt first, then the user-ad match)
    assert catalogue == 1031
    assert scores[5].recall > 5 * 5 / catalogue and scores[50].recall > 2 * 50 / catalogue


def test_train_stage_trains_the_imported_mind_through_the_retrieval_job(taobao, tmp_path) -> None:
    """``recpipe train`` on the imported config: one worker trains it with the retrieval trainer, recall@K in
    train_result.json, and the checkpoint loads back to the same interests (the routing logits are saved)."""
    rows, _, root = taobao
    data = _tiny(import_tzrec_file(MIND_CONFIG).data, str(root / "items.parquet"))
    data["data"].pop("train", None), data["data"].pop("eval", None)
    data["train"].update(max_steps=20, log_every_steps=10)
    # TorchEasyRec's default save_checkpoints_steps (1000) is not applied: the retrieval job writes one checkpoint,
    # at the end, and would refuse an interval (the config trains as imported)
    assert data["train"]["checkpoint_every_steps"] is None
    (tmp_path / "mind.yaml").write_text(render_yaml(data))
    for name, part in (("train", rows.slice(0, 1700)), ("eval", rows.slice(1700))):
        (tmp_path / name).mkdir()
        pq.write_table(part, tmp_path / name / "part-00000.parquet")
    out = tmp_path / "run"
    r = train.run(str(tmp_path / "mind.yaml"), str(tmp_path / "train"), str(tmp_path / "eval"), str(out))
    assert r.world_size == 1
    result = json.loads((out / "train_result.json").read_text())
    assert result["steps"] == 20 and result["eval"]["queries"] == 300
    assert 0.0 < result["eval"]["recall_at_5"] <= result["eval"]["recall_at_50"] <= 1.0
    model, spec, cfg = load_model_for_inference(out)
    assert isinstance(model, MIND) and cfg.model.type == "mind"
    batch = rows_batch(FeatureGenerator(spec), rows.slice(1700, 16))
    first, mask = model.user_interests(batch.dense, batch.sparse)
    again, _ = model.user_interests(batch.dense, batch.sparse)
    torch.testing.assert_close(first, again)  # no fresh routing noise per call
    assert first.shape == (16, 4, 16) and mask.any(dim=1).all()
    with pytest.raises(ExportError, match="a multi-interest user tower"):
        export_retrieval_checkpoint(out, tmp_path / "export", str(tmp_path / "eval"))
