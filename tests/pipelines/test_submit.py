"""``recpipe pipeline schedule``: KFP's 6-field cron, and the recurring run it creates, sent by the real
``kfp.Client`` to a local HTTP server that answers the KFP v2beta1 API and records every request."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kfp import dsl

from pipelines.submit import kfp_cron
from recpipe.cli.main import main


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("0 3 * * *", "0 0 3 * * *"),  # crontab's 5 fields: second 0 first
        ("  30 2 * * 1-5 ", "0 30 2 * * 1-5"),
        ("*/15 * * * *", "0 */15 * * * *"),
        ("0 0 3 ? * MON-FRI", "0 0 3 ? * MON-FRI"),  # KFP's own 6 fields kept
        ("0 0 4 1,15 jan,Jul *", "0 0 4 1,15 jan,Jul *"),
        ("@daily", "0 0 0 * * *"),
        ("@HOURLY", "0 0 * * * *"),
    ],
)
def test_kfp_cron_sends_six_fields(given, sent):
    assert kfp_cron(given) == sent


@pytest.mark.parametrize(
    ("given", "text"),
    [
        ("0 3 * *", "has 4 fields; give 5"),
        ("0 0 0 3 * * *", "has 7 fields"),
        ("", "has 0 fields"),
        ("0 25 * * *", "hour field '25': '25' is outside 0-23"),
        ("0 3 * * 7", "day of week field '7': '7' is outside 0-6"),
        ("0 3 0 * *", "day of month field '0': '0' is outside 1-31"),
        ("50-10 * * * *", "minute field '50-10': range '50-10' runs backwards"),
        ("*/0 * * * *", "step '0' must be a whole number >= 1"),
        ("0 3 L * *", "'L' is not *, a value (1-31)"),
        ("0 ? * * *", "hour field '?'"),  # '?' only for the day fields
        ("0 3 * FOO *", "month field 'FOO'"),
        # robfig/cron v3's zone prefix: KFP's scheduler (v1) has none, its zone is the controller's
        ("CRON_TZ=Asia/Shanghai 0 3 * * *", "KFP's cron takes no time zone"),
        ("TZ=UTC 0 3 * * *", "cronScheduleTimezone in pipeline-install-config"),
    ],
)
def test_kfp_cron_refuses_what_kfp_would_misread(given, text):
    with pytest.raises(ValueError, match="cron ") as err:
        kfp_cron(given)
    assert text in str(err.value)


class _KfpApi(BaseHTTPRequestHandler):
    """The few KFP v2beta1 endpoints ``create_experiment`` and ``create_recurring_run`` call."""

    requests: list[tuple[str, str, dict]] = []

    def _reply(self, body: dict, code: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.requests.append(("GET", self.path, {"authorization": self.headers.get("authorization")}))
        if self.path.startswith("/apis/v2beta1/healthz"):
            return self._reply({"multi_user": False})
        if self.path.startswith("/apis/v2beta1/experiments"):
            return self._reply({"experiments": []})  # none yet: the client creates it
        return self._reply({"error": "not found"}, 404)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(("POST", self.path, body))
        if self.path == "/apis/v2beta1/experiments":
            return self._reply({"experiment_id": "exp-1", **body})
        if self.path == "/apis/v2beta1/recurringruns":
            return self._reply({"recurring_run_id": "rr-7", **body})
        return self._reply({"error": "not found"}, 404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kfp_api(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads its context file under ~/.config
    monkeypatch.setenv("KFP_TOKEN", "t0ken")
    _KfpApi.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KfpApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", _KfpApi.requests
    server.shutdown()
    server.server_close()


def test_schedule_creates_a_recurring_run_filled_from_its_scheduled_time(kfp_api, capsys):
    host, requests = kfp_api
    argv = ["pipeline", "schedule", "--host", host, "--cron", "0 3 * * *", "--experiment", "daily"]
    argv += ["--param", "workers=2", "--param", "data_source=s3://logs/clicks"]
    assert main(argv) == 0
    posts = {path: body for method, path, body in requests if method == "POST"}
    assert posts["/apis/v2beta1/experiments"]["display_name"] == "daily"
    job = posts["/apis/v2beta1/recurringruns"]
    assert job["trigger"] == {"cron_schedule": {"cron": "0 0 3 * * *"}}
    assert (job["display_name"], job["experiment_id"], job["mode"]) == ("recpipe-daily", "exp-1", "ENABLE")
    # One run at a time (each starts from the champion the previous one left), no burst after a pause.
    assert job["max_concurrency"] == 1 and job["no_catchup"] is True
    assert job["runtime_config"]["parameters"] == {
        "workers": 2,
        "data_source": "s3://logs/clicks",
        "partitions": "dt={date-2}..{date-1}",
        "init_from": "champion-if-any",
    }
    # The package sent is the pipeline whose start step receives KFP's schedule-time placeholder.
    spec = job["pipeline_spec"]["pipeline_spec"]
    start = spec["root"]["dag"]["tasks"]["start"]["inputs"]["parameters"]
    assert (
        start["schedule_time"]["runtimeValue"]["constant"] == dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER
    )
    assert start["partitions"]["componentInputParameter"] == "partitions"
    assert {r[2]["authorization"] for r in requests if r[0] == "GET"} == {"Bearer t0ken"}
    out = capsys.readouterr().out.splitlines()
    assert out[-3] == "scheduled recurring run rr-7: cron '0 0 3 * * *' (KFP's 6 fields, UTC)"
    assert out[-2] == "each run: partitions dt={date-2}..{date-1}, init_from champion-if-any"
    assert out[-1] == f"{host}/#/recurringrun/details/rr-7"


def test_schedule_options_reach_the_request(kfp_api):
    host, requests = kfp_api
    argv = ["pipeline", "schedule", "--host", host, "--cron", "0 0 1 * * *", "--name", "ctr-week"]
    argv += ["--partition", "dt={date-7}..{date-1}", "--init-from", "", "--catchup"]
    assert main(argv) == 0
    (job,) = [body for method, path, body in requests if path == "/apis/v2beta1/recurringruns"]
    assert job["display_name"] == "ctr-week" and job["no_catchup"] is False
    assert job["runtime_config"]["parameters"] == {"partitions": "dt={date-7}..{date-1}", "init_from": ""}


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        (["--cron", "0 3 * *"], "has 4 fields"),
        (["--cron", "0 3 * * *", "--partition", "dt=20260107"], "name the same data for every run"),
        (["--cron", "0 3 * * *", "--partition", "dt={day}"], "unknown placeholder(s) ['{day}']"),
        (["--cron", "0 3 * * *", "--param", "gpus=8"], "unknown pipeline parameter(s) ['gpus']"),
        (["--cron", "0 3 * * *", "--param", "partitions=latest"], "partitions given twice"),
    ],
)
def test_schedule_refuses_before_contacting_the_server(kfp_api, capsys, extra, text):
    host, requests = kfp_api
    assert main(["pipeline", "schedule", "--host", host, *extra]) == 2
    assert text in capsys.readouterr().err
    assert requests == []


def test_schedule_accepts_moving_selectors(kfp_api):
    host, requests = kfp_api
    assert main(["pipeline", "schedule", "--host", host, "--cron", "@daily", "--partition", "last:7"]) == 0
    (job,) = [body for method, path, body in requests if path == "/apis/v2beta1/recurringruns"]
    assert job["runtime_config"]["parameters"]["partitions"] == "last:7"
