"""Serving under load: k concurrent loopback clients for a fixed time against recpipe's scoring server and MLflow's.

Setup as ``benchmarks/serving.py`` (its :func:`~serving.train_and_register`: ``recpipe run`` of
``configs/din_taobao_small.yaml`` on generated Taobao rows into a fresh sqlite store, then ``recpipe serve`` on
127.0.0.1 with :func:`~serving.serve`). Then, for each server setting of ``--servers`` (``WxT``: W server
workers, T torch threads each, ``recpipe serve --workers W --threads T``; ``mlflow:WxT`` the same with ``--server
mlflow``, MLflow's own server, the baseline), ``--clients`` threads each keep one
HTTP connection open and send requests back to back for ``--seconds``, the way clients build them:

- good (about 90%): ``dataframe_records`` or ``dataframe_split``, 1 row or 4 rows, and rows with nulls where the
  raw-value contract allows them (brand, price, the click history: missing values, scored);
- bad (``--bad-fraction``): rows none of whose columns is the model's (renamed), or malformed JSON: both must
  be answered 400.

Measured per setting: throughput (good requests answered per second), p50 / p99 latency of the good requests
(client side: send to last byte), and errors — a 5xx, a connection error, a bad request answered 200, a good
one answered 4xx or with the wrong number of predictions. Everything is bounded: the clients stop at the
deadline, every request has a timeout, the server is stopped after each setting.

Last line (the first setting of ``--servers``): ``serving_load: rps=… p50_ms=… p99_ms=… errors=…
rps_vs_mlflow=… mlflow_p99_ms=…`` (against the first MLflow setting); every setting in
``benchmarks/results/serving_load.json``.

Run: ``.venv/bin/python benchmarks/serving_load.py`` (about 9 minutes on 2 cores at load 11: the pipeline run
about 6, then 30 s per setting and its server's start). ``--runs DIR`` serves what a ``recpipe run`` of the config
left in DIR instead of training. ``--quick``: 20,000 rows, recpipe 1x1 and mlflow 1x1, 2 clients for 3 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
from _common import environment, parse_args, quick_out, warn_if_loaded
from serving import QUICK_TABLE_CAP, feature_rows, registered, serve, train_and_register

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "serving_load.json"
# Columns the raw-value contract lets a client send as null (missing values, scored with their defaults).
NULLABLE = ("brand", "price", "click_50_seq")
ROWS_PER_REQUEST = (1, 4)


class Request(NamedTuple):
    """One prepared request: its kind, body, whether it is good, and how many predictions a good one gets."""

    kind: str
    body: bytes
    good: bool
    rows: int


def _records(rows: list[dict]) -> bytes:
    return json.dumps({"dataframe_records": rows}).encode()


def _split(rows: list[dict]) -> bytes:
    cols = list(rows[0])
    return json.dumps(
        {"dataframe_split": {"columns": cols, "data": [[r[c] for c in cols] for r in rows]}}
    ).encode()


def build_requests(records: list[dict], seed: int = 0) -> tuple[list[Request], list[Request]]:
    """Good and bad request bodies from JSON feature rows (encoded once, so the clients measure the server).

    Args:
        records (list[dict]): feature rows as a JSON client has them.
        seed (int): which rows go into which request.

    Returns:
        The good requests (records / split × 1 / 4 rows, and rows with nulls) and the bad ones (no known
        column, malformed JSON).
    """
    rng = random.Random(seed)
    good: list[Request] = []
    bad: list[Request] = []
    for _ in range(64):
        for n in ROWS_PER_REQUEST:
            start = rng.randrange(len(records) - n)
            rows = records[start : start + n]
            good.append(Request(f"records_{n}", _records(rows), True, n))
            good.append(Request(f"split_{n}", _split(rows), True, n))
            nulls = [r | dict.fromkeys(NULLABLE) for r in rows]
            good.append(Request(f"nulls_{n}", _records(nulls), True, n))
            renamed = [{f"{k}_v2": v for k, v in r.items()} for r in rows]
            bad.append(Request("unknown_columns", _records(renamed), False, n))
            body = _records(rows)
            bad.append(Request("malformed_json", body[: rng.randrange(1, len(body) - 1)], False, n))
    return good, bad


class Outcome(NamedTuple):
    kind: str
    good: bool
    status: int  # 0: connection error
    seconds: float
    error: str  # "" when the answer is the right one


def _judge(req: Request, status: int, body: bytes) -> str:
    if status == 0:
        return "connection"
    if status >= 500:
        return "5xx"
    if not req.good:
        return "" if 400 <= status < 500 else f"bad_answered_{status}"
    if status != 200:
        return f"good_answered_{status}"
    if len(json.loads(body)["predictions"]) != req.rows:
        return "wrong_count"
    return ""


def _client(
    url: str, good: list[Request], bad: list[Request], bad_fraction: float, deadline: float, seed: int,
    out: list[Outcome],
) -> None:  # fmt: skip
    host, port = url.removeprefix("http://").split(":")
    rng = random.Random(seed)
    conn: http.client.HTTPConnection | None = None
    headers = {"Content-Type": "application/json"}
    while time.perf_counter() < deadline:
        req = rng.choice(bad) if rng.random() < bad_fraction else rng.choice(good)
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("POST", "/invocations", req.body, headers)
            resp = conn.getresponse()
            status, body = resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            status, body = 0, b""
            if conn is not None:
                conn.close()
            conn = None
        seconds = time.perf_counter() - t0
        out.append(Outcome(req.kind, req.good, status, seconds, _judge(req, status, body)))
    if conn is not None:
        conn.close()


def drive(
    url: str, good: list[Request], bad: list[Request], clients: int, seconds: float, bad_fraction: float
) -> dict:
    """``clients`` threads sending requests to ``url`` for ``seconds``: throughput, latency and errors."""
    for req in good[:20]:  # warm-up: first calls of every code path
        _client(url, [req], bad, 0.0, time.perf_counter() + 0.05, 0, [])
    outcomes: list[list[Outcome]] = [[] for _ in range(clients)]
    deadline = time.perf_counter() + seconds
    threads = [
        threading.Thread(target=_client, args=(url, good, bad, bad_fraction, deadline, 1000 + i, outcomes[i]))
        for i in range(clients)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = [o for per in outcomes for o in per]
    ok = np.asarray([o.seconds for o in done if o.good and not o.error]) * 1e3
    errors: dict[str, int] = {}
    for o in done:
        if o.error:
            errors[o.error] = errors.get(o.error, 0) + 1
    return {
        "rps": round(len(ok) / wall, 1),
        "p50_ms": round(float(np.percentile(ok, 50)), 2) if len(ok) else float("nan"),
        "p99_ms": round(float(np.percentile(ok, 99)), 2) if len(ok) else float("nan"),
        "errors": sum(errors.values()),
        "errors_by_kind": errors,
        "good_answered": len(ok),
        "bad_refused": sum(1 for o in done if not o.good and not o.error),
        "requests": len(done),
        "seconds": round(wall, 2),
    }


def _setting(text: str) -> tuple[str, int, int]:
    kind, sep, rest = text.rpartition(":")
    kind = kind if sep else "recpipe"
    workers, sep, threads = rest.partition("x")
    if kind not in ("recpipe", "mlflow") or not (
        sep and workers.isdigit() and threads.isdigit() and int(workers) > 0 and int(threads) > 0
    ):
        raise argparse.ArgumentTypeError(
            f"a server setting is [recpipe:|mlflow:]WORKERSxTHREADS (e.g. 2x1, mlflow:1x2), got {text!r}"
        )
    return kind, int(workers), int(threads)


def _name(setting: tuple[str, int, int]) -> str:
    kind, workers, threads = setting
    return f"{workers}x{threads}" if kind == "recpipe" else f"{kind}:{workers}x{threads}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000, help="generated rows for the pipeline run")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the clients send, per setting")
    ap.add_argument("--bad-fraction", type=float, default=0.1, help="share of bad requests")
    ap.add_argument(
        "--servers", type=_setting, nargs="+", metavar="[SERVER:]WxT",
        default=[("recpipe", 2, 1), ("mlflow", 2, 1), ("recpipe", 1, 2), ("mlflow", 1, 2)],
        help="server settings measured: recpipe's server (the default) or MLflow's, W workers x T torch threads "
        "each; the first is the last line's, compared with the first MLflow setting measured (first: 2x1, what "
        "manifests/base/serving/scoring.yaml deploys)",
    )  # fmt: skip
    ap.add_argument("--min-auc", type=float, default=0.0, help="the pipeline gate's AUC floor (not measured)")
    ap.add_argument(
        "--runs", type=Path, help="serve what `recpipe run` of the config left here (no training)"
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    quick = {
        "rows": 20_000,
        "clients": 2,
        "seconds": 3.0,
        "servers": [("recpipe", 1, 1), ("mlflow", 1, 1)],
        "out": quick_out(RESULTS.name),
    }
    a = parse_args(ap, quick)
    started, load_before = time.perf_counter(), os.getloadavg()

    results = {}
    with tempfile.TemporaryDirectory(prefix="recpipe-serving-load-") as tmp:
        work = Path(tmp)
        trained = (
            registered(a.runs)
            if a.runs
            else train_and_register(work, a.rows, a.min_auc, QUICK_TABLE_CAP if a.quick else None)
        )
        records = json.loads(json.dumps(feature_rows(trained.eval_dir).slice(0, 2000).to_pylist()))
        good, bad = build_requests(records)
        for kind, workers, threads in a.servers:
            extra = ["--threads", str(threads), "--server", kind]
            server, url = serve(trained.uri, trained.model, work, workers, extra)
            try:
                stats = drive(url, good, bad, a.clients, a.seconds, a.bad_fraction)
            finally:
                server.terminate()
                server.wait(timeout=30)
            stats["load_avg_after"] = os.getloadavg()[0]
            results[_name((kind, workers, threads))] = stats
            print(f"server={kind} workers={workers} threads={threads}: {json.dumps(stats)}", flush=True)

    report = {
        "clients": a.clients,
        "seconds": a.seconds,
        "bad_fraction": a.bad_fraction,
        "rows": a.rows,
        "settings": results,
        "environment": environment(started, load_before),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    warn_if_loaded(load_before, os.getloadavg())
    first = results[_name(a.servers[0])]
    line = " ".join(f"{k}={first[k]}" for k in ("rps", "p50_ms", "p99_ms", "errors"))
    mlflow = next((results[_name(s)] for s in a.servers if s[0] == "mlflow"), None)
    if mlflow and a.servers[0][0] != "mlflow" and mlflow["rps"]:
        line += f" rps_vs_mlflow={first['rps'] / mlflow['rps']:.2f} mlflow_p99_ms={mlflow['p99_ms']}"
    print("serving_load: " + line)


if __name__ == "__main__":
    main()
