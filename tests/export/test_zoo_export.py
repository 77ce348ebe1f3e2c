"""The ranking-zoo models of issue 29 (WuKong, PEPNet with and without domain towers, SimpleMultiTask) through
every backend: a few training steps on generated rows, parity on jit, onnx and rtp (aoti slow-marked, for the two
whose graphs the others' are part of: a compile each), and a single- and a multi-task model's request served by
``recpipe serve`` after the stages train, evaluate, export, register and promote it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from local_http import invoke, predictions, scoring_server
from small_training import TABLE_CAP, train_small

from recpipe.config import load_config
from recpipe.config.caps import cap_tables, capped_config
from recpipe.data.synthetic import generate
from recpipe.export.api import export
from recpipe.export.loaders import load_backend

ROOT = Path(__file__).resolve().parents[2]
# model -> (config under configs/, generated data kind)
ZOO = {
    "wukong": ("wukong_criteo_small.yaml", "criteo"),
    "pepnet": ("pepnet_taobao_small.yaml", "taobao"),
    # TorchEasyRec's pepnet_taobao.config's domain towers: 3 per task, outputs clk_0 ... buy_2
    "pepnet_domains": ("pepnet_domains_taobao_small.yaml", "taobao"),
    "simple_multi_task": ("simple_multi_task_taobao_small.yaml", "taobao"),
}


# Taobao's models take 13-16 s each for jit, onnx and rtp (a DIN tower's history): slow-marked.
FAST = {"wukong"}


@pytest.fixture(
    scope="module",
    params=[n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in sorted(ZOO)],
)
def zoo(request, tmp_path_factory):
    config, kind = ZOO[request.param]
    cfg = cap_tables(load_config(ROOT / "configs" / config), TABLE_CAP)
    assert cfg.model.type == request.param.removesuffix("_domains")
    return cfg, train_small(cfg, kind, tmp_path_factory.mktemp(f"{request.param}_data"))


def _passed(result, backend: str, cfg) -> None:
    r = result.backends[backend]
    assert r.status == "ok" and r.parity.passed, r.parity
    assert r.parity.rows >= 1000 and r.parity.max_abs_logit_diff <= cfg.export.max_abs_logit_diff


def test_jit_onnx_and_rtp_pass_parity_and_score_raw_rows_as_the_eager_model(zoo, tmp_path):
    cfg, small = zoo
    result = export(small.model, small.spec, cfg, ["jit", "onnx", "rtp"], tmp_path, small.held_out)
    rows = small.clean.slice(0, 33)
    from recpipe.batch import to_batch
    from recpipe.features.fg import FeatureGenerator

    b = to_batch(FeatureGenerator(small.spec, with_labels=False)(rows), small.spec.sparse_keys())
    eager = small.model(b.dense, b.sparse).detach().numpy()
    for backend in ("jit", "onnx", "rtp"):
        _passed(result, backend, cfg)
        logits = load_backend(tmp_path / backend).predict(rows.to_pandas(), output="logit")
        np.testing.assert_allclose(np.asarray(logits).reshape(eager.shape), eager, atol=1e-4)


# AOTInductor (a compile each, ~25 CPU-s) for WuKong (its FM-block interactions) and PEPNet with domain towers
# (EPNet's and PPNet's gates, the towers per domain); PEPNet without domains is the same graph less the towers, and
# SimpleMultiTask's task towers (MultiTowerDIN's towers under blocks.multitask.TaskTowers) are compiled in DBMTL by
# tests/export/test_multitask_export.py and tests/export/test_aoti.py. All four pass jit, onnx and rtp parity above.
AOTI_MODELS = ["pepnet_domains", "wukong"]


@pytest.mark.slow
@pytest.mark.parametrize("zoo", AOTI_MODELS, indirect=True)
def test_aoti_passes_parity(zoo, tmp_path):
    cfg, small = zoo
    _passed(export(small.model, small.spec, cfg, ["aoti"], tmp_path, small.held_out), "aoti", cfg)


# Served: one single-task model (WuKong) and one multi-task model with domain towers (PEPNet: an entry per task and
# domain in each record); each ~20 CPU-s, most of it the stages' and the server's processes, which are the same for
# every model.
SERVED = ["pepnet_domains", "wukong"]


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVED)
def test_trained_by_the_stages_and_served_by_the_scoring_server(name, tmp_path):
    from recpipe.stages import evaluate, promote, register, train
    from recpipe.stages import export as export_stage

    config, kind = ZOO[name]
    generate(kind, 4000, tmp_path / "all", seed=3, **({"max_vocab": 300} if kind == "criteo" else {}))
    table = pq.read_table(tmp_path / "all")
    for split, part in (("train", table.slice(0, 3000)), ("eval", table.slice(3000))):
        (tmp_path / split).mkdir()
        pq.write_table(part, tmp_path / split / "part-00000.parquet")
    overrides = {"train.max_steps": 6, "data.batch_size": 256}
    config_path = capped_config(ROOT / "configs" / config, TABLE_CAP, tmp_path)
    train.run(str(config_path), str(tmp_path / "train"), str(tmp_path / "eval"),
              str(tmp_path / "ckpt"), overrides=overrides)  # fmt: skip
    report = evaluate.run(str(tmp_path / "ckpt"), str(tmp_path / "eval"), str(tmp_path / "eval.json"))
    exported = export_stage.run(
        str(tmp_path / "ckpt"), "rtp", str(tmp_path / "export"), str(tmp_path / "eval")
    )
    assert exported.ok and exported.backends["rtp"].parity.passed
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    version = register.run(str(tmp_path / "export"), report.report_path, f"{name}-served", uri).version
    promote.run(
        f"{name}-served",
        version,
        uri,
        force=True,
        reason="serving test: a 6-step model need not pass its gate",
    )
    head = pq.read_table(tmp_path / "eval").slice(0, 16)
    rtp = load_backend(tmp_path / "export" / "rtp")
    inputs = [c for c in head.column_names if c in set(rtp.spec.input_columns())]
    records = json.loads(json.dumps(head.select(inputs).to_pylist()))
    with scoring_server(f"models:/{name}-served@champion", uri, tmp_path) as server:
        status, body = invoke(server.url, {"dataframe_records": records})
    assert status == 200, body
    want = np.asarray(rtp.predict(head))
    preds = body["predictions"]
    if want.ndim == 2:  # a multi-task model: one probability_<output> entry per output in each record
        got = np.asarray([[p[f"probability_{t}"] for t in rtp.spec.output_names()] for p in preds], float)
    else:
        got = predictions(body)
    np.testing.assert_allclose(got, want, atol=1e-6)
