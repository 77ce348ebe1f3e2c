"""``recpipe predict`` (batch scoring of any source with an export) and ``recpipe serve`` (a registered version
served with recpipe's store: recpipe's scoring server by default, MLflow's own with ``--server mlflow``; the same
protocol and scores)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from recpipe.cli.stages_cli import _tracking_arg, _tracking_uri


def cmd_predict(a: argparse.Namespace) -> int:
    from recpipe.stages import predict

    r = predict.run(
        a.model, a.data, a.out, keep=a.keep, on_bad_row=a.on_bad_row, output=a.output,
        batch_rows=a.batch_rows, progress=sys.stderr.isatty() or a.progress, request_key=a.request_key,
        context_columns=_column_list(a.context_columns), k=a.k,
    )  # fmt: skip
    print(
        f"wrote {r.out}: rows_read={r.rows_read} rows_scored={r.rows_scored} rows_skipped={r.rows_skipped}"
        f" ({r.rows_per_second:,.0f} rows/s, model {r.model})"
    )
    if r.skipped_by_column:
        print(f"skipped by column: {dict(sorted(r.skipped_by_column.items()))}")
    return 0


def _column_list(text: str | None) -> list[str] | None:
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]


def serve_command(model: str, host: str, port: int, workers: int) -> list[str]:
    """``mlflow models serve`` for ``model`` in this environment (``--env-manager local``: the packages
    the model was logged with are this environment's pins)."""
    mlflow = Path(sys.executable).with_name("mlflow")
    return [str(mlflow), "models", "serve", "-m", model, "--env-manager", "local",
            "--host", host, "-p", str(port), "--workers", str(workers)]  # fmt: skip


# glibc's malloc settings for the server (an exported value wins): a request's large buffers (a 1 x 500
# request's attention inputs, ~9 MB each) stay in the heap once freed, instead of being unmapped after every
# request and faulted in page by page on the next one (~5,000 page faults and a third of a 1 x 500 request's
# CPU time in the server; benchmarks/RESULTS.md, "Serving one user x 500 candidates"). The heap keeps its peak.
SERVER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}


def serve_environment(
    uri: str, workers: int, threads: int | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment ``mlflow models serve`` runs in: recpipe's store, this environment's scripts first on
    ``PATH`` (MLflow starts uvicorn by name), each worker's torch threads (``OMP_NUM_THREADS``) and glibc's
    malloc keeping freed buffers (:data:`SERVER_MALLOC`, unless exported), uvicorn's worker health-check
    timeout (:data:`~recpipe.export.server.WORKER_HEALTHCHECK_S`, unless exported), the loaded model frozen
    out of the garbage collector's scans (:data:`~recpipe.export.server.GC_FREEZE_ENV`, unless exported) and no
    bytecode written (``PYTHONDONTWRITEBYTECODE``: MLflow imports the model's code inside a local store).

    Args:
        uri (str): the tracking URI.
        workers (int): server worker processes.
        threads (int | None): torch threads per worker; None: the exported ``OMP_NUM_THREADS``, else the
            cores split among the workers (:func:`~recpipe.launch.local.rank_threads`).
        environ (Mapping[str, str]): the launching process's environment.
    """
    from recpipe.launch.local import rank_threads

    if workers < 1 or (threads is not None and threads < 1):
        raise ValueError(f"--workers and --threads must be positive, got {workers} and {threads}")
    from recpipe.export.server import GC_FREEZE_ENV, WORKER_HEALTHCHECK_S

    return {
        **SERVER_MALLOC,
        # Each worker's loaded model kept out of the garbage collector's full scans, as recpipe's own server does.
        GC_FREEZE_ENV: "1",
        # MLflow runs uvicorn's command line, which reads its options from UVICORN_* variables: the same
        # health-check patience as recpipe's server (uvicorn's 5 s kills a worker still importing torch on a
        # busy machine, and the one started in its place the same way).
        "UVICORN_TIMEOUT_WORKER_HEALTHCHECK": str(WORKER_HEALTHCHECK_S),
        **environ,
        # MLflow's server imports the model's code (served_model.py) where a local store keeps the registered
        # version: a __pycache__/ written there is a file its manifest does not name, and every later verified
        # load of that version refuses it. Python's default writes one; nothing is written into a store.
        "PYTHONDONTWRITEBYTECODE": "1",
        "MLFLOW_TRACKING_URI": uri,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}",
        # torch reads it at import in each uvicorn worker; several workers with every core each fight
        # over the cores (benchmarks/serving_load.py).
        "OMP_NUM_THREADS": str(rank_threads(threads, environ, workers)),
    }


def recpipe_server_command(
    folder: Path,
    host: str,
    port: int,
    workers: int,
    timeout_s: float,
    remove_after: Path,
    ranker: Path | None = None,
) -> list[str]:
    """recpipe's own scoring server (:mod:`recpipe.export.server`) for a downloaded, verified export folder (and
    the ranking one behind a retrieval one), in a fresh interpreter (this environment's ``OMP_NUM_THREADS`` and
    malloc settings hold from its start)."""
    return [sys.executable, "-m", "recpipe.export.server", str(folder), "--host", host, "--port", str(port),
            "--workers", str(workers), "--timeout", str(timeout_s), "--remove-after", str(remove_after),
            *(["--ranker", str(ranker)] if ranker is not None else [])]  # fmt: skip


def _download_served(uri: str, model: str, ranker: str | None, work: Path) -> tuple[Path, Path | None]:
    """The served export folder(s) downloaded verified into ``work``; a ranker only with the retriever it was
    promoted with (:func:`~recpipe.tracking.check_served_pair`)."""
    from recpipe.export.layout import is_retrieval_export
    from recpipe.tracking import check_served_pair, download_served_export

    if ranker is None:
        return download_served_export(uri, model, work), None
    # the versions checked are the versions downloaded: an alias moved in between cannot split the pair
    retriever_version, ranker_version = check_served_pair(uri, model, ranker)
    (work / "retriever").mkdir()
    (work / "ranker").mkdir()
    retriever_uri = f"models:/{retriever_version['name']}/{retriever_version['version']}"
    folder = download_served_export(uri, retriever_uri, work / "retriever")
    if not is_retrieval_export(folder):
        raise SystemExit(f"recpipe serve: --ranker ranks a retrieval model's candidates; {model} is not one")
    ranker_uri = f"models:/{ranker_version['name']}/{ranker_version['version']}"
    ranking = download_served_export(uri, ranker_uri, work / "ranker")
    if is_retrieval_export(ranking):
        raise SystemExit(f"recpipe serve: --ranker {ranker} is a retrieval model, not a ranking one")
    return folder, ranking


def cmd_serve(a: argparse.Namespace) -> int:
    uri = _tracking_uri(a, must_exist=True)
    env = serve_environment(uri, a.workers, a.threads, os.environ)
    if a.ranker is not None and a.server == "mlflow":
        raise SystemExit(
            "recpipe serve: --ranker (retrieve then rank) is served by recpipe's server, not mlflow's"
        )
    if a.server == "mlflow":
        cmd = serve_command(a.model, a.host, a.port, a.workers)
    else:
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="recpipe-serve-"))
        try:
            folder, ranker = _download_served(uri, a.model, a.ranker, work)
        except BaseException:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
            raise
        cmd = recpipe_server_command(folder, a.host, a.port, a.workers, a.timeout, work, ranker)
    what = a.model if a.ranker is None else f"{a.model} ranked by {a.ranker}"
    print(
        f"serving {what} from {uri} on http://{a.host}:{a.port}/invocations ({a.server}'s server, "
        f"{a.workers} workers, OMP_NUM_THREADS={env['OMP_NUM_THREADS']} each)",
        file=sys.stderr,
        flush=True,
    )
    os.execve(cmd[0], cmd, env)  # the server replaces this process: signals reach it directly
    return 0  # not reached


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="score a file, folder or table with an exported model, streamed, into Parquet",
        description=(
            "Rows are read in batches (bounded memory), put through the export's fg.json exactly as at "
            "training, and scored; the output keeps the input's order: row, the --keep columns, then "
            "probability (or logit)."
        ),
        epilog="example: recpipe predict --model runs/x/export --data runs/x/data/eval --out scores.parquet "
        "--keep user_id --keep adgroup_id",
    )
    p.add_argument("--model", required=True, help="export folder (or one backend's folder, e.g. export/rtp)")
    p.add_argument("--data", required=True, help="Parquet/CSV file, folder or URI, or odps://… table")
    p.add_argument("--out", required=True, help="output Parquet file")
    p.add_argument(
        "--keep", action="append", default=[], metavar="COLUMN", help="input column copied to the output"
    )
    p.add_argument(
        "--on-bad-row",
        choices=["error", "skip"],
        default="error",
        help="stop at a bad row, or skip and count it",
    )
    p.add_argument("--output", choices=["probability", "logit"], default="probability", help="what to write")
    p.add_argument("--batch-rows", type=int, default=65_536, help="rows read and scored at a time")
    p.add_argument("--progress", action="store_true", help="show a progress bar even when not on a terminal")
    p.add_argument(
        "--k",
        type=int,
        help="a retrieval export (two towers): items per row, written as item_ids and scores, best first "
        "(default 50)",
    )
    p.add_argument(
        "--request-key",
        metavar="COLUMN",
        help="with --context-columns: consecutive rows with the same value are one request (a log sorted by "
        "request; a value that comes back later is another request)",
    )
    p.add_argument(
        "--context-columns",
        metavar="A,B,...",
        help="with --request-key: the columns every row of a request shares (the user's features and history), "
        "FG'd once per request; a row holding another value is an error; the same output as without",
    )
    p.set_defaults(func=cmd_predict)

    v = sub.add_parser(
        "serve",
        help="serve a registered version with MLflow's scoring server (POST /invocations)",
        description=(
            "Runs `mlflow models serve -m MODEL --env-manager local` on this machine with the store recpipe's "
            "other commands use. Requests: JSON {'dataframe_records': [...]} or {'dataframe_split': {...}} of raw "
            "feature rows (nulls and absent columns are missing values); answers click probabilities, or "
            "logits with 'params': {'output': 'logit'}; a bad row is HTTP 400 naming its row and column."
        ),
        epilog="example: recpipe serve --model models:/taobao-multi_tower_din-small@champion --runs runs --port 5001",
    )
    v.add_argument("--model", required=True, help="models:/NAME@alias or models:/NAME/VERSION")
    v.add_argument(
        "--ranker",
        metavar="MODEL",
        help="retrieve then rank: MODEL (models:/NAME@alias) is a ranking version promoted as a pair with the "
        "retrieval --model; a request's user rows get the ranker's best params.n of the retriever's params.k "
        "candidates (default 50 of 500)",
    )
    v.add_argument(
        "--server",
        choices=["recpipe", "mlflow"],
        default="recpipe",
        help="recpipe's scoring server (default: MLflow's protocol without FastAPI and pandas, the same scores) "
        "or MLflow's own (`mlflow models serve`)",
    )
    v.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="recpipe's server: seconds before a request is answered 504",
    )
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    v.add_argument("--port", type=int, default=5001, help="port to listen on")
    v.add_argument("--workers", type=int, default=1, help="server worker processes")
    v.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per worker (default: the exported OMP_NUM_THREADS, else the cores split among the workers)",
    )
    _tracking_arg(v)
    v.set_defaults(func=cmd_serve)
