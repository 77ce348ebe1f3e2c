"""Mutual exclusion for registry read-modify-write sequences (promotion, rollback).

MLflow has no transactions, so "read champion and history, decide, move the alias, append to the
history" must be serialized by a lock:

* **Local store** (``sqlite:///path``, ``file:``): ``fcntl.flock`` on a file next to the store. The
  kernel grants it to one process at a time and releases it if the holder dies. Guarantee: exclusive
  among processes on the machine that holds the file (not across NFS clients).

* **Tracking server or remote database**: a *lease registered model* named ``<model>.promotion-lock``.
  ``create_registered_model`` is the one compare-and-set MLflow offers: the store's unique key on
  the name lets exactly one concurrent create succeed, and the owner tag is written in the same
  insert. Release deletes it. A create whose response was lost (and retried by the client) is
  recognized by its owner tag. A holder that died leaves the lease behind; a waiter that has seen the
  *same* owner hold it for ``lease_ttl_s`` (its own monotonic clock, so no clock skew) deletes it.
  Guarantee: exclusive as long as no holder keeps the lease longer than ``lease_ttl_s``; holders call
  ``verify()`` right before writing, which narrows (does not close) the window after a stale break.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mlflow.exceptions import MlflowException

from recpipe.tracking.uri import _ALREADY_EXISTS, _NOT_FOUND, client, error_code, local_store_path

LOCK_SUFFIX = ".promotion-lock"
TAG_LOCK_OWNER = "recpipe.lock_owner"


class LockTimeout(TimeoutError):
    """The promotion lock was not obtained in time."""


@dataclass
class LockHandle:
    """What the holder of a promotion lock knows: how it is held and by whom."""

    kind: str  # "file" or "registry"
    owner: str
    where: str

    def verify(self) -> bool:  # overridden per kind
        return True


def lock_file_path(uri: str, model_name: str) -> Path | None:
    """The lock file for ``model_name`` in a local store, or None for a remote store."""
    store = local_store_path(uri)
    if store is None:
        return None
    key = hashlib.sha256(model_name.encode()).hexdigest()[:12]
    if uri.startswith("sqlite:"):
        return store.with_name(f"{store.name}.promotion-{key}.lock")
    return store / f".recpipe-promotion-{key}.lock"


def _owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@contextmanager
def _file_lock(path: Path, timeout_s: float, poll_s: float) -> Iterator[LockHandle]:
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    f: IO[str] = open(path, "a+")  # noqa: SIM115 - held for the lifetime of the lock
    try:
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(f"promotion lock {path} still held after {timeout_s:.0f} s") from None
                time.sleep(poll_s * (0.5 + random.random()))
        handle = LockHandle(kind="file", owner=_owner_id(), where=str(path))
        try:
            yield handle
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    finally:
        f.close()


class _RegistryLease(LockHandle):
    def __init__(self, uri: str, model_name: str) -> None:
        super().__init__(
            kind="registry", owner=_owner_id(), where=f"{uri} registered model {model_name}{LOCK_SUFFIX}"
        )
        self._client = client(uri)
        self._name = model_name + LOCK_SUFFIX

    def _holder(self) -> str | None:
        """The lease's owner; None when there is no lease."""
        try:
            rm = self._client.get_registered_model(self._name)
        except MlflowException as err:
            if error_code(err) in _NOT_FOUND:
                return None
            raise
        return (rm.tags or {}).get(TAG_LOCK_OWNER, "")

    def _try_create(self) -> bool:
        try:
            self._client.create_registered_model(
                self._name,
                tags={TAG_LOCK_OWNER: self.owner},
                description="recpipe promotion lease; deleted when the promotion ends. Do not use.",
            )
            return True
        except MlflowException as err:
            # NOT_FOUND from a create: MLflow's store looks the existing model up after the failed insert (to
            # tell a prompt from a model), and the holder deleted its lease in between. Not ours: try again.
            if error_code(err) not in _ALREADY_EXISTS | _NOT_FOUND:
                raise
            return False

    def acquire(self, timeout_s: float, lease_ttl_s: float, poll_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        first_seen: dict[str, float] = {}
        while True:
            if self._try_create():
                return
            holder = self._holder()
            if holder == self.owner:  # our create succeeded but its response was lost and retried
                return
            now = time.monotonic()
            if holder is not None:
                since = first_seen.setdefault(holder, now)
                if now - since > lease_ttl_s and self._holder() == holder:
                    # The same owner for a whole TTL: it died holding the lease. Break it.
                    self._delete()
                    first_seen.pop(holder, None)
                    continue
            if now > deadline:
                raise LockTimeout(f"promotion lease {self._name} held by {holder!r} after {timeout_s:.0f} s")
            time.sleep(poll_s * (0.5 + random.random()))

    def _delete(self) -> None:
        try:
            self._client.delete_registered_model(self._name)
        except MlflowException as err:
            if error_code(err) not in _NOT_FOUND:
                raise

    def verify(self) -> bool:
        return self._holder() == self.owner

    def release(self) -> None:
        if self._holder() == self.owner:
            self._delete()


@contextmanager
def promotion_lock(
    uri: str,
    model_name: str,
    timeout_s: float = 300.0,
    lease_ttl_s: float = 120.0,
    poll_s: float = 0.1,
    force_registry_lease: bool = False,
) -> Iterator[LockHandle]:
    """Hold the promotion lock of ``model_name`` in the store at ``uri`` (see the module docstring).

    Args:
        uri (str): tracking/registry URI.
        model_name (str): the registered model whose aliases and history will change.
        timeout_s (float): give up (``LockTimeout``) after waiting this long.
        lease_ttl_s (float): registry lease only: how long an unchanged holder is trusted.
        poll_s (float): mean wait between attempts (jittered).
        force_registry_lease (bool): use the registry lease even for a local store (tests).
    """
    path = None if force_registry_lease else lock_file_path(uri, model_name)
    if path is not None:
        with _file_lock(path, timeout_s, poll_s) as handle:
            yield handle
        return
    lease = _RegistryLease(uri, model_name)
    lease.acquire(timeout_s, lease_ttl_s, poll_s)
    try:
        yield lease
    finally:
        lease.release()
