"""Local network helpers for the tests that start servers (MLflow, the scoring server, gloo rendezvous)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request


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
