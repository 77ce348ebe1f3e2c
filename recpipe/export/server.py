"""recpipe's scoring server: MLflow's scoring protocol served straight from a verified export folder.

The protocol is MLflow's (``mlflow models serve``), so a client of one is a client of the other:

- ``POST /invocations`` with ``Content-Type: application/json``: ``{"dataframe_records": [{…}, …]}`` or
  ``{"dataframe_split": {"columns": [...], "data": [[...], ...]}}`` (or TF Serving's ``instances`` / ``inputs``,
  as MLflow reads them), optionally ``"params": {"output":
  "logit"}`` and ``"params": {"context": "<JSON object text>"}`` (one user × N candidates: the columns every
  row shares, sent once); ``text/csv`` and ``application/vnd.apache.parquet`` bodies are rows too. Answer
  ``{"predictions": [p, …]}`` (a multi-task model: one object per row, ``{"probability_clk": …, …}``).
- A body may be sent ``Content-Encoding: gzip`` (500 generated Taobao rows as records: 226 kB, 30 kB gzipped).
- A bad request is HTTP 400 ``{"error_code": "BAD_REQUEST", "message": …}`` naming its row and column (or the
  field of the body that is wrong); a body of another type or encoding 415, one over :data:`MAX_BODY_BYTES` 413
  (as sent or once decompressed), a request
  slower than the timeout 504, a failure of the server itself 500 (logged with its traceback).
- A retrieval export (two towers, :class:`~recpipe.export.retriever.Retriever`): the same bodies hold user rows and
  ``"params": {"k": K}`` (default 50, at most the catalogue); the answer is one object per row, best item first,
  ``{"predictions": [{"item_ids": [...], "scores": [...]}, …]}``; a row without any of the user tower's columns,
  a bad value, an unknown parameter or a ``k`` out of range is a 400.
- A retrieval export served with a ranking one (``--ranker``; :class:`~recpipe.export.pair.PairInvoker`): the same
  user rows, ``"params": {"k": K, "n": N}`` (K candidates retrieved, default 500; N answered, default 50); each
  row's answer is the N of highest ranker probability, ``{"item_ids": [...], "scores": [...],
  "retrieval_scores": [...]}``.
- ``GET /ping`` and ``GET /health``: 200 once the model is loaded; ``GET /version``: recpipe's version.

What it leaves out of MLflow's path (``benchmarks/serving_load.py``; benchmarks/RESULTS.md, "recpipe's scoring
server"): FastAPI and its middlewares, the JSON → pandas → Arrow round trip (the body's records become Arrow
columns directly, :func:`~recpipe.features.raw.records_to_arrow`) and MLflow's checks of a schema recpipe's
model does not declare. The scoring is the registered pyfunc's: the same loaded backend, the same adaptive
batching of concurrent requests (:class:`~recpipe.export.batching.MicroBatcher`), the same outputs.

Run it with ``recpipe serve`` (which resolves a registered version, verifies it and hands its export folder to
:func:`run`); :func:`app` builds the ASGI application for any ASGI server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import traceback
import zlib
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from recpipe.data.types import DataError
from recpipe.export.batching import MicroBatcher
from recpipe.export.compute import run_scoring
from recpipe.export.requests import (  # noqa: F401  (the protocol's names, also read from here)
    CSV,
    JSON,
    PARAMS,
    PARQUET,
    RETRIEVAL_PARAMS,
    ROW_FORMATS,
    RequestError,
    bad_request,
    file_table,
    parse_json_body,
    read_json_body,
    read_params,
    records_table,
    split_table,
    whole_param,
)
from recpipe.export.scorer import Scorer

if TYPE_CHECKING:
    from recpipe.export.retriever import Retriever

log = logging.getLogger("recpipe.serve")

# The largest request body read (a 1 x 500 request with a 50-item history is ~100 KB as records).
MAX_BODY_BYTES = 64 << 20
# A request still unanswered after this many seconds is answered 504 (MLflow's default is 60 s too).
DEFAULT_TIMEOUT_S = 60.0
# Threads that wait on the batcher: each request in flight holds one while its batch is scored.
POOL_THREADS = 64
# Seconds a server worker has to answer the supervisor's ping before it is replaced (see run()).
WORKER_HEALTHCHECK_S = 30
# The environment that hands the export folder and the timeout to each server worker process.
ENV_FOLDER = "RECPIPE_SERVE_FOLDER"
ENV_TIMEOUT = "RECPIPE_SERVE_TIMEOUT"
ENV_RANKER = (
    "RECPIPE_SERVE_RANKER"  # a ranking export folder served behind a retrieval one (retrieve then rank)
)

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Invoker(Protocol):
    """What a kind of model does with a request body: :meth:`parse` on the event loop (cheap checks and the body
    read), :meth:`score` in a pool thread (FG and the model), :meth:`encode` of its result on the event loop (the
    answer's JSON); parse and score raise :class:`RequestError` for a bad request."""

    def parse(self, body: bytes, mime: str) -> Any: ...

    def score(self, parsed: Any) -> Any: ...

    def encode(self, scored: Any) -> bytes: ...


class RankingInvoker:
    """Scores a ranking model's rows: concurrent requests without a context share batches
    (:class:`~recpipe.export.batching.MicroBatcher`); the answer is ``{"predictions": [p, …]}``.

    Args:
        scorer (Scorer): the verified, loaded export.
    """

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.batcher = MicroBatcher(scorer)

    def parse(self, body: bytes, mime: str) -> tuple[pa.Table, str, str | None]:
        if mime == JSON:
            return parse_json_body(body)
        return file_table(body, mime), "probability", None

    def score(self, parsed: tuple[pa.Table, str, str | None]) -> tuple[np.ndarray, str]:
        rows, output, context = parsed
        try:
            logits = self.batcher.logits(rows, context)
        except DataError as err:
            raise bad_request(str(err)) from None
        return logits, output

    def encode(self, scored: tuple[np.ndarray, str]) -> bytes:
        logits, output = scored
        scores = self.scorer.to_output(logits, output)
        if scores.ndim == 1:
            predictions: Any = scores.tolist()
        else:  # a multi-task model: one object per row, as MLflow answers a DataFrame
            names = self.scorer.output_columns(output)
            predictions = [
                dict(zip(names, row, strict=True)) for row in scores.reshape(len(scores), -1).tolist()
            ]
        return json.dumps({"predictions": predictions}).encode()


class RetrievalInvoker:
    """Answers top-K requests with a loaded :class:`~recpipe.export.retriever.Retriever` (the server's
    :class:`~recpipe.export.server.Invoker` for two towers).

    Args:
        retriever (Retriever): the verified, loaded retrieval export.
    """

    def __init__(self, retriever: Retriever) -> None:
        from recpipe.export.retriever import DEFAULT_K

        self.retriever = retriever
        self.default_k = min(DEFAULT_K, retriever.items)

    def parse(self, body: bytes, mime: str) -> tuple[pa.Table, int]:
        if mime != JSON:
            return file_table(body, mime), self.default_k
        rows, params = read_json_body(body)
        return rows, self._k(params)

    def _k(self, params: Any) -> int:
        params = read_params(params, RETRIEVAL_PARAMS, "a retrieval model")
        return whole_param(params, "k", self.default_k, self.retriever.items, "the catalogue")

    def score(self, parsed: tuple[pa.Table, int]) -> tuple[pa.ListArray, np.ndarray]:
        rows, k = parsed
        try:
            return run_scoring(self.retriever.top_k, rows, k)
        except DataError as err:
            raise bad_request(str(err)) from None

    def encode(self, scored: tuple[pa.ListArray, np.ndarray]) -> bytes:
        ids, scores = scored
        predictions = [
            {"item_ids": items, "scores": row}
            for items, row in zip(ids.to_pylist(), scores.tolist(), strict=True)
        ]
        return json.dumps({"predictions": predictions}).encode()


class ScoringApp:
    """The ASGI application over one loaded model.

    Args:
        model (Scorer | Invoker): a verified, loaded ranking export
            (:func:`~recpipe.export.loaders.load_backend`), or what answers another kind's requests
            (:class:`RetrievalInvoker`).
        timeout_s (float): seconds after which a request is answered 504.
        version (str): what ``GET /version`` answers.
    """

    def __init__(
        self, model: Scorer | Invoker, timeout_s: float = DEFAULT_TIMEOUT_S, version: str = ""
    ) -> None:
        self.invoker: Invoker = RankingInvoker(model) if isinstance(model, Scorer) else model
        self.timeout_s = timeout_s
        self.version = version
        self._pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="recpipe-score")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in ("/ping", "/health", "/version"):
            if method not in ("GET", "HEAD"):
                return await _answer(send, 405, b"use GET\n", "text/plain")
            body = self.version.encode() if path == "/version" else b"\n"
            return await _answer(send, 200, body, JSON)
        if path != "/invocations":
            return await _answer(
                send, 404, b"not found: the server answers POST /invocations, GET /ping\n", "text/plain"
            )
        if method != "POST":
            return await _answer(send, 405, b"use POST /invocations\n", "text/plain")
        try:
            mime = _content_type(_header(scope, b"content-type"))
            body = _decoded(
                await _body(receive, _header(scope, b"content-length")), _header(scope, b"content-encoding")
            )
            payload = await asyncio.wait_for(self._invoke(body, mime), self.timeout_s)
        except RequestError as err:
            if err.status >= 500:
                log.error("%s", err.message)
            return await _error(send, err.status, err.message)
        except TimeoutError:
            return await _error(send, 504, f"request processing took more than {self.timeout_s:g} s")
        except Exception:  # noqa: BLE001 - the server's own failure: a 500 with its traceback in the log
            log.error("scoring failed:\n%s", traceback.format_exc())
            return await _error(send, 500, "internal error while scoring; see the server's log")
        await _answer(send, 200, payload, JSON)

    async def _invoke(self, body: bytes, mime: str) -> bytes:
        parsed = self.invoker.parse(body, mime)
        scored = await asyncio.get_running_loop().run_in_executor(self._pool, self.invoker.score, parsed)
        return self.invoker.encode(scored)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _content_type(value: str | None) -> str:
    """The body's MIME type (JSON, CSV or Parquet, UTF-8), as MLflow's server checks it."""
    if not value:
        raise RequestError(415, f"a Content-Type is required: {JSON}, {CSV} or {PARQUET}")
    mime, *parameters = (part.strip() for part in value.split(";"))
    for parameter in parameters:
        key, _, charset = parameter.partition("=")
        if key.strip().lower() != "charset":
            raise RequestError(415, f"unrecognized Content-Type parameter {key.strip()!r} in {value!r}")
        if charset.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise RequestError(415, f"the scoring server reads only UTF-8, got {value!r}")
    mime = mime.lower()
    if mime not in (JSON, CSV, PARQUET):
        raise RequestError(415, f"the body must be {JSON}, {CSV} or {PARQUET}, got {value!r}")
    return mime


async def _body(receive: Any, length: str | None) -> bytes:
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise RequestError(413, f"the body is {int(length)} bytes; the server reads at most {MAX_BODY_BYTES}")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestError(400, "the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestError(413, f"the body is over {MAX_BODY_BYTES} bytes, the most the server reads")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _decoded(body: bytes, encoding: str | None) -> bytes:
    """The body as sent (``identity``), or decompressed (``gzip``), at most :data:`MAX_BODY_BYTES` either way.

    Raises:
        RequestError: another encoding (415), gzip that does not decompress (400), or more than the most the
            server reads once decompressed (413).
    """
    coding = (encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in ("gzip", "x-gzip"):
        raise RequestError(415, f"Content-Encoding {encoding!r} is not read; send the body as it is, or gzip")
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as err:
        raise RequestError(400, f"bad request: the gzip body does not decompress ({err})") from None
    if len(out) > MAX_BODY_BYTES or inflate.unconsumed_tail:
        raise RequestError(
            413, f"the body is over {MAX_BODY_BYTES} bytes decompressed, the most the server reads"
        )
    if not inflate.eof:
        raise RequestError(400, "bad request: the gzip body is cut short")
    return out


async def _error(send: Send, status: int, message: str) -> None:
    code = {400: "BAD_REQUEST", 413: "BAD_REQUEST", 415: "BAD_REQUEST", 504: "TIMEOUT"}.get(
        status, "INTERNAL_ERROR"
    )
    await _answer(send, status, json.dumps({"error_code": code, "message": message}).encode(), JSON)


async def _answer(send: Send, status: int, body: bytes, mime: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", mime.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def app() -> ScoringApp:
    """The application of a server worker process: the export folder named by ``$RECPIPE_SERVE_FOLDER``,
    loaded and verified (every file's sha256) in this process, then kept out of the garbage collector's scans
    (:func:`freeze_loaded`)."""
    served = _load()
    freeze_loaded()
    return served


# Set (to 1) in the environment of ``recpipe serve``'s MLflow server workers: the registered pyfunc freezes what
# it loaded (:func:`freeze_loaded`) there, and only there (an exported 0 turns it off).
GC_FREEZE_ENV = "RECPIPE_GC_FREEZE"


def freeze_loaded() -> None:
    """Keep every object alive now out of the cyclic garbage collector's scans (:func:`gc.freeze`, after a
    collection): a server worker's loaded model, torch and the rest of its imports. A full collection walked the
    ~380,000 objects of a loaded DIN export in 166 ms (2026-12-05, 2 cores), a stall of every request in flight
    whenever one ran. In an MLflow scoring-server worker (2026-12-07, the 300k-row DIN of ``benchmarks/serving.py``,
    582,000 objects tracked): 255-262 ms each; one came in 5,268 requests (60 s of 1 x 500, 500-row and one-row
    requests in turn) and took 285 ms. Frozen, the same requests ran 26 full collections of ~1 ms. For a process
    that serves: objects alive now that later become cyclic garbage are never freed."""
    import gc

    gc.collect()
    gc.freeze()


def _load() -> ScoringApp:
    from recpipe import __version__
    from recpipe.export.layout import is_retrieval_export
    from recpipe.export.loaders import load_backend

    folder = os.environ.get(ENV_FOLDER)
    if not folder:
        raise RuntimeError(f"${ENV_FOLDER} must name the export folder to serve")
    timeout = float(os.environ.get(ENV_TIMEOUT, DEFAULT_TIMEOUT_S))
    ranker = os.environ.get(ENV_RANKER)
    version = f"recpipe {__version__}"
    if is_retrieval_export(folder):  # two towers: each user row's top-K items
        from recpipe.export.retriever import Retriever

        if ranker:  # retrieve then rank
            from recpipe.export.pair import PairInvoker

            return ScoringApp(PairInvoker(Retriever(folder), load_backend(ranker)), timeout, version)
        return ScoringApp(RetrievalInvoker(Retriever(folder)), timeout, version)
    if ranker:
        raise RuntimeError(f"{folder}: a ranker is served behind a retrieval export, and this is not one")
    return ScoringApp(load_backend(folder), timeout, version)


def run(
    folder: str | Path,
    host: str,
    port: int,
    workers: int = 1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ranker: str | Path | None = None,
) -> None:
    """Serve ``folder`` on ``host:port`` with uvicorn: ``workers`` processes sharing the socket, each with its
    own copy of the model; a worker that dies is started again (uvicorn's supervisor). ``ranker``: a ranking
    export folder that ranks a retrieval ``folder``'s candidates (:class:`~recpipe.export.pair.PairInvoker`)."""
    import uvicorn

    if workers < 1:
        raise ValueError(f"workers must be positive, got {workers}")
    os.environ[ENV_FOLDER] = str(Path(folder).resolve())
    os.environ[ENV_TIMEOUT] = str(timeout_s)
    if ranker is not None:
        os.environ[ENV_RANKER] = str(Path(ranker).resolve())
    else:
        os.environ.pop(ENV_RANKER, None)
    uvicorn.run(
        "recpipe.export.server:app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,
        log_level="info",
        timeout_keep_alive=30,
        # uvloop's event loop and httptools' parser (both in requirements/lock.txt) over asyncio and h11:
        # benchmarks/serving_load.py, 8 clients on 2 cores, 2026-12-03: 99-102 rps against 83-93 (1 worker x
        # 2 threads, interleaved; benchmarks/RESULTS.md).
        loop="uvloop",
        http="httptools",
        # The supervisor replaces a worker that does not answer its ping in this many seconds. uvicorn's 5 s
        # killed workers still loading torch and the model on a busy 2-core machine (the restarted worker of
        # tests/tracking/test_scoring_server.py was not up within 120 s at load 3-5): starting is not hung.
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m recpipe.export.server FOLDER``: what ``recpipe serve`` runs once it has verified and
    downloaded the registered version (a fresh process, so the torch threads and malloc settings of its
    environment hold from the start)."""
    import argparse
    import shutil
    import signal

    p = argparse.ArgumentParser(prog="python -m recpipe.export.server", description=run.__doc__)
    p.add_argument("folder", help="a verified export folder (one backend's, e.g. export/rtp)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5001)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds before a 504")
    p.add_argument(
        "--ranker", metavar="FOLDER", help="a ranking export folder ranking the retrieval FOLDER's candidates"
    )
    p.add_argument(
        "--remove-after", metavar="DIR", help="a folder (the download) deleted when the server stops"
    )
    a = p.parse_args(argv)
    # uvicorn (one worker) shuts down on SIGTERM, then restores the handler it found and raises the signal
    # again: with the default handler the process died there and `finally` never ran, leaving every
    # download behind (~200 MB each in /tmp after a test suite). The handler found is this one.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        run(a.folder, a.host, a.port, a.workers, a.timeout, a.ranker)
    finally:
        if a.remove_after:
            shutil.rmtree(a.remove_after, ignore_errors=True)
    return 0


def _exit_on_signal(signum: int, frame: object) -> None:
    """Leave by ``SystemExit`` (``finally`` clauses run), with the shell's status for the signal."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    raise SystemExit(main())
