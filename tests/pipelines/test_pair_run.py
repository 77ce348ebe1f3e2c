"""``recpipe run --config RETRIEVER --ranker-config RANKER`` (issue 30): one kfp.local pipeline trains, gates,
exports and registers a retrieval model and a ranking model on two datasets of one generated world, and promotes
them together: both ``champion`` with tags naming each other; a second run whose retriever fails its gate
promotes neither, and the first pair stays champion. The compiled pipeline has both branches and the promotion
gated on the pair's decision, which reads both gates; a ranker reading an item column the catalogue lacks is
refused before anything starts.

The module fixture ``pair_run`` is the store a request test can reuse: its runs folder, tracking URI and both
registered names (after it, the champions are the first run's pair; the second run's versions are challengers).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from recpipe import tracking

ROOT = Path(__file__).resolve().parents[2]
RETRIEVER = ROOT / "configs" / "dssm_retrieval_small.yaml"
RANKER = ROOT / "configs" / "deepfm_retrieval_ranker_small.yaml"
ROWS = 20_000  # each dataset's; the world: 1,000 users, 400 items


# ------------------------------------------------------------------------------------ the compiled pipeline
@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    from pipelines.pair_pipeline import compile_pair_pipeline

    path = compile_pair_pipeline(tmp_path_factory.mktemp("compiled") / "pair.yaml")
    ir, platform = list(yaml.safe_load_all(path.read_text()))
    return {"ir": ir, "executors": platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]}


def test_the_compiled_pair_pipeline_has_both_branches_and_promotes_only_on_both_gates(compiled):
    ir = compiled["ir"]
    root = ir["root"]["dag"]["tasks"]
    branch = ("ingest", "fit", "train", "evaluate", "export", "register")
    assert set(root) == {
        "start", "start-2", "check-pair", *branch, *(f"{t}-2" for t in branch), "pair-decision",
        "condition-branches-1", "finish-pair",
    }  # fmt: skip
    # start: the retriever's run, start-2: the ranker's
    assert (
        root["start"]["inputs"]["parameters"]["config_path"]["componentInputParameter"] == "retriever_config"
    )
    assert (
        root["start-2"]["inputs"]["parameters"]["config_path"]["componentInputParameter"] == "ranker_config"
    )
    # the catalogue check reads both resolved configs, and both ingests wait for it
    assert set(root["check-pair"]["dependentTasks"]) == {"start", "start-2"}
    assert (
        "check-pair" in root["ingest"]["dependentTasks"]
        and "check-pair" in root["ingest-2"]["dependentTasks"]
    )
    assert set(root["train-2"]["dependentTasks"]) == {"fit-2", "ingest-2", "start-2"}
    # the decision reads both gates and both registered versions
    inputs = root["pair-decision"]["inputs"]["parameters"]
    for role, suffix in (("retriever", ""), ("ranker", "-2")):
        assert inputs[f"{role}_gate_passed"]["taskOutputParameter"] == {
            "outputParameterKey": "gate_passed",
            "producerTask": f"evaluate{suffix}",
        }
        assert inputs[f"{role}_version"]["taskOutputParameter"] == {
            "outputParameterKey": "version",
            "producerTask": f"register{suffix}",
        }
    # promote-pair runs only on the decision's yes, hold-pair on its no; finish-pair ends both runs
    branches = ir["components"]["comp-condition-branches-1"]["dag"]["tasks"]
    decided = "inputs.parameter_values['pipelinechannel--pair-decision-promote'] == true"
    conditions = {
        next(iter(ir["components"][t["componentRef"]["name"]]["dag"]["tasks"])): t["triggerPolicy"][
            "condition"
        ]
        for t in branches.values()
    }
    assert conditions == {"promote-pair": decided, "hold-pair": f"!({decided})"}
    assert set(root["finish-pair"]["dependentTasks"]) == {"condition-branches-1", "start", "start-2"}
    assert ir["root"]["dag"]["outputs"]["parameters"]["Output"]["valueFromParameter"]["producerSubtask"] == (
        "finish-pair"
    )
    # each train pod asks for its own model's accelerators and mounts the workspace
    for name in ("exec-train", "exec-train-2"):
        assert compiled["executors"][name]["pvcMount"][0]["mountPath"] == "/workspace"
    train = ir["root"]["dag"]["tasks"]
    assert train["train"]["inputs"]["parameters"]["gpus_per_worker"]["componentInputParameter"] == (
        "retriever_gpus_per_worker"
    )
    assert train["train-2"]["inputs"]["parameters"]["workers"]["componentInputParameter"] == "ranker_workers"


# -------------------------------------------------------------------------------------- the catalogue check
def test_a_ranker_reading_item_columns_the_catalogue_lacks_is_refused_before_anything_starts(
    tmp_path, capsys, monkeypatch
):
    import pyarrow.parquet as pq

    from recpipe.cli.main import main
    from recpipe.data.synthetic import generate

    monkeypatch.setenv("RECPIPE_LOG_DIR", str(tmp_path / "logs"))
    generate("retrieval", 2000, tmp_path / "retrieval", users=100, items=40)
    generate("retrieval", 2000, tmp_path / "ranking", users=100, items=40, ranking=True)
    catalogue = tmp_path / "items_without_brand.parquet"
    pq.write_table(pq.read_table(tmp_path / "retrieval" / "_items.parquet").drop(["brand_id"]), catalogue)
    argv = ["run", "--runs", str(tmp_path / "runs"), "--config", str(RETRIEVER), "--ranker-config", str(RANKER),
            "--data", str(tmp_path / "retrieval"), "--ranker-data", str(tmp_path / "ranking")]  # fmt: skip
    assert main([*argv, "--set", f"data.params.ITEMS={catalogue}"]) == 2
    err = capsys.readouterr().err
    assert (
        "parameter ranker_config: the ranker 'retrieval-ranker-deepfm-small' reads item column(s) ['brand_id']"
        in err
    )
    assert f"catalogue ({catalogue}, columns ['item_id', 'weight', 'cate_id']) lacks" in err
    assert not (tmp_path / "runs").exists()  # nothing was started
    # one dataset without the other is refused too (two worlds would not share a catalogue)
    assert main(argv[:-2]) == 2
    assert "give both models' data (--data and --ranker-data) or neither" in capsys.readouterr().err


def test_the_ranker_reads_item_columns_that_the_generated_catalogue_holds():
    from recpipe.config import load_config
    from recpipe.pipeline.pair import ranker_item_columns, request_columns

    retriever, ranker = load_config(RETRIEVER), load_config(RANKER)
    assert request_columns(retriever) == [
        "user_id",
        "user_segment",
    ]  # the user tower's: the request brings them
    assert ranker_item_columns(retriever, ranker) == ["item_id", "cate_id", "brand_id"]


# ------------------------------------------------------------------------------------------- the pair runs
@pytest.fixture(scope="module")
def pair_run(tmp_path_factory) -> dict:
    """Two pair runs on one store: the first promotes the pair; the second's retriever fails an impossible recall
    floor, so neither of its versions is promoted. Returns ``runs`` (the runs folder), ``tracking_uri``,
    ``retriever`` and ``ranker`` (the registered names), and both summaries (``first``, ``second``)."""
    from pipelines.pair_run import run_pair_local

    runs = tmp_path_factory.mktemp("pair-run") / "runs"
    common = {"runs_dir": runs, "config": str(RETRIEVER), "ranker_config": str(RANKER), "rows": ROWS}
    uri = f"sqlite:///{runs / 'mlflow.db'}"
    names = {"retriever": "retrieval-dssm-small", "ranker": "retrieval-ranker-deepfm-small"}
    first = run_pair_local(**common)
    after_first = {
        role: _versions(uri, name) for role, name in names.items()
    }  # the registry between the runs
    # The second pair is never served: its ranker exports RTP alone (the first run exports the config's four
    # backends; AOTInductor's compile was ~15 s of this fixture's ~180 s on 2 cores) and trains in one process
    # (the first run trains it in the default two).
    second = run_pair_local(
        **common, backends="rtp", gpus_per_worker=1, overrides={"eval.gate.min_recall_at_k": 0.99}
    )
    return {"runs": runs, "tracking_uri": uri, **names, "first": first, "after_first": after_first,
            "second": second}  # fmt: skip


def _versions(uri: str, model: str) -> dict[int, dict]:
    return {int(v["version"]): v for v in tracking.list_models(uri, model)}


@pytest.mark.slow
def test_one_run_registers_both_models_and_promotes_them_as_a_pair(pair_run):
    s = pair_run["first"]
    assert s.status == "FINISHED", s.format()
    r, k = s.retriever, s.ranker
    assert (r.model_name, k.model_name) == (pair_run["retriever"], pair_run["ranker"])
    assert r.run_id != k.run_id  # one MLflow run per model
    assert r.gate_passed is True and k.gate_passed is True
    # each against its oracle: recall@50 over the 400-item catalogue, AUC of the same world's clicks
    assert 0.3 < r.recall[50] <= r.oracle_recall[50] + 0.05
    assert 0.7 < k.auc < k.oracle_auc
    assert sorted(k.backends) == ["aoti", "jit", "onnx", "rtp"]  # the ranker config's
    assert all(outcome.startswith("parity ok") for outcome in k.backends.values()), k.backends
    for role, partner_tag, partner in (
        ("retriever", "pair_ranker", "ranker"),
        ("ranker", "pair_retriever", "retriever"),
    ):
        (v,) = pair_run["after_first"][role].values()
        assert v["aliases"] == ["challenger", "champion"], (role, v)
        assert v["tags"][partner_tag] == f"{pair_run[partner]}/1"
    assert s.outcome == (
        "promoted: the pair retrieval-dssm-small v1 + retrieval-ranker-deepfm-small v1 is champion "
        "(retrieval-dssm-small first champion, retrieval-ranker-deepfm-small first champion)"
    )
    # lineage: each run names its role, its partner's version and run, and the pair's outcome
    tags = tracking.run_summary(r.run_id, uri=pair_run["tracking_uri"])["tags"]
    assert tags["pair.role"] == "retriever" and tags["pair.partner"] == "retrieval-ranker-deepfm-small/1"
    assert tags["pair.partner_run_id"] == k.run_id and tags["pair.outcome"] == s.outcome
    text = s.format()
    assert text.startswith("recpipe run (retriever + ranker): FINISHED in ")
    assert f"recall        @10 {r.recall[10]:.4f} (oracle {r.oracle_recall[10]:.4f})" in text
    assert f"AUC           {k.auc:.4f} vs oracle {k.oracle_auc:.4f}" in text
    assert "  pair          retrieval-dssm-small v1 + retrieval-ranker-deepfm-small v1\n" in text
    assert f"  outcome       {s.outcome}\n" in text


@pytest.mark.slow
def test_a_failed_gate_promotes_neither_and_the_previous_pair_stays_champion(pair_run):
    s = pair_run["second"]
    assert s.status == "FINISHED", s.format()
    assert s.retriever.gate_passed is False
    assert list(s.ranker.backends) == ["rtp"]  # the run's backends parameter, not the config's
    assert s.retriever.champion_source == (
        "v1 re-evaluated on the same eval data and catalogue (its training checkpoint)"
    )
    assert s.outcome.startswith(
        "rejected: not promoted: the retriever's gate failed (FAIL min_recall_at_k: recall@50 "
    ), s.outcome
    if s.ranker.gate_passed:  # the ranker's own gate is not what held the pair
        assert "ranker's gate" not in s.outcome
    for role, partner_tag, partner in (
        ("retriever", "pair_ranker", "ranker"),
        ("ranker", "pair_retriever", "retriever"),
    ):
        versions = _versions(pair_run["tracking_uri"], pair_run[role])
        assert sorted(versions) == [1, 2]
        assert versions[1]["aliases"] == ["champion"], (role, versions[1])  # the first pair stays champion
        assert versions[2]["aliases"] == ["challenger"], (role, versions[2])
        assert versions[2]["tags"][partner_tag] == f"{pair_run[partner]}/2"  # the new versions are a pair too
    assert _versions(pair_run["tracking_uri"], pair_run["retriever"])[2]["gate_passed"] is False
    tags = tracking.run_summary(s.retriever.run_id, uri=pair_run["tracking_uri"])["tags"]
    assert tags["gate.decision"] == "rejected" and tags["pair.outcome"] == s.outcome
    text = s.format()
    assert "gate          FAILED (champion: v1 re-evaluated" in text
    assert f"  outcome       {s.outcome}\n" in text


# ------------------------------------------------------------------------------- serving the promoted pair
@pytest.fixture(scope="module")
def served_pair(pair_run, tmp_path_factory) -> dict:
    """The champions as ``recpipe serve`` loads them (downloaded verified), a user row of the generated world."""
    import pyarrow.parquet as pq

    from recpipe.export.loaders import load_backend
    from recpipe.export.retriever import Retriever

    uri, work = pair_run["tracking_uri"], tmp_path_factory.mktemp("served")
    retriever = Retriever(
        tracking.download_served_export(uri, f"models:/{pair_run['retriever']}@champion", work / "r")
    )
    ranker = load_backend(
        tracking.download_served_export(uri, f"models:/{pair_run['ranker']}@champion", work / "k")
    )
    rows = next(
        p for p in sorted(pair_run["runs"].rglob("*.parquet")) if "user_segment" in pq.read_schema(p).names
    )
    user = pq.read_table(rows).select(["user_id", "user_segment"]).slice(0, 1).to_pylist()[0]
    return {"retriever": retriever, "ranker": ranker, "user": user}


def _expected(served: dict, k: int, n: int) -> tuple[list, list]:
    """Retrieve then rank by hand: the retriever's top ``k``, each candidate a FULL row (the user's columns
    repeated, no context form) scored by the ranker, the ``n`` most probable."""
    import numpy as np
    import pyarrow as pa

    retriever, ranker = served["retriever"], served["ranker"]
    ids, _ = retriever.top_k([served["user"]], k)
    catalogue = retriever.attributes()
    rows = catalogue.take(pa.compute.index_in(ids.flatten(), value_set=catalogue.column("item_id"))).select(
        ["item_id", "cate_id", "brand_id"]
    )
    for column, value in served["user"].items():
        rows = rows.append_column(column, pa.array([value] * k))
    probs = ranker.predict(rows)
    best = np.argsort(-probs, kind="stable")[:n]
    return [ids.flatten()[int(i)].as_py() for i in best], probs[best].tolist()


@pytest.mark.slow
def test_recpipe_serve_answers_one_request_through_both_champions(pair_run, served_pair, tmp_path):
    """``recpipe serve --model RETRIEVER@champion --ranker RANKER@champion``: a real server process; one user's
    request is retrieved (K candidates from the catalogue) and ranked (the ranker's probabilities) as by hand."""
    from local_http import invoke, scoring_server

    ranker = ["--ranker", f"models:/{pair_run['ranker']}@champion", "--threads", "1"]
    with scoring_server(
        f"models:/{pair_run['retriever']}@champion", pair_run["tracking_uri"], tmp_path, extra=ranker
    ) as server:
        body = {"dataframe_records": [served_pair["user"]], "params": {"k": 100, "n": 10}}
        status, doc = invoke(server.url, body)
    assert status == 200, doc
    (answer,) = doc["predictions"]
    ids, probs = _expected(served_pair, 100, 10)
    assert answer["item_ids"] == ids
    assert answer["scores"] == pytest.approx(probs, abs=1e-5)
    assert answer["scores"] == sorted(answer["scores"], reverse=True)
    # each answered item's retrieval score is the index's for that user and item
    top, scores = served_pair["retriever"].top_k([served_pair["user"]], 100)
    by_item = dict(zip(top.flatten().to_pylist(), scores[0].tolist(), strict=True))
    assert answer["retrieval_scores"] == pytest.approx([by_item[i] for i in ids], abs=1e-6)


def _post(app, doc: dict) -> tuple[int, dict]:
    import json

    from local_http import asgi_call

    status, body = asgi_call(
        app, "POST", "/invocations", json.dumps(doc).encode(), [("content-type", "application/json")]
    )
    return status, json.loads(body)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"k": 0}, "params.k (candidates retrieved) must be a whole number in 1..400 (the catalogue), got 0"),
        ({"k": 20, "n": 21}, "params.n (items answered) must be a whole number in 1..20 (params.k), got 21"),
        ({"top": 5}, "unknown params ['top']; retrieve-then-rank reads ['k', 'n']"),
    ],
)
def test_pair_requests_that_are_probably_mistakes_are_refused(served_pair, params, message):
    from recpipe.export.pair import PairInvoker
    from recpipe.export.server import ScoringApp

    app = ScoringApp(PairInvoker(served_pair["retriever"], served_pair["ranker"]))
    status, answer = _post(app, {"dataframe_records": [served_pair["user"]], "params": params})
    assert (status, answer["message"]) == (400, f"bad request: {message}")
    # a client that renamed its columns: none is the user tower's
    status, answer = _post(app, {"dataframe_records": [{"uid": 1, "segment": 2}]})
    assert status == 400 and "none of its columns is an input column of the model" in answer["message"]
    # the defaults: 50 of 400 (a catalogue smaller than 500 is retrieved whole)
    status, answer = _post(app, {"dataframe_records": [served_pair["user"]] * 2})
    assert status == 200 and [len(p["item_ids"]) for p in answer["predictions"]] == [50, 50]


@pytest.mark.slow
def test_versions_not_promoted_together_are_not_served_together(pair_run):
    from recpipe.tracking.models import RegisteredModelError

    uri, r, k = pair_run["tracking_uri"], pair_run["retriever"], pair_run["ranker"]
    retriever, ranker = tracking.check_served_pair(uri, f"models:/{r}@champion", f"models:/{k}@champion")
    assert (retriever["version"], ranker["version"]) == (1, 1)
    assert tracking.check_served_pair(uri, f"models:/{r}/2", f"models:/{k}@challenger")[1]["version"] == 2
    with pytest.raises(RegisteredModelError) as err:
        tracking.check_served_pair(uri, f"models:/{r}@champion", f"models:/{k}/2")
    assert str(err.value) == (
        f"refusing to serve {r}/1 (models:/{r}@champion) with {k}/2 (models:/{k}/2): they were not promoted "
        f"as a pair ({r}/1 names ranker {k}/1, {k}/2 names retriever {r}/2); serve the versions one pair run "
        "registered"
    )
    with pytest.raises(RegisteredModelError, match="no registered model .* with alias 'gold'"):
        tracking.check_served_pair(uri, f"models:/{r}@gold", f"models:/{k}@champion")


@pytest.mark.slow
def test_the_retrieval_benchmark_quick_run_serves_the_pair_runs_champions(pair_run, tmp_path):
    """``benchmarks/retrieval.py --quick --runs``: its measurements on this module's pair run (no training of its
    own); its results file goes where it is told, never benchmarks/results/."""
    import json
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    from quick_line import assert_last_line

    out = tmp_path / "retrieval.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/retrieval.py", "--quick", "--runs", str(pair_run["runs"]), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_last_line("retrieval", proc.stdout)
    stats = json.loads(out.read_text())
    # the first pair's retriever, measured through its export: the trainer's recall@50 within ties
    assert stats["recall_at_50"] == pytest.approx(pair_run["first"].retriever.recall[50], abs=5e-3)
    assert stats["oracle_recall_at_50"] == pytest.approx(
        pair_run["first"].retriever.oracle_recall[50], abs=1e-4
    )
    assert (stats["index"], stats["items"], stats["ann_recall_vs_exact"], stats["k"]) == (
        "flat",
        400,
        1.0,
        100,
    )
    assert 0 < stats["p50_ms_retrieve_rank"] <= stats["p99_ms_retrieve_rank"]
