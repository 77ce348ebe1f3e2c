"""Local network helpers for the tests that start servers (MLflow, the scoring server, gloo rendezvous), and
the scoring server itself."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str, headers: dict[str, str] | None = None, timeout: float = 30) -> int:
    """The HTTP status of a GET of ``url`` (an error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class ScoringServer(NamedTuple):
    url: str
    process: subprocess.Popen


@contextmanager
def scoring_server(
    model_uri: str, tracking_uri: str, workdir: Path, timeout: float = 180, extra: Sequence[str] = ()
) -> Iterator[ScoringServer]:
    """``recpipe serve`` for ``model_uri`` (recpipe's scoring server, MLflow's with ``--server mlflow``), a real
    process on 127.0.0.1, started in ``workdir`` (its log: ``workdir/server.log``; more ``recpipe serve``
    options in ``extra``); yields its base URL and process once ``/ping`` answers, and stops it after (SIGTERM),
    then checks that recpipe's server deleted its download."""
    port = free_port()
    log_path = workdir / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    recpipe = Path(sys.executable).with_name("recpipe")
    env = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": "/usr/bin:/bin"}
    server = subprocess.Popen(
        [str(recpipe), "serve", "--model", model_uri, "--tracking-uri", tracking_uri, "--port", str(port),
         *extra],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    download = None
    try:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError(
                        f"scoring server did not start:\n{log_path.read_text()[-3000:]}"
                    ) from None
                time.sleep(0.5)
        download = _removed_after(server.pid)
        yield ScoringServer(url, server)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    # recpipe's server deletes the version it downloaded when it stops (SIGTERM, as Kubernetes stops a pod)
    assert download is None or not download.exists(), f"the stopped server left {download} behind"


def _removed_after(pid: int) -> Path | None:
    """The folder recpipe's server process ``pid`` deletes when it stops (its ``--remove-after``)."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(args[args.index(b"--remove-after") + 1].decode()) if b"--remove-after" in args else None


def invoke(url: str, body: dict) -> tuple[int, dict]:
    """POST ``body`` to the scoring server's ``/invocations``: ``(HTTP status, JSON answer)``."""
    req = urllib.request.Request(
        f"{url}/invocations", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def predictions(body: dict) -> np.ndarray:
    """The scores of a scoring-server answer (a list of numbers, or of one-entry records)."""
    preds = body["predictions"]
    return np.asarray([p if isinstance(p, float | int) else next(iter(p.values())) for p in preds], float)


def asgi_call(app: Any, method: str, path: str, body: bytes = b"", headers=()) -> tuple[int, bytes]:
    """One request through an ASGI application (recpipe's ``ScoringApp``), as an ASGI server hands it over:
    ``(HTTP status, body)``."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])
