"""MLflow's own scoring server (``mlflow models serve``, a real process on 127.0.0.1) for a registered
recpipe version: single-row and batch requests in both JSON layouts clients use, nulls and absent optional
columns (the raw-value contract), logits on request, and a bad request answered with HTTP 400 naming the
row and column while the server keeps serving, one user x N candidates with the user's columns once in
``params.context``. Nothing is mocked."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from local_http import invoke, predictions, scoring_server
from raw_rows import json_records, taobao_rows, typed

from recpipe.config import load_config
from recpipe.export.loaders import load_backend
from recpipe.export.server import WORKER_HEALTHCHECK_S
from recpipe.stages import evaluate, export, fit, ingest, promote, register, train

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "pipelines" / "data" / "tiny_din.yaml"
MODEL = "tiny-din-served"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny DIN trained, evaluated, exported, registered and promoted with the stages."""
    root = tmp_path_factory.mktemp("served")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    data = load_config(TINY).data
    ingest.run("synthetic:taobao?rows=6000&seed=11", root / "data", data.label, data.split,
               oracle_column=data.oracle_column)  # fmt: skip
    spec = fit.run(TINY, str(root / "data" / "train"), root / "fg.json").fg_json
    train.run(
        str(TINY), str(root / "data" / "train"), str(root / "data" / "eval"), str(root / "ckpt"), fg_json=spec
    )
    report = evaluate.run(str(root / "ckpt"), str(root / "data" / "eval"), str(root / "report.json"))
    export.run(str(root / "ckpt"), "rtp", str(root / "export"), data_uri=str(root / "data" / "eval"))
    version = register.run(str(root / "export"), report.report_path, MODEL, uri).version
    promote.run(MODEL, version, uri, force=True, reason="serving test: the tiny model need not pass its gate")
    return {"root": root, "uri": uri, "export": root / "export"}


@pytest.fixture(scope="module", params=["recpipe", "mlflow"])
def served(trained, request, tmp_path_factory):
    """The tiny DIN served by ``recpipe serve``: recpipe's scoring server (the default) and MLflow's own
    (``--server mlflow``), every test below against both."""
    work = tmp_path_factory.mktemp(f"server-{request.param}")
    extra = ["--server", request.param]
    with scoring_server(f"models:/{MODEL}@champion", trained["uri"], work, extra=extra) as server:
        rows = pq.read_table(trained["root"] / "data" / "eval").slice(0, 64)
        yield {
            "url": server.url,
            "rows": rows,
            "export": trained["export"],
            "server": server.process,
            "uri": trained["uri"],
            "kind": request.param,
            "log": work / "server.log",
        }


def _features(rows) -> list[dict]:
    records = rows.drop_columns(["clk", "true_prob", "time_stamp"]).to_pylist()
    return json.loads(json.dumps(records))  # what a JSON client sends


def test_batch_and_single_row_requests_score_like_the_export(served):
    records = _features(served["rows"])
    want = load_backend(served["export"] / "rtp").predict(served["rows"])
    status, body = invoke(served["url"], {"dataframe_records": records})
    assert status == 200, body
    np.testing.assert_allclose(predictions(body), want, atol=1e-6)
    cols = list(records[0])
    split = {"columns": cols, "data": [[r[c] for c in cols] for r in records]}
    status, body = invoke(served["url"], {"dataframe_split": split})
    assert status == 200 and np.allclose(predictions(body), want, atol=1e-6)
    status, body = invoke(served["url"], {"dataframe_records": records[:1]})
    assert status == 200 and np.allclose(predictions(body), want[:1], atol=1e-6)
    assert ((0 < predictions(body)) & (predictions(body) < 1)).all()  # probabilities by default


def test_nulls_and_absent_optional_columns_are_missing_values(served):
    rec = _features(served["rows"])[0]
    nulls = rec | {"brand": None, "price": None, "click_50_seq": None, "pid": ""}
    absent = {k: v for k, v in rec.items() if k not in ("brand", "price", "click_50_seq", "pid")}
    status, a = invoke(served["url"], {"dataframe_records": [nulls]})
    assert status == 200, a
    status, b = invoke(served["url"], {"dataframe_records": [absent]})
    assert status == 200, b
    want = load_backend(served["export"] / "rtp").predict([nulls])
    np.testing.assert_allclose(predictions(a), want, atol=1e-6)
    np.testing.assert_allclose(predictions(b), want, atol=1e-6)


def test_tf_serving_row_and_columnar_forms_with_nulls_score_like_records(served):
    """MLflow's protocol also takes TF Serving's ``instances`` (rows) and ``inputs`` (columns). MLflow's server
    parses ``instances`` into arrays of 0-d arrays, a JSON null among them ``array(None)``: read as a missing
    value, not as the text "None" (a hashed id's category "None", or a bad number)."""
    records = _features(served["rows"])[:8]
    records[0] |= {"brand": None, "price": None, "pid": None}
    records[3] |= {"click_50_seq": None}
    want = load_backend(served["export"] / "rtp").predict(records)
    status, body = invoke(served["url"], {"instances": records})
    assert status == 200, body
    np.testing.assert_allclose(predictions(body), want, atol=1e-6)
    status, body = invoke(served["url"], {"inputs": {c: [r[c] for r in records] for c in records[0]}})
    assert status == 200, body
    np.testing.assert_allclose(predictions(body), want, atol=1e-6)


def test_logits_on_request(served):
    records = _features(served["rows"])[:5]
    status, body = invoke(served["url"], {"dataframe_records": records, "params": {"output": "logit"}})
    assert status == 200, body
    want = load_backend(served["export"] / "rtp").predict(records, output="logit")
    np.testing.assert_allclose(predictions(body), want, atol=1e-5)


def test_one_user_times_candidates_in_params_context_scores_as_the_full_rows(served):
    """The context form as a client sends it: the items' columns as ``dataframe_split``, the user's columns once
    in ``params.context`` (JSON object text, through MLflow's param check); a mistaken context is a 400."""
    records = _features(served["rows"])[:20]
    user = ["user_id", "cms_segid", "age_level", "click_50_seq"]
    context = {c: records[0][c] for c in user}
    items = [c for c in records[0] if c not in user]
    split = {"columns": items, "data": [[r[c] for c in items] for r in records]}
    status, body = invoke(
        served["url"], {"dataframe_split": split, "params": {"context": json.dumps(context)}}
    )
    assert status == 200, body
    want = load_backend(served["export"] / "rtp").predict([r | context for r in records])
    np.testing.assert_allclose(predictions(body), want, rtol=0, atol=1e-6)
    mistaken = json.dumps({"user_id": 1, "adgroup_id": 2})  # adgroup_id is in the rows too
    status, body = invoke(served["url"], {"dataframe_split": split, "params": {"context": mistaken}})
    assert status == 400 and "['adgroup_id'] also in the rows" in body.get("message", ""), body
    status, body = invoke(served["url"], {"dataframe_split": split, "params": {"context": {"user_id": 1}}})
    assert status == 400, body  # not a string: MLflow's own param check refuses it


def test_a_bad_request_is_a_400_naming_row_and_column_and_the_server_keeps_serving(served):
    records = _features(served["rows"])[:3]
    records[2]["cms_segid"] = "not-an-id"
    status, body = invoke(served["url"], {"dataframe_records": records})
    assert status == 400, body
    assert "row 2, column 'cms_segid'" in body.get("message", "") and "not-an-id" in body["message"]
    status, _ = invoke(served["url"], {"dataframe_records": records[:2]})
    assert status == 200 and served["server"].poll() is None


def test_a_request_without_any_column_of_the_model_is_a_400_naming_the_columns(served):
    """Renamed columns would score as all-missing rows (confident wrong answers): refused, in both layouts."""
    records = [{f"{k}_renamed": v for k, v in r.items()} for r in _features(served["rows"])[:3]]
    status, body = invoke(served["url"], {"dataframe_records": records})
    assert status == 400, body
    message = body.get("message", "")
    assert "none of its columns is an input column of the model" in message
    assert "expected some of ['" in message and "'user_id'" in message and "'user_id_renamed'" in message
    cols = list(records[0])
    split = {"columns": cols, "data": [[r[c] for c in cols] for r in records]}
    status, body = invoke(served["url"], {"dataframe_split": split})
    assert status == 400 and "none of its columns" in body.get("message", "")
    # One known column, the others absent: scored as missing values (the raw contract), as before.
    one = [{"user_id": r["user_id_renamed"]} for r in records]
    status, body = invoke(served["url"], {"dataframe_records": one})
    assert status == 200, body
    want = load_backend(served["export"] / "rtp").predict(one)
    np.testing.assert_allclose(predictions(body), want, atol=1e-6)
    assert served["server"].poll() is None


def test_the_pyfunc_itself_refuses_a_request_without_any_model_column(trained):
    from mlflow.exceptions import MlflowException

    from recpipe.tracking import load_pyfunc_model

    model = load_pyfunc_model(trained["uri"], f"models:/{MODEL}@champion")
    frame = (
        pq.read_table(trained["root"] / "data" / "eval").slice(0, 4).to_pandas().rename(columns=str.upper)
    )  # USER_ID, ...: none known
    with pytest.raises(MlflowException, match="none of its columns is an input column") as err:
        model.predict(frame)
    assert err.value.error_code == "BAD_REQUEST" and "'USER_ID'" in err.value.message
    kept = frame.rename(columns={"USER_ID": "user_id"})  # one column known again: scored
    want = load_backend(trained["export"] / "rtp").predict(kept[["user_id"]])
    np.testing.assert_allclose(np.asarray(model.predict(kept), float), want, atol=1e-6)


@functools.cache
def _reference(folder: Path):
    """The export's rtp scorer in this process, loaded once for every example."""
    return load_backend(folder)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=taobao_rows())
def test_generated_rows_score_the_same_through_the_server(served, data):
    """The raw-value contract's property test, its fourth representation: JSON records through the server."""
    rows, types = data
    want = _reference(served["export"] / "rtp").predict(typed(rows, types))
    status, body = invoke(served["url"], {"dataframe_records": json_records(rows)})
    assert status == 200, body
    np.testing.assert_allclose(predictions(body), want, rtol=0, atol=1e-6)


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (from /proc: the server execs mlflow, which starts uvicorn and its workers)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def _workers(pid: int) -> list[int]:
    """The server's worker processes (uvicorn starts them with multiprocessing's spawn)."""
    out = []
    for p in _descendants(pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
            out.append(p)
    return sorted(out)


def _environ(pid: int, name: str) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(f"{name}=".encode())), None)


def test_two_workers_of_one_torch_thread_each_answer_concurrent_clients(served, tmp_path):
    """``recpipe serve --workers 2 --threads 1``: every process of the server runs with one torch thread (two
    workers with every core each fight over the cores), concurrent clients get the export's scores, and a worker
    killed (SIGKILL) is replaced while the other one answers."""
    from concurrent.futures import ThreadPoolExecutor

    records = _features(served["rows"])
    want = load_backend(served["export"] / "rtp").predict(served["rows"])
    model = f"models:/{MODEL}@champion"
    extra = ["--server", served["kind"], "--workers", "2", "--threads", "1"]
    with scoring_server(model, served["uri"], tmp_path, extra=extra) as server:
        procs = _descendants(server.process.pid)
        assert len(procs) >= 3, procs  # uvicorn's supervisor and its two workers (and what starts them)
        assert {_environ(p, "OMP_NUM_THREADS") for p in [server.process.pid, *procs]} - {None} == {"1"}
        if served["kind"] == "mlflow":  # uvicorn's supervisor waits for a worker still importing torch
            patience = {_environ(p, "UVICORN_TIMEOUT_WORKER_HEALTHCHECK") for p in procs}
            assert patience - {None} == {str(WORKER_HEALTHCHECK_S)}

        def one(i: int) -> tuple[int, np.ndarray]:
            status, body = invoke(server.url, {"dataframe_records": records[i % 60 : i % 60 + 4]})
            return status, predictions(body) if status == 200 else np.zeros(0)

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(one, range(40)))
        # A worker killed under load: the supervisor starts another; the server answers throughout.
        victim = _workers(server.process.pid)[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 120
        # One sample decides (a second one could catch the supervisor between two workers).
        while (len(workers := _workers(server.process.pid)) < 2 or victim in workers) and (
            time.monotonic() < deadline
        ):
            status, _ = invoke(server.url, {"dataframe_records": records[:1]})
            assert status == 200  # the other worker answers meanwhile
            time.sleep(0.2)
        assert len(workers) == 2 and victim not in workers, (
            f"workers {workers} after killing {victim}; the server's log ends:\n"
            + "\n".join((tmp_path / "server.log").read_text().splitlines()[-40:])
        )
        with ThreadPoolExecutor(4) as pool:
            after = list(pool.map(one, range(8)))
    for answered in (answers, after):
        for i, (status, got) in enumerate(answered):
            assert status == 200
            np.testing.assert_allclose(got, want[i % 60 : i % 60 + 4], atol=1e-6)
    assert (
        f"({served['kind']}'s server, 2 workers, OMP_NUM_THREADS=1 each)"
        in (tmp_path / "server.log").read_text()
    )
