"""recpipe's scoring server (``recpipe.export.server``): the body's forms as MLflow's protocol defines them, each
mistaken body refused with the status and a message naming what is wrong, and the ASGI application itself
driven over the real loaded RTP export of the small DIN (scores equal to the scorer's). The server as a
process, through HTTP and against MLflow's own: tests/tracking/test_scoring_server.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from local_http import asgi_call

from recpipe.export.loaders import load_backend
from recpipe.export.server import (
    MAX_BODY_BYTES,
    RequestError,
    ScoringApp,
    _content_type,
    parse_json_body,
)
from recpipe.features.raw import records_to_arrow, to_arrow


def _body(doc) -> bytes:
    return json.dumps(doc).encode()


def test_records_and_split_give_the_same_table():
    records = [{"user_id": 1, "price": None, "brand": "b"}, {"user_id": "7", "price": 2.5}]
    a, out_a, ctx_a = parse_json_body(_body({"dataframe_records": records}))
    split = {
        "columns": ["user_id", "price", "brand"],
        "data": [[1, None, "b"], ["7", 2.5, None]],
        "index": [0, 1],
    }
    b, out_b, ctx_b = parse_json_body(_body({"dataframe_split": split, "params": {"output": "logit"}}))
    assert (
        a.to_pylist()
        == b.to_pylist()
        == [
            {
                "user_id": "1",
                "price": None,
                "brand": "b",
            },  # ids mixing numbers and text: text, as a DataFrame gives
            {"user_id": "7", "price": 2.5, "brand": None},
        ]
    )
    assert (out_a, ctx_a, out_b, ctx_b) == ("probability", None, "logit", None)


def test_json_records_become_the_same_columns_as_through_pandas_and_large_ids_keep_their_digits():
    import pandas as pd

    records = [{"a": 1, "b": 1.5, "c": "x", "d": None}, {"a": None, "b": 2, "e": True}, {"a": 3, "c": 4}]
    direct, via_pandas = records_to_arrow(records), to_arrow(pd.DataFrame.from_records(records))
    assert direct.column_names == via_pandas.column_names == ["a", "b", "c", "d", "e"]
    for (
        name
    ) in direct.column_names:  # the same values; pandas turns an integer column with a null into floats
        assert direct[name].to_pylist() == via_pandas[name].to_pylist(), name
    big = records_to_arrow([{"user_id": 2**60 + 1}, {"user_id": None}])
    assert big["user_id"].type == pa.int64() and big["user_id"].to_pylist() == [2**60 + 1, None]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", "the body is not JSON"),
        (_body([{"user_id": 1}]), "must be a JSON object"),
        (_body({"dataframe_records": [], "dataframe_split": {}}), "exactly one of"),
        (_body({"params": {}}), "exactly one of"),
        (_body({"dataframe_records": [], "inputs": []}), "exactly one of"),
        (_body({"dataframe_records": [], "rows": []}), "unknown keys ['rows']"),
        (_body({"instances": [{"user_id": 1}, [2]]}), "instances row 1 must be an object"),
        (_body({"inputs": [[1, 2]]}), "inputs must be an object of column -> list of values"),
        (_body({"inputs": {"user_id": 1}}), "an object whose values are not all lists"),
        (_body({"inputs": {"user_id": [1, 2], "price": [1.5]}}), "must hold as many values each"),
        (
            _body({"dataframe_records": [{"user_id": 1}], "params": {"outptu": "logit"}}),
            "unknown params ['outptu']",
        ),
        (
            _body({"dataframe_records": [{"user_id": 1}], "params": {"output": "odds"}}),
            "params.output must be",
        ),
        (
            _body({"dataframe_records": [{"user_id": 1}], "params": {"context": {"user_id": 1}}}),
            "must be a string",
        ),
        (_body({"dataframe_records": [{"user_id": 1}, 2]}), "dataframe_records row 1 must be an object"),
        (_body({"dataframe_records": {"user_id": 1}}), "dataframe_records must be a list"),
        (
            _body({"dataframe_split": {"columns": ["a", "b"], "data": [[1, 2], [3]]}}),
            "data row 1 must be a list of 2",
        ),
        (_body({"dataframe_split": {"columns": ["a", "a"], "data": []}}), "names a column twice"),
        (_body({"dataframe_split": {"columns": ["a"], "rows": []}}), "unknown keys ['rows']"),
    ],
)
def test_a_mistaken_body_is_refused_naming_what_is_wrong(body, expected):
    with pytest.raises(RequestError) as err:
        parse_json_body(body)
    assert err.value.status == 400 and expected in err.value.message, err.value.message


def test_content_types_as_mlflow_reads_them():
    assert _content_type("application/json") == "application/json"
    assert _content_type("application/json; charset=UTF-8") == "application/json"
    assert _content_type("text/csv") == "text/csv"
    for bad, expected in [
        (None, "a Content-Type is required"),
        ("application/x-www-form-urlencoded", "the body must be"),  # curl -d without -H
        ("application/json; charset=latin-1", "only UTF-8"),
        ("application/json; format=pandas-split", "unrecognized Content-Type parameter 'format'"),
    ]:
        with pytest.raises(RequestError) as err:
            _content_type(bad)
        assert err.value.status == 415 and expected in err.value.message


_call = asgi_call  # also imported by test_retrieval_server


@pytest.fixture(scope="module")
def app_and_rows(din_export):
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    rows = trained.held_out.drop_columns(
        [c for c in trained.held_out.column_names if c in trained.spec.labels]
    )
    return ScoringApp(scorer, version="recpipe test"), scorer, rows.slice(0, 16)


JSON_HEADERS = [("content-type", "application/json")]


def test_the_application_scores_every_body_form_as_the_scorer(app_and_rows):
    app, scorer, rows = app_and_rows
    want = scorer.predict(rows)
    records = json.loads(json.dumps(rows.to_pylist()))
    status, body = _call(app, "POST", "/invocations", _body({"dataframe_records": records}), JSON_HEADERS)
    assert status == 200, body
    np.testing.assert_allclose(json.loads(body)["predictions"], want, rtol=0, atol=1e-6)
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    status, body = _call(
        app, "POST", "/invocations", sink.getvalue(), [("content-type", "application/vnd.apache.parquet")]
    )
    assert status == 200, body
    np.testing.assert_allclose(json.loads(body)["predictions"], want, rtol=0, atol=1e-6)
    csv = rows.select(["user_id", "adgroup_id", "cate_id", "price"]).to_pandas().to_csv(index=False).encode()
    status, body = _call(app, "POST", "/invocations", csv, [("content-type", "text/csv")])
    assert status == 200, body
    np.testing.assert_allclose(
        json.loads(body)["predictions"],
        scorer.predict(rows.select(["user_id", "adgroup_id", "cate_id", "price"])),
        rtol=0,
        atol=1e-6,
    )
    # TF Serving's row and columnar forms, as MLflow's protocol takes them.
    status, body = _call(app, "POST", "/invocations", _body({"instances": records}), JSON_HEADERS)
    assert status == 200, body
    np.testing.assert_allclose(json.loads(body)["predictions"], want, rtol=0, atol=1e-6)
    columns = {c: [r.get(c) for r in records] for c in records[0]}
    status, body = _call(app, "POST", "/invocations", _body({"inputs": columns}), JSON_HEADERS)
    assert status == 200, body
    np.testing.assert_allclose(json.loads(body)["predictions"], want, rtol=0, atol=1e-6)
    status, body = _call(
        app,
        "POST",
        "/invocations",
        _body({"dataframe_records": records[:2], "params": {"output": "logit"}}),
        JSON_HEADERS,
    )
    assert status == 200
    np.testing.assert_allclose(
        json.loads(body)["predictions"], scorer.predict(rows.slice(0, 2), "logit"), atol=1e-5
    )


def test_a_history_sent_as_a_json_array_scores_as_its_text(app_and_rows):
    """A client holding the history as an array of items (each a list of sub-values, numbers or text) gets the
    probabilities of the same history sent as ``|`` / ``\\x03`` text; arrays nested unevenly are a 400."""
    app, scorer, rows = app_and_rows
    records = json.loads(json.dumps(rows.to_pylist()))
    records[2]["click_50_seq"], records[5]["click_50_seq"] = "", None  # an empty history and a null one
    want = scorer.predict(records)
    for r in records:
        h = r["click_50_seq"]
        items = (
            [] if not h else [[int(x) if x.isdigit() else x for x in it.split("\x03")] for it in h.split("|")]
        )
        r["click_50_seq"] = None if h is None else items
    mixed = next(r for r in records if r["click_50_seq"])["click_50_seq"]
    mixed[0][0] = str(mixed[0][0])  # one id as text among numbers: the column becomes lists of text
    status, body = _call(app, "POST", "/invocations", _body({"dataframe_records": records}), JSON_HEADERS)
    assert status == 200, body
    np.testing.assert_allclose(json.loads(body)["predictions"], want, rtol=0, atol=1e-6)
    records[1]["click_50_seq"] = [11, 12]  # items as values where the others are lists
    status, body = _call(app, "POST", "/invocations", _body({"dataframe_records": records}), JSON_HEADERS)
    assert (
        status == 400
        and "column 'click_50_seq': its lists mix values and lists" in json.loads(body)["message"]
    )


def test_a_gzip_body_is_read_within_the_body_limit(app_and_rows, monkeypatch):
    """``Content-Encoding: gzip`` (a client compressing hundreds of candidates): the same scores; an encoding the
    server does not read is a 415, gzip that is corrupt or cut short a 400, one inflating past the limit a 413."""
    import gzip

    from recpipe.export import server

    app, scorer, rows = app_and_rows
    body = _body({"dataframe_records": json.loads(json.dumps(rows.to_pylist()))})
    packed = gzip.compress(body)
    status, answer = _call(app, "POST", "/invocations", packed, [*JSON_HEADERS, ("content-encoding", "gzip")])
    assert status == 200, answer
    np.testing.assert_allclose(json.loads(answer)["predictions"], scorer.predict(rows), rtol=0, atol=1e-6)
    status, answer = _call(app, "POST", "/invocations", packed, [*JSON_HEADERS, ("content-encoding", "br")])
    assert status == 415 and "Content-Encoding 'br' is not read" in json.loads(answer)["message"]
    status, answer = _call(
        app, "POST", "/invocations", packed[:-12], [*JSON_HEADERS, ("content-encoding", "gzip")]
    )
    assert status == 400 and "cut short" in json.loads(answer)["message"]
    status, answer = _call(app, "POST", "/invocations", body, [*JSON_HEADERS, ("content-encoding", "gzip")])
    assert status == 400 and "does not decompress" in json.loads(answer)["message"]
    monkeypatch.setattr(server, "MAX_BODY_BYTES", len(body) - 1)  # the packed body fits, inflated it does not
    status, answer = _call(app, "POST", "/invocations", packed, [*JSON_HEADERS, ("content-encoding", "gzip")])
    assert status == 413 and "decompressed" in json.loads(answer)["message"]


def test_the_application_answers_errors_with_their_status(app_and_rows):
    app, _, rows = app_and_rows
    records = json.loads(json.dumps(rows.slice(0, 3).to_pylist()))
    records[2]["cms_segid"] = "not-an-id"
    status, body = _call(app, "POST", "/invocations", _body({"dataframe_records": records}), JSON_HEADERS)
    assert status == 400
    doc = json.loads(body)
    assert doc["error_code"] == "BAD_REQUEST" and "row 2, column 'cms_segid'" in doc["message"]
    renamed = [{f"{k}_x": v for k, v in r.items()} for r in records]
    status, body = _call(app, "POST", "/invocations", _body({"dataframe_records": renamed}), JSON_HEADERS)
    assert status == 400 and "none of its columns is an input column" in json.loads(body)["message"]
    assert _call(app, "POST", "/invocations", b"{}", [("content-type", "text/plain")])[0] == 415
    huge = [("content-type", "application/json"), ("content-length", str(MAX_BODY_BYTES + 1))]
    assert _call(app, "POST", "/invocations", b"", huge)[0] == 413
    assert _call(app, "GET", "/invocations")[0] == 405
    assert _call(app, "GET", "/score")[0] == 404
    assert _call(app, "GET", "/ping") == (200, b"\n")
    assert _call(app, "GET", "/health") == (200, b"\n")
    assert _call(app, "GET", "/version") == (200, b"recpipe test")


def test_the_application_scores_the_context_form_with_the_shared_history_program(din_export):
    """One user × N candidates as a client sends it (``dataframe_split`` candidates, the user's columns once in
    ``params.context``): the full rows' probabilities, through the RTP export's shared-history program."""
    from one_user import one_user

    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    program, calls = scorer.shared_history.program, []
    scorer.shared_history.program = lambda *inputs: calls.append(inputs[0].shape[0]) or program(*inputs)
    app = ScoringApp(scorer, version="recpipe test")
    context, candidates, full = one_user(trained, 40)
    records = json.loads(json.dumps(candidates.to_pylist()))
    split = {
        "columns": candidates.column_names,
        "data": [[r[c] for c in candidates.column_names] for r in records],
    }
    body = {"dataframe_split": split, "params": {"context": json.dumps(context)}}
    status, answer = _call(app, "POST", "/invocations", _body(body), JSON_HEADERS)
    assert status == 200, answer
    assert calls == [40]  # the shared program, once for the 40 candidates
    want = load_backend(Path(result.out_dir) / "rtp").predict(full)  # the rows form, the tiled program
    tolerance = trained.cfg.export.max_abs_logit_diff
    np.testing.assert_allclose(json.loads(answer)["predictions"], want, rtol=0, atol=tolerance)
    full_records = json.loads(json.dumps(full.to_pylist()))
    status, answer = _call(
        app, "POST", "/invocations", _body({"dataframe_records": full_records}), JSON_HEADERS
    )
    assert status == 200 and calls == [40]  # rows without a context: the tiled program
    np.testing.assert_allclose(json.loads(answer)["predictions"], want, rtol=0, atol=1e-6)
    # The user's history as a JSON array of items in the context: the same scores, the shared program again.
    history = context["click_50_seq"]
    assert history, "the one user has a history"
    listed = {**context, "click_50_seq": [[int(x) if x.isdigit() else x for x in item.split("\x03")]
                                          for item in history.split("|")]}  # fmt: skip
    body = {"dataframe_split": split, "params": {"context": json.dumps(listed)}}
    status, answer = _call(app, "POST", "/invocations", _body(body), JSON_HEADERS)
    assert status == 200 and calls == [40, 40], answer
    np.testing.assert_allclose(json.loads(answer)["predictions"], want, rtol=0, atol=tolerance)


def test_a_server_worker_keeps_the_loaded_model_out_of_the_garbage_collectors_scans(din_export, monkeypatch):
    """``app()`` (what each uvicorn worker builds) freezes what it loaded (``gc.freeze``): a full collection no
    longer walks the model's objects while requests are in flight."""
    import gc

    from recpipe.export import server

    _, result = din_export
    monkeypatch.setenv(server.ENV_FOLDER, str(Path(result.out_dir) / "rtp"))
    gc.unfreeze()
    try:
        application = server.app()
        assert isinstance(application, ScoringApp)
        assert gc.get_freeze_count() > 10_000  # the loaded export's objects, among everything alive
    finally:
        gc.unfreeze()


def test_the_registered_pyfunc_freezes_what_it_loaded_only_in_a_serve_worker(din_export, monkeypatch):
    """``recpipe serve`` sets ``RECPIPE_GC_FREEZE=1`` for MLflow's scoring-server workers: the registered pyfunc's
    ``load_context`` then freezes the loaded model as recpipe's own server does. Anywhere else (a notebook, a
    batch job loading the model) it does not: objects frozen there would never be collected."""
    import gc
    from types import SimpleNamespace

    from recpipe.export import server
    from recpipe.export.layout import backend_folder
    from recpipe.tracking.pyfunc import ARTIFACT, RawRowsModel

    _, result = din_export
    context = SimpleNamespace(artifacts={ARTIFACT: str(backend_folder(Path(result.out_dir) / "rtp"))})
    gc.unfreeze()
    try:
        for value in (None, "0"):
            if value is None:
                monkeypatch.delenv(server.GC_FREEZE_ENV, raising=False)
            else:
                monkeypatch.setenv(server.GC_FREEZE_ENV, value)
            RawRowsModel().load_context(context)
            assert gc.get_freeze_count() == 0, value
        monkeypatch.setenv(server.GC_FREEZE_ENV, "1")
        RawRowsModel().load_context(context)
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
