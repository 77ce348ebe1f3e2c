"""recpipe's scoring server over a retrieval export (issue 30): a user row's top-K items, the same as
:class:`~recpipe.export.retriever.Retriever`'s; ``params.k``; the request a client that renamed its columns, or
sent only the item's, would send refused with 400; and ``recpipe serve`` of a registered retrieval version, a real
server process, answering what the registered export retrieves."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from local_http import invoke, scoring_server
from retrieval_world import shared_world
from test_server import _call

from recpipe import tracking
from recpipe.export.retriever import Retriever
from recpipe.export.server import RetrievalInvoker, ScoringApp

JSON_HEADERS = [("content-type", "application/json")]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    w = shared_world(tmp_path_factory)
    w["retriever"] = Retriever(w["export"])
    w["app"] = ScoringApp(RetrievalInvoker(w["retriever"]), version="recpipe test")
    users = pq.read_table(w["eval"]).select(["user_id", "user_segment"]).slice(0, 5)
    w["users"] = users
    return w


def _post(app: ScoringApp, doc: dict) -> tuple[int, dict]:
    status, body = _call(app, "POST", "/invocations", json.dumps(doc).encode(), JSON_HEADERS)
    return status, json.loads(body)


def test_the_top_k_of_each_user_row_is_the_retrievers(world):
    users = world["users"]
    status, answer = _post(world["app"], {"dataframe_records": users.to_pylist(), "params": {"k": 7}})
    assert status == 200 and len(answer["predictions"]) == 5
    ids, scores = world["retriever"].top_k(users, 7)
    assert [p["item_ids"] for p in answer["predictions"]] == ids.to_pylist()
    got = np.asarray([p["scores"] for p in answer["predictions"]])
    assert np.allclose(got, scores, atol=1e-6) and (np.diff(got, axis=1) <= 1e-7).all()  # best first
    # dataframe_split, and the default k (50, at most the catalogue)
    split = {"columns": users.column_names, "data": [list(r.values()) for r in users.to_pylist()]}
    status, answer = _post(world["app"], {"dataframe_split": split})
    assert status == 200 and {len(p["item_ids"]) for p in answer["predictions"]} == {50}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"dataframe_records": [{"client": 7}]}, "none of its columns is an input column"),
        # only the item's columns: the user tower reads none of them (a confident wrong answer otherwise)
        (
            {"dataframe_records": [{"item_id": 7, "cate_id": 1}]},
            "expected some of ['user_id', 'user_segment']",
        ),
        ({"dataframe_records": [{"user_id": "x"}]}, "row 0"),
        (
            {"dataframe_records": [{"user_id": 7}], "params": {"k": 0}},
            "params.k must be a whole number in 1..180",
        ),
        ({"dataframe_records": [{"user_id": 7}], "params": {"k": 181}}, "params.k must be a whole number"),
        ({"dataframe_records": [{"user_id": 7}], "params": {"k": "5"}}, "params.k must be a whole number"),
        (
            {"dataframe_records": [{"user_id": 7}], "params": {"output": "logit"}},
            "a retrieval model reads ['k']",
        ),
    ],
)
def test_requests_that_are_probably_mistakes_are_refused(world, doc, message):
    status, answer = _post(world["app"], doc)
    assert status == 400 and answer["error_code"] == "BAD_REQUEST" and message in answer["message"], answer


@pytest.mark.slow
def test_recpipe_serve_serves_a_registered_retrieval_version(world, tmp_path):
    """The export registered as a version (as the pipeline's register step does), then ``recpipe serve`` of
    ``models:/NAME@champion``: a real process on a loopback port, stopped at the end."""
    from recpipe.stages.register_retrieval import register_retrieval
    from recpipe.tracking import open_run_log

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    report = {
        "kind": "retrieval",
        "candidate": {"recall_at_50": 0.5},
        "gate": {"passed": True, "reasons": [], "k": 50},
    }
    version, _ = register_retrieval(
        world["export"], report, "ret-served", uri, "d", open_run_log(run_id, uri), "model"
    )
    tracking.set_alias(uri, "ret-served", tracking.ALIAS_CHAMPION, version)

    with scoring_server("models:/ret-served@champion", uri, tmp_path, extra=["--threads", "1"]) as server:
        status, answer = invoke(
            server.url, {"dataframe_records": world["users"].to_pylist(), "params": {"k": 5}}
        )
        assert status == 200, answer
    ids, _ = world["retriever"].top_k(world["users"], 5)
    assert [p["item_ids"] for p in answer["predictions"]] == ids.to_pylist()
