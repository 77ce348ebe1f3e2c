"""Serving: HTTP latency through ``recpipe serve`` and batch-scoring throughput of ``recpipe predict``.

Setup: the embedded pipeline (``recpipe run``, ``configs/din_taobao_small.yaml``, generated Taobao rows)
trains, exports, registers and promotes a MultiTowerDIN into a fresh sqlite store; then

- ``recpipe serve --model models:/<model>@champion`` (recpipe's scoring server, MLflow's scoring protocol; the
  registered version downloaded and verified) runs on 127.0.0.1 (a real process, one worker) and a bounded
  request loop sends one-row requests (``dataframe_records``, the way clients build them), 256-row requests, and
  one user x 500 candidates both ways (``dataframe_split`` of the items with the user's columns once in
  ``params.context``, against the same 500 full rows; the scores checked equal), then stops;
- the registered pyfunc scores one-row DataFrames in this process (what the server adds is the rest);
- ``recpipe predict`` streams the eval rows (repeated to ``--predict-rows``, 4 files) through the export (rtp,
  FG inside) into Parquet, against the eager model's rows/s on the same rows (FG + the checkpoint's model, the
  same batch size); both once the model is loaded.

Last line: ``serving: p50_ms_1row=… p99_ms_1row=… rows_per_s_batch256=… predict_rows_per_s=…
predict_vs_eager=… p50_ms_1x500=… p99_ms_1x500=… tile_vs_rows_1x500=…`` (the 500 rows' median latency over the
context form's); JSON in ``benchmarks/results/serving.json``, with ``server_cpu_ms_1x500`` /
``server_cpu_ms_500rows``: the server processes' CPU time per request of each form (from ``/proc``), which a
loaded machine does not inflate as it does latency.

Run: ``.venv/bin/python benchmarks/serving.py`` (about 5 minutes on 2 cores, most of it the pipeline run).
``--quick``: the same pipeline, server and batch scoring at 20,000 generated rows (the gate's floor at 0: a
model trained on so few rows may not reach 0.5 AUC, and the gate is not what is measured), 20 one-row and
5 256-row requests, 10 one user x 500 requests each way, 20,000 rows through ``recpipe predict`` and the eager model in batches of 1,024.
``--runs DIR`` serves what a ``recpipe run`` of the config left in DIR instead of training (the quick test
trains once for this script and ``serving_load.py``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import host_cpu, parse_args, quick_out

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "serving.json"
CONFIG = ROOT / "configs" / "din_taobao_small.yaml"
# Quick runs cap the served model's tables (3.14M rows, ~400 MB, in full): training, exporting and loading them
# took most of a quick run's time (tests/benchmarks/test_benchmarks_quick.py's served model too).
QUICK_TABLE_CAP = 20_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, records: list[dict] | dict) -> float:
    """Seconds for one request of ``records`` (or a whole request body), encoded as a client does."""
    return _invoke(url, records if isinstance(records, dict) else {"dataframe_records": records})[0]


# One keep-alive connection per server, as a ranking service's client keeps one (a requests.Session, a pooled
# HTTP client): a request does not pay a TCP connect and the server's accept.
_CONNECTIONS: dict[str, http.client.HTTPConnection] = {}


def _invoke(url: str, request: dict) -> tuple[float, list]:
    body = json.dumps(request).encode()  # encoding is the client's: not timed
    headers = {"Content-Type": "application/json"}
    t0 = time.perf_counter()
    for attempt in (1, 2):  # a connection the server closed (a restart, an idle timeout) is opened again once
        conn = _CONNECTIONS.get(url)
        if conn is None:
            host, port = url.removeprefix("http://").split(":")
            conn = _CONNECTIONS[url] = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request("POST", "/invocations", body, headers)
            resp = conn.getresponse()
            answer = resp.read()
            break
        except (OSError, http.client.HTTPException):
            _CONNECTIONS.pop(url).close()
            if attempt == 2:
                raise
            t0 = time.perf_counter()
    if resp.status != 200:
        raise RuntimeError(f"{url}/invocations answered {resp.status}: {answer[:500]!r}")
    return time.perf_counter() - t0, json.loads(answer)["predictions"]


# The DIN's user side: sent once as ``params.context`` in the one user × N candidates request.
USER_COLUMNS = ("user_id", "cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level",
                "shopping_level", "occupation", "new_user_class_level", "click_50_seq")  # fmt: skip


def one_user_requests(records: list[dict], n: int) -> tuple[dict, dict]:
    """One user (the first record with the longest history) × ``n`` candidates (the items of ``n`` records) as
    ``(the context request, the same rows sent as full rows)``, both ``dataframe_split``."""
    user = max(records[:200], key=lambda r: len(r.get("click_50_seq") or ""))
    context = {c: user[c] for c in USER_COLUMNS if c in user}
    items = [c for c in records[0] if c not in context]
    rows = [records[i % len(records)] for i in range(n)]
    tile = {"dataframe_split": {"columns": items, "data": [[r[c] for c in items] for r in rows]},
            "params": {"context": json.dumps(context)}}  # fmt: skip
    cols = items + list(context)
    full = {
        "dataframe_split": {
            "columns": cols,
            "data": [[r[c] for c in items] + list(context.values()) for r in rows],
        }
    }
    return tile, full


def serve(
    uri: str, model: str, work: Path, workers: int = 1, extra: Sequence[str] = ()
) -> tuple[subprocess.Popen, str]:
    """``recpipe serve`` of ``models:/<model>@champion`` on a free loopback port (``workers`` processes, more
    ``recpipe serve`` options in ``extra``; log: ``work/server.log``): the process and its base URL once
    ``/ping`` answers."""
    port = _free_port()
    recpipe = Path(sys.executable).with_name("recpipe")  # its server; `--server mlflow` in extra: MLflow's
    log = open(work / "server.log", "w")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen(
        [str(recpipe), "serve", "--model", f"models:/{model}@champion", "--tracking-uri", uri,
         "--port", str(port), "--workers", str(workers), *extra],
        stdout=log, stderr=subprocess.STDOUT, cwd=work, env=_absolute_pythonpath(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while True:
        try:
            urllib.request.urlopen(f"{url}/ping", timeout=2)
            return server, url
        except OSError:
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the scoring server did not start; see {work / 'server.log'}") from None
            time.sleep(0.5)


def tree_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` and its descendants (the server and the uvicorn worker it
    starts), from ``/proc``; None where there is no ``/proc``. Unlike latency, it does not count the time a
    loaded machine keeps the server off the cores."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended meanwhile
            continue
        stats[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    if pid not in stats:
        return None
    tree, grew = {pid}, True
    while grew:
        more = {p for p, (parent, _) in stats.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[p][1] for p in tree)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _absolute_pythonpath() -> dict[str, str]:
    """This environment with ``PYTHONPATH`` made absolute: the server runs in ``work``, where ``PYTHONPATH=.`` would
    serve another checkout's recpipe (the installed one) than the one benchmarked."""
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep)
        )
    return env


class Trained(NamedTuple):
    """What :func:`train_and_register` leaves in ``work/runs``: the store, the registered model's name, and
    the pipeline's eval rows, export and checkpoint folders."""

    uri: str
    model: str
    eval_dir: Path
    export_dir: Path
    checkpoint: Path


def train_and_register(work: Path, rows: int, min_auc: float, table_cap: int | None = None) -> Trained:
    """``recpipe run`` of :data:`CONFIG` on ``rows`` generated rows (rtp export, gate floor ``min_auc``) into
    ``work/runs``: trained, exported, registered and promoted to champion (every table capped at ``table_cap``
    rows when given: quick runs)."""
    from recpipe.config.caps import capped_config

    runs = work / "runs"
    config = capped_config(CONFIG, table_cap, work)
    subprocess.run(
        [str(Path(sys.executable).with_name("recpipe")), "run", "--runs", str(runs), "--config", str(config),
         "--rows", str(rows), "--backends", "rtp", "--min-auc", str(min_auc)],
        check=True, cwd=ROOT,
    )  # fmt: skip
    return registered(runs)


def registered(runs: Path) -> Trained:
    """What one ``recpipe run`` of :data:`CONFIG` left in ``runs`` (its store and folders)."""
    from recpipe.config import load_config

    (kfp,) = [p for p in runs.glob("*/kfp") if p.is_dir()]
    (eval_dir,) = [p for p in kfp.glob("*/ingest/eval_data") if p.is_dir()]
    (export_dir,) = [p for p in kfp.glob("*/export/exported") if p.is_dir()]
    (checkpoint,) = [p for p in kfp.glob("*/train/checkpoint") if p.is_dir()]
    uri = f"sqlite:///{runs / 'mlflow.db'}"
    return Trained(uri, load_config(CONFIG).registered_model_name, eval_dir, export_dir, checkpoint)


def shared_program(export_dir: Path) -> dict:
    """The shared-history program a scorer of the export's current ``rtp`` folder takes: ``precision``
    (``float32`` or ``bfloat16``, :func:`recpipe.export.shared.bf16_usable`) and its export parity
    (``max_abs_logit_diff``, ``tolerance``)."""
    from recpipe.export.layout import backend_folder
    from recpipe.export.manifest import read_manifest
    from recpipe.export.shared import bf16_usable

    manifest = read_manifest(backend_folder(export_dir / "rtp"))
    bf16 = bf16_usable(manifest)
    check = manifest.extra["shared_history_bf16_parity" if bf16 else "shared_history_parity"]
    return {"precision": "bfloat16" if bf16 else "float32", **check}


def feature_rows(eval_dir: Path) -> pa.Table:
    """The eval rows without the label, the oracle probability and the timestamp: what a client sends."""
    rows = pq.read_table(eval_dir)
    return rows.drop_columns([c for c in ("clk", "true_prob", "time_stamp") if c in rows.column_names])


def _eager_rows_per_s(checkpoint: Path, data: Path, batch_rows: int) -> float:
    """FG + the checkpoint's eager model over ``data`` in batches of ``batch_rows``."""
    import torch

    from recpipe.batch import to_batch
    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source
    from recpipe.features.fg import FeatureGenerator
    from recpipe.train.checkpoint import load_model_for_inference, resolve_checkpoint

    model, spec, _ = load_model_for_inference(resolve_checkpoint(checkpoint))
    model.eval()
    fg = FeatureGenerator(spec, with_labels=False)
    rows = 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for sb in open_source(str(data)).iter_batches(Shard(0, 1), batch_rows=batch_rows):
            b = to_batch(fg(sb.batch), spec.sparse_keys())
            model(b.dense, b.sparse)
            rows += sb.num_rows
    return rows / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000, help="generated rows for the pipeline run")
    ap.add_argument("--one-row-requests", type=int, default=300)
    ap.add_argument("--batch-requests", type=int, default=40)
    ap.add_argument(
        "--tile-requests", type=int, default=100, help="one user x 500 candidates requests (each form)"
    )
    ap.add_argument("--batch-rows", type=int, default=8192, help="rows per batch for predict and eager")
    ap.add_argument("--predict-rows", type=int, default=400_000, help="rows scored by predict and eager")
    ap.add_argument("--min-auc", type=float, default=0.5, help="the pipeline gate's AUC floor")
    ap.add_argument(
        "--runs", type=Path, help="serve what `recpipe run` of the config left here (no training)"
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--table-cap", type=int, default=None, help="cap the trained model's tables (default: the config's)"
    )
    quick = {
        "rows": 20_000,
        "table_cap": QUICK_TABLE_CAP,
        "one_row_requests": 20,
        "batch_requests": 5,
        "batch_rows": 1024,
        "tile_requests": 10,
    }
    a = parse_args(ap, {**quick, "predict_rows": 20_000, "min_auc": 0.0, "out": quick_out(RESULTS.name)})
    load_before = os.getloadavg()

    from recpipe.stages import predict

    with tempfile.TemporaryDirectory(prefix="recpipe-serving-") as tmp:
        work = Path(tmp)
        trained = registered(a.runs) if a.runs else train_and_register(work, a.rows, a.min_auc, a.table_cap)
        uri, model, eval_dir, export_dir, checkpoint = trained
        shared = shared_program(export_dir)
        rows = pq.read_table(eval_dir)
        features = feature_rows(eval_dir)
        records = json.loads(json.dumps(features.slice(0, 2000).to_pylist()))
        # Batch scoring in its steady state: the eval rows repeated to --predict-rows, in 4 files.
        big = work / "predict-source"
        big.mkdir()
        tiled = pa.concat_tables([rows] * max(1, -(-a.predict_rows // rows.num_rows))).slice(
            0, a.predict_rows
        )
        step = -(-tiled.num_rows // 4)
        for i in range(4):
            pq.write_table(tiled.slice(i * step, step), big / f"part-{i}.parquet")

        # In this process, the registered pyfunc on one-row DataFrames: what the server adds is the rest.
        from recpipe import tracking

        pyfunc = tracking.load_pyfunc_model(uri, f"models:/{model}@champion")
        frames = [features.slice(i, 1).to_pandas() for i in range(50)]
        for f in frames[:10]:
            pyfunc.predict(f)
        inproc = []
        for i in range(a.one_row_requests):
            t0 = time.perf_counter()
            pyfunc.predict(frames[i % len(frames)])
            inproc.append(time.perf_counter() - t0)

        # One user x 500 candidates in this process too: what FG'ing the context once saves of the whole call.
        import pandas as pd

        tile, full = one_user_requests(records, 500)
        frames_1x500 = [pd.DataFrame(r["dataframe_split"]["data"], columns=r["dataframe_split"]["columns"])
                        for r in (tile, full)]  # fmt: skip
        inproc_1x500: dict[str, list[float]] = {"tile": [], "rows": []}
        for _ in range(a.tile_requests):
            for name, frame, params in (
                ("tile", frames_1x500[0], tile["params"]),
                ("rows", frames_1x500[1], None),
            ):
                t0 = time.perf_counter()
                pyfunc.predict(frame, params=params)
                inproc_1x500[name].append(time.perf_counter() - t0)

        server, url = serve(uri, model, work)
        try:
            for r in records[:20]:  # warm-up
                _post(url, [r])
            one = [_post(url, [records[i % len(records)]]) for i in range(a.one_row_requests)]
            starts = max(1, len(records) - 256)  # 1744 for the full run's 2000 records
            batch = [
                _post(url, records[(i * 256) % starts : (i * 256) % starts + 256])
                for i in range(a.batch_requests)
            ]
            # One user x 500 candidates: the context form against the same 500 rows as full rows.
            _, p_tile = _invoke(url, tile)  # warm-up too
            _, p_full = _invoke(url, full)
            # Within the export's logit tolerance (the shared program's parity at export, float32 or bf16), through
            # the sigmoid, whose slope is at most 1/4 (the recalibration is a shift of the logits).
            atol = max(1e-6, shared["tolerance"] / 4)
            if not np.allclose(p_tile, p_full, rtol=0, atol=atol):
                raise AssertionError(
                    f"the context form scores differ from the full rows' by "
                    f"{np.abs(np.subtract(p_tile, p_full)).max():.3g} (allowed {atol:g})"
                )
            tiles, fulls = [], []
            cpu = {"tile": 0.0, "rows": 0.0}  # the server's CPU seconds per form, summed over the requests
            for _ in range(a.tile_requests):  # interleaved: both see the same machine load
                for name, request, times in (("tile", tile, tiles), ("rows", full, fulls)):
                    c0 = tree_cpu_seconds(server.pid)
                    times.append(_post(url, request))
                    c1 = tree_cpu_seconds(server.pid)
                    cpu[name] += (c1 - c0) if c0 is not None and c1 is not None else float("nan")
        finally:
            server.terminate()
            server.wait(timeout=30)

        out = work / "scores.parquet"
        result = predict.run(str(export_dir), str(big), str(out), batch_rows=a.batch_rows)
        eager = _eager_rows_per_s(checkpoint, big, a.batch_rows)

    one_ms = np.asarray(one) * 1e3
    stats = {
        "p50_ms_1row": round(float(np.percentile(one_ms, 50)), 2),
        "p99_ms_1row": round(float(np.percentile(one_ms, 99)), 2),
        "mean_ms_1row": round(float(statistics.mean(one_ms)), 2),
        "inprocess_p50_ms_1row": round(float(np.percentile(np.asarray(inproc) * 1e3, 50)), 2),
        "predict_load_seconds": result.load_seconds,
        "rows_per_s_batch256": round(256 / statistics.median(batch), 1),
        "predict_rows_per_s": round(result.rows_per_second, 1),
        "eager_rows_per_s": round(eager, 1),
        "predict_vs_eager": round(result.rows_per_second / eager, 3),
        "p50_ms_1x500": round(float(np.percentile(np.asarray(tiles) * 1e3, 50)), 2),
        "p99_ms_1x500": round(float(np.percentile(np.asarray(tiles) * 1e3, 99)), 2),
        "p50_ms_500rows": round(float(np.percentile(np.asarray(fulls) * 1e3, 50)), 2),
        "tile_vs_rows_1x500": round(statistics.median(fulls) / statistics.median(tiles), 2),
        # CPU ms the server spent per request (mean; /proc's clock ticks summed over the requests)
        "server_cpu_ms_1x500": round(cpu["tile"] * 1e3 / a.tile_requests, 2),
        "server_cpu_ms_500rows": round(cpu["rows"] * 1e3 / a.tile_requests, 2),
        # the shared-history program the server took (float32, or bfloat16 where its export parity passed on a CPU
        # with bf16 units; RECPIPE_SHARED_HISTORY_BF16=0 forces float32) and its parity at export
        "shared_precision_1x500": shared["precision"],
        "shared_max_abs_logit_diff": shared["max_abs_logit_diff"],
        "history_items_1x500": len(json.loads(tile["params"]["context"]).get("click_50_seq", "").split("|")),
        "inprocess_p50_ms_1x500": round(statistics.median(inproc_1x500["tile"]) * 1e3, 2),
        "inprocess_p50_ms_500rows": round(statistics.median(inproc_1x500["rows"]) * 1e3, 2),
        "tile_requests": a.tile_requests,
        "predict_rows": result.rows_read,
        "one_row_requests": a.one_row_requests,
        "batch_requests": a.batch_requests,
        "environment": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "cpu": host_cpu(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "pyarrow": pa.__version__,
        },
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats))
    keys = ("p50_ms_1row", "p99_ms_1row", "rows_per_s_batch256", "predict_rows_per_s", "predict_vs_eager",
            "p50_ms_1x500", "p99_ms_1x500", "tile_vs_rows_1x500")  # fmt: skip
    print("serving: " + " ".join(f"{k}={stats[k]}" for k in keys))


if __name__ == "__main__":
    main()
